//! kube-controller-manager: the cluster's real signer, alone or with the default controllers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::Kubeconfig;

use crate::pki::PkiFiles;
use crate::ports::free_port;
use crate::process::Supervised;
use crate::{Error, kubeconfig};

/// How long kube-controller-manager may take to answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The name, in every supported release, of the controller that signs approved CSRs of the
/// `kubernetes.io/*` signers (`csrsigning` is its alias).
const SIGNING_CONTROLLER: &str = "certificatesigningrequest-signing-controller";

/// Validity of the certificates it issues unless a CSR asks for less (kube-controller-manager's
/// default, as on a real cluster): a year.
pub(crate) const SIGNING_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// kube-controller-manager running the CSR signing controller against a control plane, signing
/// with the cluster CA. Ended when dropped.
#[derive(Debug)]
pub struct Signer {
    process: Supervised,
    url: String,
    log: PathBuf,
}

impl Signer {
    /// Process id of kube-controller-manager.
    pub fn process_id(&self) -> u32 {
        self.process.id()
    }

    /// Its secure port, `https://127.0.0.1:<port>`, serving `/healthz` with a certificate of the
    /// cluster CA.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

/// Which controllers kube-controller-manager runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Controllers {
    /// Only the CSR signer.
    Signing,
    /// Its default set (`*`), the signer among them, with the root CA file published to every
    /// namespace for pods.
    Default,
}

/// Starts kube-controller-manager with `controllers`, as the admin of `admin_path` (whose contents
/// are `admin`), signing with the CA of `pki` for at most `signing_duration` (whole seconds,
/// `--cluster-signing-duration`), its log under `dir`; waits until its `/healthz` answers `ok`. It serves with the apiserver's serving certificate
/// (valid for 127.0.0.1). No delegated authentication is configured: `/healthz` is always allowed,
/// and nothing else of its port is used.
pub(crate) async fn start(
    binary: &Path,
    dir: &Path,
    (admin, admin_path): (&Kubeconfig, &Path),
    pki: &PkiFiles,
    controllers: Controllers,
    signing_duration: Duration,
) -> Result<Signer, Error> {
    let port = free_port()?;
    let mut args = vec![
        format!("--kubeconfig={}", admin_path.display()),
        "--leader-elect=false".to_owned(),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--cluster-signing-cert-file={}", pki.ca_cert.display()),
        format!("--cluster-signing-key-file={}", pki.ca_key.display()),
        format!("--cluster-signing-duration={}s", signing_duration.as_secs()),
        "--profiling=false".to_owned(),
    ];
    match controllers {
        Controllers::Signing => args.push(format!("--controllers={SIGNING_CONTROLLER}")),
        Controllers::Default => args.push(format!("--root-ca-file={}", pki.ca_cert.display())),
    }
    let log = dir.join("kube-controller-manager.log");
    let mut process = Supervised::spawn("kube-controller-manager", binary, &args, &log, None)?;
    let url = format!("https://127.0.0.1:{port}");
    wait_healthy(&mut process, admin, &url, START_TIMEOUT).await?;
    Ok(Signer { process, url, log })
}

/// Waits up to `timeout` until `url/healthz` of a control-plane component answers, over TLS
/// verified with the cluster CA.
pub(crate) async fn wait_healthy(
    process: &mut Supervised,
    admin: &Kubeconfig,
    url: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let cluster_url: http::Uri =
        url.parse().map_err(|error| Error::Unexpected(format!("component URL {url}: {error}")))?;
    let client = kubeconfig::client(admin, |config| config.cluster_url = cluster_url).await?;
    process
        .wait_healthy(timeout, || async {
            let request = http::Request::get("/healthz").body(Vec::new()).map_err(kube::Error::HttpError)?;
            client.request_text(request).await
        })
        .await
}
