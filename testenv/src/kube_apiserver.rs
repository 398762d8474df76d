//! kube-apiserver: its flags, start and readiness.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::config::Kubeconfig;
use tokio::time::{Instant, sleep};

use crate::pki::PkiFiles;
use crate::process::Supervised;
use crate::{Error, kubeconfig};

/// How long kube-apiserver may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The cluster's Service addresses (ClusterIPs); the first, 10.0.0.1, is the `kubernetes`
/// Service's.
pub(crate) const SERVICE_RANGE: &str = "10.0.0.0/24";

/// Issuer of the ServiceAccount tokens this apiserver signs.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Everything needed to (re)start the same kube-apiserver.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) binary: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) log: PathBuf,
}

impl Launch {
    /// The launch of an apiserver on `127.0.0.1:port` storing in etcd at `etcd_url`, with its
    /// certificate directory and log under `dir`; advertised on `advertise` (its endpoint
    /// reconciler writing it into the `default/kubernetes` EndpointSlice), or on 127.0.0.1 with no
    /// reconciler. The `ServiceAccount` admission plugin (which mounts a token into pods and
    /// rejects pods whose ServiceAccount does not exist yet) runs only for `pods_run`: a cluster
    /// whose nodes run containers and whose controller manager creates ServiceAccounts; such a
    /// cluster also runs `NodeRestriction`, as kubeadm's do.
    pub(crate) fn new(
        binary: &Path,
        dir: &Path,
        port: u16,
        etcd_url: &str,
        pki: &PkiFiles,
        (advertise, pods_run): (Option<IpAddr>, bool),
    ) -> Launch {
        let (advertised, reconciler) = match advertise {
            Some(address) => (address.to_string(), "lease"),
            None => ("127.0.0.1".to_owned(), "none"),
        };
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--advertise-address={advertised}"),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", dir.join("apiserver-certs").display()),
            format!("--tls-cert-file={}", pki.serving_cert.display()),
            format!("--tls-private-key-file={}", pki.serving_key.display()),
            format!("--client-ca-file={}", pki.ca_cert.display()),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", pki.service_account_public_key.display()),
            format!("--service-account-signing-key-file={}", pki.service_account_key.display()),
            format!("--service-cluster-ip-range={SERVICE_RANGE}"),
            "--authorization-mode=Node,RBAC".to_owned(),
            "--enable-bootstrap-token-auth".to_owned(),
            // Kubelets' serving certificates are verified with the cluster CA, at the node's
            // InternalIP (test node names resolve only on the tests' own DNS server).
            format!("--kubelet-certificate-authority={}", pki.ca_cert.display()),
            format!("--kubelet-client-certificate={}", pki.admin_cert.display()),
            format!("--kubelet-client-key={}", pki.admin_key.display()),
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
            format!("--endpoint-reconciler-type={reconciler}"),
            "--profiling=false".to_owned(),
        ];
        if pods_run {
            // As kubeadm enables it: a kubelet may write only its own Node and the pods bound to it.
            args.push("--enable-admission-plugins=NodeRestriction".to_owned());
        } else {
            args.push("--disable-admission-plugins=ServiceAccount".to_owned());
        }
        Launch { binary: binary.to_owned(), args, log: dir.join("kube-apiserver.log") }
    }

    /// Starts kube-apiserver and waits until it is ready for `admin`.
    pub(crate) async fn start(&self, admin: &Kubeconfig) -> Result<Supervised, Error> {
        let mut process = Supervised::spawn("kube-apiserver", &self.binary, &self.args, &self.log, None)?;
        wait_ready(&mut process, admin).await?;
        Ok(process)
    }
}

/// Waits until `/readyz` answers `ok` and the `default` namespace exists.
async fn wait_ready(process: &mut Supervised, admin: &Kubeconfig) -> Result<(), Error> {
    let client = kubeconfig::client(admin, |_| {}).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = process.exited() {
            return Err(process.start_error(format!("exited with {status}")));
        }
        let last = match ready(&client, &namespaces).await {
            Ok(true) => return Ok(()),
            Ok(false) => "readyz ok, namespace default missing".to_owned(),
            Err(error) => error.to_string(),
        };
        if Instant::now() > deadline {
            return Err(process.start_error(format!("not ready after {START_TIMEOUT:?}; last answer: {last}")));
        }
        sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `/readyz` answers and the `default` namespace exists.
async fn ready(client: &kube::Client, namespaces: &Api<Namespace>) -> Result<bool, kube::Error> {
    let request = http::Request::get("/readyz").body(Vec::new()).map_err(kube::Error::HttpError)?;
    client.request_text(request).await?;
    Ok(namespaces.get_opt("default").await?.is_some())
}
