//! kube-scheduler, which places the pods of a cluster whose nodes run containers.

use std::path::Path;
use std::time::Duration;

use kube::config::Kubeconfig;

use crate::Error;
use crate::kube_controller_manager::wait_healthy;
use crate::pki::PkiFiles;
use crate::ports::free_port;
use crate::process::Supervised;

/// How long kube-scheduler may take to answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// kube-scheduler against a control plane. Ended when dropped.
#[derive(Debug)]
pub struct Scheduler {
    process: Supervised,
}

impl Scheduler {
    /// Process id of kube-scheduler.
    pub fn process_id(&self) -> u32 {
        self.process.id()
    }
}

/// Starts kube-scheduler as the admin of `admin_path` (whose contents are `admin`), serving on
/// 127.0.0.1 with the apiserver's serving certificate of `pki`, its log under `dir`; waits until
/// its `/healthz` answers `ok`.
pub(crate) async fn start(
    binary: &Path,
    dir: &Path,
    (admin, admin_path): (&Kubeconfig, &Path),
    pki: &PkiFiles,
) -> Result<Scheduler, Error> {
    let port = free_port()?;
    let args = vec![
        format!("--kubeconfig={}", admin_path.display()),
        format!("--authentication-kubeconfig={}", admin_path.display()),
        format!("--authorization-kubeconfig={}", admin_path.display()),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        "--profiling=false".to_owned(),
    ];
    let mut process = Supervised::spawn("kube-scheduler", binary, &args, &dir.join("kube-scheduler.log"), None)?;
    wait_healthy(&mut process, admin, &format!("https://127.0.0.1:{port}"), START_TIMEOUT).await?;
    Ok(Scheduler { process })
}
