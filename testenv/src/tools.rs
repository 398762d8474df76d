//! Finds the tool binaries: etcd, kube-apiserver, kube-controller-manager, kubelet, fake-cri,
//! csr-oracle, crane and cosign.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::Error;

/// Environment variable naming a directory that holds `etcd`, `kube-apiserver`,
/// `kube-controller-manager`, `kubelet`, `fake-cri`, `helm`, `csr-oracle`, `go-flags`, `crane` and
/// `cosign`; when it is set, `scripts/build-tools.sh` is not run.
pub const TOOLS_DIR_ENV: &str = "NODE_CSR_APPROVER_TOOLS_DIR";

/// Environment variable choosing the Kubernetes release whose etcd, kube-apiserver,
/// kube-controller-manager and kubelet run: one of the supported releases of `tools/versions.env`
/// (`scripts/build-tools.sh --list`), for example `v1.36.3`. Unset: the newest. The other tools
/// (helm, csr-oracle, fake-cri, go-flags) are the same for every release. Without effect when
/// [`TOOLS_DIR_ENV`] names the directory.
pub const KUBERNETES_VERSION_ENV: &str = "NODE_CSR_APPROVER_KUBERNETES_VERSION";

/// The tools this process needs, when it needs fewer than all ([`build_only`]).
static ONLY: OnceLock<&'static [&'static str]> = OnceLock::new();

/// Makes [`tools_dir`] build (when they are not cached yet) only `tools` of this process's tools
/// directory, e.g. the demo's etcd, kube-apiserver, kube-controller-manager, kubelet and fake-cri;
/// the first call wins.
pub fn build_only(tools: &'static [&'static str]) {
    let _ = ONLY.set(tools);
}

/// `tools/versions.env`, the one place the supported releases are listed.
const VERSIONS_ENV: &str = include_str!("../../tools/versions.env");

/// The Kubernetes release the tools directory is built for: `$NODE_CSR_APPROVER_KUBERNETES_VERSION`,
/// or else the newest supported release (`KUBERNETES_VERSION` of `tools/versions.env`).
pub fn kubernetes_version() -> String {
    match std::env::var(KUBERNETES_VERSION_ENV) {
        Ok(version) if !version.is_empty() => version,
        _ => VERSIONS_ENV
            .lines()
            .find_map(|line| line.strip_prefix("KUBERNETES_VERSION="))
            .map(|version| version.trim().to_owned())
            .unwrap_or_default(),
    }
}

/// The directory holding the tool binaries: `$NODE_CSR_APPROVER_TOOLS_DIR`, or else the directory
/// printed by `scripts/build-tools.sh --kubernetes <`[`kubernetes_version`]`>`, which builds the
/// tools (only those of [`build_only`], when it was called) first when they are not cached yet
/// (its progress goes to stderr).
pub fn tools_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(TOOLS_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-tools.sh");
    let mut command = Command::new("bash");
    command.arg(&script).args(["--kubernetes", &kubernetes_version()]);
    if let Some(only) = ONLY.get() {
        command.args(["--only", &only.join(",")]);
    }
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(Error::io(format!("running {}", script.display())))?;
    if !output.status.success() {
        return Err(Error::Tools(format!("{} exited with {}", script.display(), output.status)));
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .rfind(|line| !line.trim().is_empty())
        .map(|line| PathBuf::from(line.trim()))
        .ok_or_else(|| Error::Tools(format!("{} printed no directory", script.display())))
}

/// Paths of the binaries a control plane runs, and the directory holding them (and the kubelet's).
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub(crate) dir: PathBuf,
    pub(crate) etcd: PathBuf,
    pub(crate) kube_apiserver: PathBuf,
    pub(crate) kube_controller_manager: PathBuf,
}

impl Tools {
    /// Locates (building if needed) the binaries and checks that they exist.
    pub(crate) fn locate() -> Result<Tools, Error> {
        let dir = tools_dir()?;
        Ok(Tools {
            etcd: existing(&dir, "etcd")?,
            kube_apiserver: existing(&dir, "kube-apiserver")?,
            kube_controller_manager: existing(&dir, "kube-controller-manager")?,
            dir,
        })
    }
}

/// The path of tool `name` in the tools directory `dir`, if that file exists.
pub(crate) fn existing(dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    if path.is_file() { Ok(path) } else { Err(Error::MissingTool(path)) }
}
