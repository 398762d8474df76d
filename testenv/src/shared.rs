//! One control plane, and at most one signer on it, per test process.

use std::path::PathBuf;

use tokio::sync::OnceCell;

use crate::{ATTACH_ENV, ControlPlane, Error, Signer};

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

/// The signer of the shared control plane; `None` when attached (its owner runs the signer).
static SHARED_SIGNER: OnceCell<Option<Signer>> = OnceCell::const_new();

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

    /// The shared control plane ([`ControlPlane::shared`]) with kube-controller-manager's CSR
    /// signer running on it ([`ControlPlane::start_signer`]), started once per process on first
    /// use, so approved CSRs get their certificates. When attached, the signer is the one the
    /// control plane's owner runs (`local-cluster` runs one).
    pub async fn shared_with_signer() -> Result<&'static ControlPlane, Error> {
        let control_plane = ControlPlane::shared().await?;
        SHARED_SIGNER
            .get_or_try_init(|| async {
                match control_plane.start_signer().await {
                    Ok(signer) => Ok(Some(signer)),
                    Err(Error::NotOwned(_)) => Ok(None),
                    Err(error) => Err(error),
                }
            })
            .await?;
        Ok(control_plane)
    }
}
