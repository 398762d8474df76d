//! The error type of testenv.

use std::path::PathBuf;

/// Everything that can go wrong while starting, using or stopping a control plane, its signer or
/// the oracle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `scripts/build-tools.sh` failed or printed no directory.
    #[error("building the tools failed: {0}")]
    Tools(String),
    /// A tool binary is missing from the tools directory.
    #[error("{} not found (set NODE_CSR_APPROVER_TOOLS_DIR or run scripts/build-tools.sh)", .0.display())]
    MissingTool(PathBuf),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Generating a key or certificate failed.
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    /// A component did not become ready; carries the tail of its log.
    #[error("{component} did not start: {reason}\n--- last lines of {component} log ---\n{log_tail}")]
    Start {
        /// `etcd`, `kube-apiserver`, `kube-controller-manager`, `kubelet` or `fake-cri`.
        component: &'static str,
        /// Why it is considered failed (exited, timed out).
        reason: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A kubeconfig could not be read, written or turned into a client configuration.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The apiserver answered without what was asked for.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// Waiting for something in the cluster timed out.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// `csr-oracle` failed to start, to answer, or answered something unreadable.
    #[error("csr-oracle: {0}")]
    Oracle(String),
    /// A node network (see [`crate::NodeNetwork`]) could not be created: this machine uses its
    /// address ranges, or a command (`ip`, `unshare`, `nsenter`) failed.
    #[error("node network: {0}")]
    Network(String),
    /// The operation needs processes this [`crate::ControlPlane`] does not own (it is attached).
    #[error("{0} needs a control plane started by this process, not an attached one")]
    NotOwned(&'static str),
    /// Programs a container node needs are not installed (`scripts/install-node-runtime.sh`
    /// installs them).
    #[error("a container node needs {0}: run scripts/install-node-runtime.sh as root")]
    MissingPrograms(String),
    /// A tool (crane, cosign, helm) exited unsuccessfully.
    #[error("{command} exited with {status}: {output}")]
    ToolFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed, standard error first.
        output: String,
    },
}

impl Error {
    /// A closure wrapping an I/O error with `context`, what was being done, for `map_err`.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
