//! The approver installed as operators install it: the image built by `scripts/build-image.sh`,
//! the chart installed by `helm` into a [`ContainerCluster`] whose node runs containers, with the
//! chart's default values and the two required ones.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use testenv::{ContainerCluster, ContainerClusterOptions};
use tokio::sync::{Mutex, MutexGuard};

use super::chart::{chart, helm};

/// The release and its namespace.
pub const RELEASE: &str = "approver";
pub const NAMESPACE: &str = "csr-system";

/// The node's name, under [`PROVIDER_REGEX`].
pub const NODE_NAME: &str = "node-1.nodes.example.com";

/// The two required values: node names and node addresses (the node networks' range).
pub const PROVIDER_REGEX: &str = "^[a-z0-9-]+\\.nodes\\.example\\.com$";
pub const PROVIDER_IP_PREFIXES: &str = "198.51.100.0/24";

/// The chart's `test.image`, as containerd names it.
const BUSYBOX: &str = "docker.io/library/busybox:1.37";

/// How long `helm install --wait` and friends may take.
pub const HELM_TIMEOUT: &str = "180s";

/// This test's turn to run a cluster (one at a time: each is a whole cluster on two cores), or
/// `None`, printing why, when this machine cannot run a container node (not root).
pub async fn can_run() -> Option<MutexGuard<'static, ()>> {
    static TURN: Mutex<()> = Mutex::const_new(());
    if !testenv::running_as_root().unwrap_or(false) {
        eprintln!("skipped: a container node needs root");
        return None;
    }
    Some(TURN.lock().await)
}

/// A container cluster with the approver's image (built from `$NODE_CSR_APPROVER_BIN` when set,
/// else from a fresh static build) and the chart's test image imported; the images' directory
/// lives as long as the returned guard.
pub async fn cluster(control_plane_node: bool) -> (ContainerCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let approver = build_image(dir.path());
    let busybox = testenv::busybox_image(BUSYBOX, &dir.path().join("busybox.tar")).unwrap();
    let mut options = ContainerClusterOptions::new(NODE_NAME, vec![approver, busybox]);
    options.control_plane_node = control_plane_node;
    let started = Instant::now();
    let cluster = ContainerCluster::start(options).await.unwrap();
    cluster.wait_node_ready().await.unwrap();
    eprintln!("cluster up in {:.1} s", started.elapsed().as_secs_f64());
    (cluster, dir)
}

/// `scripts/build-image.sh` into `dir`: the approver's image archive.
fn build_image(dir: &Path) -> PathBuf {
    let script = super::chart::root().join("scripts/build-image.sh");
    let out = dir.join("approver.tar");
    let mut command = Command::new("bash");
    command.arg(&script).arg("--output").arg(&out).stdin(Stdio::null()).stderr(Stdio::inherit());
    let output = command.output().unwrap();
    assert!(output.status.success(), "{} failed", script.display());
    out
}

/// `helm ARGS… --kubeconfig <the cluster's admin>`: `Ok(stdout)` or `Err(stdout and stderr)`.
pub fn helm_in(cluster: &ContainerCluster, args: &[&str]) -> Result<String, String> {
    let output = Command::new(helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.control_plane().kubeconfig_path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))
    }
}

/// `helm install` (or, with `verb` "upgrade", an upgrade) of the chart as the README says: the
/// two required values and `extra` ones, `--wait`.
pub fn install(cluster: &ContainerCluster, verb: &str, extra: &[&str]) -> Result<String, String> {
    let chart = chart();
    let regex = format!("providerRegex={PROVIDER_REGEX}");
    let prefixes = format!("providerIpPrefixes={{{PROVIDER_IP_PREFIXES}}}");
    let mut args = vec![
        verb,
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        HELM_TIMEOUT,
        "--set-literal",
        &regex,
        "--set",
        &prefixes,
    ];
    args.extend_from_slice(extra);
    helm_in(cluster, &args)
}

/// The release's approver pods now (those of its ReplicaSets, not `helm test`'s).
pub async fn pods(admin: &Client) -> Vec<Pod> {
    let params = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    let pods = Api::<Pod>::namespaced(admin.clone(), NAMESPACE).list(&params).await.unwrap().items;
    pods.into_iter().filter(|pod| pod.owner_references().iter().any(|owner| owner.kind == "ReplicaSet")).collect()
}

/// Whether `pod` is Running with every container ready.
pub fn running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The holder of the approver's Lease, if any.
pub async fn lease_holder(admin: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), NAMESPACE).get_opt("node-csr-approver").await.unwrap()?;
    lease.spec.and_then(|spec| spec.holder_identity).filter(|holder| !holder.is_empty())
}

/// Waits up to `limit` for a kubelet-serving CSR of the node to be approved and issued; returns it.
pub async fn wait_issued_serving_csr(admin: &Client, limit: Duration) -> Option<CertificateSigningRequest> {
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let issued = csrs.list(&ListParams::default()).await.unwrap().items.into_iter().find(|csr| {
            csr.spec.signer_name == "kubernetes.io/kubelet-serving"
                && csr.spec.username.as_deref() == Some(&format!("system:node:{NODE_NAME}"))
                && csr.status.as_ref().is_some_and(|status| status.certificate.is_some())
        });
        if issued.is_some() {
            return issued;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// The name of the condition that decided `csr` and its reason.
pub fn decision(csr: &CertificateSigningRequest) -> Option<(String, String)> {
    let conditions = csr.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == "Approved" || c.type_ == "Denied")?;
    Some((condition.type_.clone(), condition.reason.clone().unwrap_or_default()))
}

/// Names of `pods`.
pub fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(ResourceExt::name_any).collect()
}

/// What a failure needs: the pods' states and the tail of the kubelet's log.
pub fn diagnose(cluster: &ContainerCluster) -> String {
    let kubelet = cluster.node().kubelet_log();
    let lines: Vec<&str> = kubelet.lines().collect();
    let pods = helm_in(cluster, &["status", RELEASE, "--namespace", NAMESPACE]).unwrap_or_else(|error| error);
    format!("helm status:\n{pods}\nkubelet log tail:\n{}", lines[lines.len().saturating_sub(40)..].join("\n"))
}
