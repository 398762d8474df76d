//! `cargo run -p demo -- --helm`: the approver installed as operators install it. It builds the
//! image (`scripts/build-image.sh`, from a static release build), starts a cluster whose one node
//! runs containers (`testenv::ContainerCluster`: containerd, runc, a CNI bridge, kube-proxy, a
//! scheduler, cluster DNS; root only), installs the chart with `helm install --wait` and its
//! defaults plus the two required values, then shows the pods, the node's own serving CSR as the
//! pod decided it, the apiserver reaching the kubelet with the issued certificate, and `helm test`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use testenv::{ContainerCluster, ContainerClusterOptions};

use crate::Error;

/// The tools the cluster runs, and helm.
const TOOLS: &[&str] =
    &["etcd", "kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "kube-proxy", "pause", "helm"];
/// The node, named under [`REGEX`], at an address of [`PREFIXES`].
const NODE: &str = "node-1.nodes.example.com";
const REGEX: &str = "^[a-z0-9-]+\\.nodes\\.example\\.com$";
const PREFIXES: &str = "198.51.100.0/24";
/// The chart's `test.image`.
const BUSYBOX: &str = "docker.io/library/busybox:1.37";
/// How long the node's serving certificate may take to be issued.
const WAIT: Duration = Duration::from_secs(60);

/// Runs the demo.
pub async fn demo() -> Result<(), Error> {
    if !testenv::running_as_root()? {
        return Err("--helm runs a node with containers, which needs root".into());
    }
    println!(
        "installing what the node runs when missing (scripts/install-node-runtime.sh: containerd, runc, CNI plugins, busybox) ..."
    );
    run(Command::new("bash").arg(root().join("scripts/install-node-runtime.sh")))?;
    testenv::build_only(TOOLS);
    println!("finding or building {} in ~/.cache/node-csr-approver ...", TOOLS.join(", "));
    let tools = testenv::tools_dir()?;
    let images = tempfile::tempdir()?;
    println!("building the image with scripts/build-image.sh (a static release build: minutes the first time) ...");
    let out = images.path().join("approver.tar");
    run(Command::new("bash").arg(root().join("scripts/build-image.sh")).arg("--output").arg(&out))?;
    let busybox = testenv::busybox_image(BUSYBOX, &images.path().join("busybox.tar"))?;
    println!("starting a cluster whose node {NODE} runs containers (containerd, runc, kube-proxy) ...");
    let started = Instant::now();
    let cluster = ContainerCluster::start(ContainerClusterOptions::new(NODE, vec![out, busybox])).await?;
    cluster.wait_node_ready().await?;
    println!("cluster ready in {:.1} s; node at {}", started.elapsed().as_secs_f64(), cluster.node().node_ip());
    let kubeconfig = cluster.control_plane().kubeconfig_path();
    let helm = tools.join("helm");
    let chart = root().join("charts/node-csr-approver");
    let install = [
        "install",
        "approver",
        &chart.display().to_string(),
        "--namespace",
        "csr-system",
        "--create-namespace",
        "--wait",
        "--set-literal",
        &format!("providerRegex={REGEX}"),
        "--set",
        &format!("providerIpPrefixes={{{PREFIXES}}}"),
    ]
    .map(str::to_owned);
    println!("helm {}", install.join(" "));
    let started = Instant::now();
    run(Command::new(&helm).args(&install).arg("--kubeconfig").arg(kubeconfig))?;
    println!("installed in {:.1} s", started.elapsed().as_secs_f64());
    let admin = cluster.control_plane().admin_client().await?;
    let pods = Api::<Pod>::namespaced(admin.clone(), "csr-system").list(&ListParams::default()).await?;
    for pod in pods {
        let phase = pod.status.and_then(|status| status.phase).unwrap_or_default();
        println!("pod {}: {phase}", pod.metadata.name.unwrap_or_default());
    }
    let csr = issued_serving_csr(&Api::all(admin.clone())).await?;
    let condition = csr.status.and_then(|status| status.conditions).and_then(|c| c.into_iter().next());
    let condition = condition.ok_or("the node's serving CSR has no condition")?;
    println!(
        "node {NODE}'s serving CSR {}: {} {} ({})",
        csr.metadata.name.unwrap_or_default(),
        condition.type_,
        condition.reason.unwrap_or_default(),
        condition.message.unwrap_or_default()
    );
    let path = format!("/api/v1/nodes/{NODE}/proxy/healthz");
    let request = http::Request::get(&path).body(Vec::new())?;
    println!(
        "GET {path} (kube-apiserver -> kubelet, verified with the cluster CA): {}",
        admin.request_text(request).await?
    );
    run(Command::new(&helm).args(["test", "approver", "--namespace", "csr-system", "--kubeconfig"]).arg(kubeconfig))?;
    println!("helm test approver: passed");
    Ok(())
}

/// The node's kubelet-serving CSR once its certificate is issued.
async fn issued_serving_csr(csrs: &Api<CertificateSigningRequest>) -> Result<CertificateSigningRequest, Error> {
    let deadline = Instant::now() + WAIT;
    loop {
        let issued = csrs.list(&ListParams::default()).await?.items.into_iter().find(|csr| {
            csr.spec.username.as_deref() == Some(&format!("system:node:{NODE}"))
                && csr.status.as_ref().is_some_and(|status| status.certificate.is_some())
        });
        if let Some(csr) = issued {
            return Ok(csr);
        }
        if Instant::now() > deadline {
            return Err(format!("no serving certificate issued for {NODE} in {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `command`, or an error with what it printed.
fn run(command: &mut Command) -> Result<(), Error> {
    let output = command.stdin(Stdio::null()).output()?;
    if !output.status.success() {
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        return Err(format!("{command:?} failed: {printed}").into());
    }
    Ok(())
}

/// The repository root.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}
