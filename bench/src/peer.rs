//! The Go kubelet-csr-approver (the tool users would otherwise run), run beside node-csr-approver
//! on the same control plane and DNS server with the same regex and prefixes.
//!
//! It resolves names only through the system resolver, which reads `/etc/resolv.conf` and asks
//! port 53. The bench therefore serves its DNS on [`PEER_DNS`] and starts the peer in a private
//! mount namespace (`unshare --mount`) where a `resolv.conf` naming that address is bind-mounted
//! over `/etc/resolv.conf`; nothing outside that process sees the change. Both need root.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use testkit::policy::REGEX;

use crate::csrs::NODE_PREFIXES;

/// Where the bench's DNS server listens when the peer runs: port 53 of a loopback address that
/// no system resolver uses.
pub const PEER_DNS: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 53, 53), 53));

/// The environment variable naming the peer's binary (overrides the tools cache).
pub const PEER_ENV: &str = "NODE_CSR_APPROVER_PEER_BIN";

/// The peer's binary and the `resolv.conf` it is given.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The kubelet-csr-approver binary.
    pub binary: PathBuf,
    /// A `resolv.conf` naming [`PEER_DNS`].
    pub resolv_conf: PathBuf,
}

/// Where `scripts/build-peer.sh` puts the peer, or [`PEER_ENV`] when set; `None` when the script
/// cannot say.
pub fn default_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(PEER_ENV) {
        return Some(PathBuf::from(path));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-peer.sh");
    let output = std::process::Command::new(script).arg("--print-path").stderr(Stdio::null()).output().ok()?;
    let path = String::from_utf8(output.stdout).ok()?;
    Some(PathBuf::from(path.trim_end()))
}

/// Why the peer cannot run here, if it cannot: it is not built, or this process is not root.
pub fn unavailable(binary: &Path) -> Option<String> {
    if !binary.is_file() {
        return Some(format!("{} is not built (scripts/build-peer.sh builds it)", binary.display()));
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("it needs root (port 53 and a private mount namespace)".into());
    }
    None
}

impl Peer {
    /// The peer at `binary`, with a `resolv.conf` written into `dir`.
    pub fn new(binary: PathBuf, dir: &Path) -> Result<Peer> {
        let resolv_conf = dir.join("resolv.conf");
        std::fs::write(&resolv_conf, format!("nameserver {}\noptions ndots:1 attempts:1\n", PEER_DNS.ip()))
            .with_context(|| format!("writing {}", resolv_conf.display()))?;
        if !binary.is_file() {
            bail!("no peer binary at {}", binary.display());
        }
        Ok(Peer { binary, resolv_conf })
    }

    /// The peer's command line: in its own mount namespace with the bench's `resolv.conf`, the
    /// bench's regex and prefixes, its health endpoint on 127.0.0.1:`health_port`, no metrics
    /// endpoint, no leader election, log level 0 (one line per decision, as ours at `info`), its
    /// stdout joined to its stderr (the log). `unshare` and `sh` exec it, so the child's pid is
    /// the peer's.
    pub fn command(&self, kubeconfig: &Path, bypass_dns: bool, health_port: u16) -> std::process::Command {
        let mut command = std::process::Command::new("unshare");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"exec >&2; mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(&self.resolv_conf)
            .arg(&self.binary)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--provider-regex={REGEX}"))
            .arg(format!("--provider-ip-prefixes={NODE_PREFIXES}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health_port}"))
            .arg("--metrics-bind-address=0")
            .arg("--level=0")
            .arg(format!("--bypass-dns-resolution={bypass_dns}"))
            .stdin(Stdio::null());
        command
    }
}
