//! One control plane per test process.

use std::path::PathBuf;

use tokio::sync::OnceCell;

use crate::{ATTACH_ENV, ControlPlane, Error};

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

impl ControlPlane {
    /// The control plane shared by every test of this process, started on first use; or, when
    /// `NODE_CSR_APPROVER_TESTENV_KUBECONFIG` names an admin kubeconfig, the running control plane
    /// it points at. It lives until the process exits, when the watchdogs end its processes and
    /// remove its directory. Ask it for a fresh client in each test: a client is bound to the
    /// tokio runtime it was made in, and every `#[tokio::test]` has its own.
    pub async fn shared() -> Result<&'static ControlPlane, Error> {
        SHARED
            .get_or_try_init(|| async {
                match std::env::var_os(ATTACH_ENV) {
                    Some(path) => ControlPlane::attach(&PathBuf::from(path)),
                    None => ControlPlane::start().await,
                }
            })
            .await
    }
}
