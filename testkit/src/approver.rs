//! The `node-csr-approver` binary as a child process: where it comes from, the command line every
//! caller shares, the ports it reports listening on, and the running [`Process`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

mod process;

pub use process::{Process, ProcessError};

/// Environment variable naming a prebuilt binary that [`binary`] returns instead of building one.
pub const BINARY_ENV: &str = "NODE_CSR_APPROVER_BIN";

/// Why the binary could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// cargo could not be run.
    #[error("running cargo: {0}")]
    Cargo(#[from] std::io::Error),
    /// cargo ran and failed.
    #[error("building node-csr-approver failed: cargo {0}")]
    Failed(ExitStatus),
}

/// The binary: [`BINARY_ENV`] when set, otherwise built with `cargo build -p node-csr-approver`
/// in this workspace (`--release` when `release`), honouring `CARGO_TARGET_DIR`.
pub fn binary(release: bool) -> Result<PathBuf, BuildError> {
    if let Some(path) = std::env::var_os(BINARY_ENV) {
        return Ok(PathBuf::from(path));
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().unwrap_or(manifest);
    let mut args = vec!["build", "-q", "-p", "node-csr-approver"];
    if release {
        args.push("--release");
    }
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(workspace)
        .args(&args)
        .status()?;
    if !status.success() {
        return Err(BuildError::Failed(status));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    Ok(target.join(if release { "release" } else { "debug" }).join("node-csr-approver"))
}

/// The controller's command line: `binary` with only `PATH` in its environment, `--kubeconfig`,
/// `--provider-regex` and `--provider-ip-prefixes`, both admin endpoints on 127.0.0.1 ports of the
/// kernel's choosing (see [`listening`]), stdin and stdout closed. Callers add the log flags,
/// stderr and their own flags.
pub fn command(binary: &Path, kubeconfig: &Path, regex: &str, prefixes: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--provider-regex", regex, "--provider-ip-prefixes", prefixes])
        .arg("--health-probe-bind-address=127.0.0.1:0")
        .arg("--metrics-bind-address=127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// Where the binary listens for `endpoints` (`health` or `metrics`), from its JSON log `log`: the
/// `listening` line it writes once it is bound. Lines that are not JSON are passed over.
pub fn listening(log: &str, endpoints: &str) -> Option<SocketAddr> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["message"] == "listening" && line["endpoints"] == endpoints)
        .and_then(|line| line["address"].as_str()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_reads_the_address_of_the_named_endpoints() {
        let log = concat!(
            "not json\n",
            r#"{"message":"listening","endpoints":"health","address":"127.0.0.1:4001"}"#,
            "\n",
            r#"{"message":"listening","endpoints":"metrics","address":"127.0.0.1:4002"}"#,
        );
        assert_eq!(listening(log, "health"), Some(SocketAddr::from(([127, 0, 0, 1], 4001))));
        assert_eq!(listening(log, "metrics"), Some(SocketAddr::from(([127, 0, 0, 1], 4002))));
        assert_eq!(listening(log, "other"), None);
    }
}
