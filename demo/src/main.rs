//! The README demo: a local etcd + kube-apiserver with kube-controller-manager's signer, a DNS
//! server on loopback with a few node records, the real `node-csr-approver` binary against both,
//! and a real kubelet (on Kubernetes' fake container runtime) that asks for its serving
//! certificate. Beside the kubelet's own CSR, three kubelet-serving CSRs are created through node
//! impersonation (a legitimate one, a forged hostname, an IP outside the prefixes); the decisions
//! are printed as the apiserver stored them, then the apiserver's proxy to the kubelet is called,
//! which works only over TLS the apiserver verifies with the cluster CA.
//!
//! The kubelet runs in a network namespace of its own with an IPv4 and an IPv6 address from
//! documentation ranges (`testenv::NodeNetwork`, which needs root), so the demo does not depend on
//! this machine's address; where namespaces cannot be created it says so and uses this machine's
//! own address instead.
//!
//! Usage: `cargo run -p demo` (`-- --helm`: the chart installed by helm from the image into a
//! cluster whose node runs containers instead, see [`helm`]). The first run builds the tools it runs (etcd, kube-apiserver,
//! kube-controller-manager, kubelet and the fake container runtime, from their Go modules: about
//! 5 minutes on 2 idle cores, cached afterwards) and the approver (a debug build that reuses what
//! cargo compiled for the demo), saying so before each step.

mod helm;

use std::net::IpAddr;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::Api;
use kube::api::PostParams;
use testdns::{DnsServer, Records};
use testenv::{AddressFamilies, ControlPlane, Kubelet, KubeletCredentials, KubeletOptions, NodeNetwork};
use testkit::Request;
use testkit::csr::{ECDSA_SERVING_USAGES, SERVING_SIGNER};
use testkit::policy::{PREFIXES, REGEX};
/// The real kubelet's node name (its addresses: see [`kubelet_options`]).
const KUBELET_NODE: &str = "kubelet-1.nodes.example.com";
/// How long each CSR may take to be decided, and the kubelet to pick up its certificate.
const WAIT: Duration = Duration::from_secs(30);
/// The tools the demo runs; the others (helm, promtool, the Go oracles) are the tests'.
const TOOLS: &[&str] = &["etcd", "kube-apiserver", "kube-controller-manager", "kubelet", "fake-cri"];

type Error = Box<dyn std::error::Error>;

/// One CSR of the demo: its name, the node that asks, and what it asks for.
struct Sample {
    name: &'static str,
    node: &'static str,
    dns: &'static str,
    ip: &'static str,
    what: &'static str,
}

const SAMPLES: [Sample; 3] = [
    Sample {
        name: "demo-legit",
        node: "worker-1",
        dns: "worker-1.nodes.example.com",
        ip: "10.0.0.11",
        what: "legitimate",
    },
    Sample {
        name: "demo-forged-hostname",
        node: "worker-1",
        dns: "auth.evil.io",
        ip: "10.0.0.11",
        what: "forged hostname",
    },
    Sample {
        name: "demo-ip-outside",
        node: "worker-2",
        dns: "worker-2.nodes.example.com",
        ip: "192.168.7.7",
        what: "IP outside the prefixes",
    },
];

#[tokio::main]
async fn main() -> ExitCode {
    let run = match std::env::args().nth(1).as_deref() {
        None => demo().await,
        Some("--helm") => helm::demo().await,
        Some(other) => {
            eprintln!("demo: unknown argument {other}\nusage: demo [--helm]");
            return ExitCode::from(2);
        }
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> Result<(), Error> {
    testenv::build_only(TOOLS);
    println!(
        "building node-csr-approver (cargo build, debug: it reuses what cargo compiled for the demo; \
         about a minute the first time, seconds afterwards) ..."
    );
    let approver = testkit::approver::binary(false)?;
    println!(
        "finding or building {} in ~/.cache/node-csr-approver (from their Go modules: about 5 minutes \
         the first time on 2 idle cores, each step logged below; seconds afterwards) ...",
        TOOLS.join(", ")
    );
    let _ = testenv::tools_dir()?;
    let kubelet_options = kubelet_options()?;
    let addresses = kubelet_options.network.as_ref().map_or(vec![kubelet_options.node_ip], |n| n.addresses().to_vec());
    let exact = |address: &IpAddr| format!(",{address}/{}", if address.is_ipv4() { 32 } else { 128 });
    let prefixes = format!("{PREFIXES}{}", addresses.iter().map(exact).collect::<String>());
    println!("starting etcd + kube-apiserver + kube-controller-manager's signer on 127.0.0.1 ...");
    let control_plane = ControlPlane::start().await?;
    let _signer = control_plane.start_signer().await?;
    let records =
        Records::new().a("worker-1.nodes.example.com", "10.0.0.11").a("worker-2.nodes.example.com", "10.0.0.12");
    let dns =
        DnsServer::start(addresses.iter().fold(records, |records, address| records.ip(KUBELET_NODE, *address))).await?;
    println!("DNS server on {} with worker-1/worker-2/kubelet-1.nodes.example.com", dns.addr());
    let mut child = testkit::approver::command(&approver, control_plane.kubeconfig_path(), REGEX, &prefixes)
        .args(["--log-format", "text", "--log-level", "warn"])
        .arg(format!("--dns-server={}", dns.addr()))
        .stderr(Stdio::inherit())
        .spawn()?;
    println!("approver: {} --provider-regex '{REGEX}' --provider-ip-prefixes {prefixes}", approver.display());
    let result = run_kubelet_and_samples(&control_plane, kubelet_options).await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The demo kubelet: in a dual-stack [`NodeNetwork`] of its own when this machine allows it (root,
/// `ip`, `unshare`, `nsenter`), else on this machine's own address, saying which and why.
fn kubelet_options() -> Result<KubeletOptions, Error> {
    let credentials = KubeletCredentials::NodeCertificate;
    match NodeNetwork::create(AddressFamilies::DualStack) {
        Ok(network) => {
            println!(
                "kubelet network: a namespace of its own at {:?}, linked to this machine only (documentation ranges)",
                network.addresses()
            );
            Ok(KubeletOptions::in_network(KUBELET_NODE, Arc::new(network), credentials))
        }
        Err(error) => {
            let host = testenv::host_address()?;
            println!(
                "kubelet network: cannot create a network namespace ({error}); using this machine's address {host}"
            );
            Ok(KubeletOptions::new(KUBELET_NODE, host, credentials))
        }
    }
}

async fn run_kubelet_and_samples(control_plane: &ControlPlane, options: KubeletOptions) -> Result<(), Error> {
    let kubelet = control_plane.start_kubelet(options).await?;
    println!("kubelet: node {KUBELET_NODE} at {:?}, serverTLSBootstrap: true", kubelet.node_ips());
    for sample in &SAMPLES {
        let client =
            control_plane.impersonated_client(&format!("system:node:{}", sample.node), &["system:nodes"]).await?;
        let csr = serving_csr(sample)?;
        Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await?;
    }
    let admin = Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?);
    let kubelet_csr = kubelet_csr_name(&admin).await?;
    println!("\n{:<22} {:<24} {:<9} {:<18} MESSAGE", "CSR", "KIND", "DECISION", "REASON");
    let rows = std::iter::once((kubelet_csr.as_str(), "real kubelet"))
        .chain(SAMPLES.iter().map(|sample| (sample.name, sample.what)));
    for (name, what) in rows {
        let condition = decision(&admin, name).await?;
        println!(
            "{:<22} {:<24} {:<9} {:<18} {}",
            name,
            what,
            condition.type_,
            condition.reason.unwrap_or_default(),
            condition.message.unwrap_or_default()
        );
    }
    wait_for_certificate(&admin, &kubelet, &kubelet_csr).await?;
    let path = format!("/api/v1/nodes/{KUBELET_NODE}/proxy/healthz");
    let proxied = control_plane.admin_client().await?.request_text(http_get(&path)?).await?;
    println!("\nthe kubelet serves the certificate kube-controller-manager issued for {kubelet_csr}");
    println!("GET {path} (kube-apiserver -> kubelet, verified with the cluster CA): {proxied}");
    Ok(())
}

/// The name of the kubelet's own serving CSR, once it exists.
async fn kubelet_csr_name(admin: &Api<CertificateSigningRequest>) -> Result<String, Error> {
    let username = format!("system:node:{KUBELET_NODE}");
    let deadline = Instant::now() + WAIT;
    loop {
        let list = admin.list(&Default::default()).await?;
        let found = list.items.into_iter().find(|csr| csr.spec.username.as_deref() == Some(username.as_str()));
        if let Some(name) = found.and_then(|csr| csr.metadata.name) {
            return Ok(name);
        }
        if Instant::now() > deadline {
            return Err(format!("the kubelet created no CSR in {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The first condition of CSR `name`, once it has one.
async fn decision(
    admin: &Api<CertificateSigningRequest>,
    name: &str,
) -> Result<CertificateSigningRequestCondition, Error> {
    let deadline = Instant::now() + WAIT;
    loop {
        let csr = admin.get(name).await?;
        if let Some(condition) = csr.status.and_then(|s| s.conditions).and_then(|c| c.into_iter().next()) {
            return Ok(condition);
        }
        if Instant::now() > deadline {
            return Err(format!("{name} was not decided in {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the kubelet uses the certificate issued for its CSR `name`.
async fn wait_for_certificate(
    admin: &Api<CertificateSigningRequest>,
    kubelet: &Kubelet,
    name: &str,
) -> Result<(), Error> {
    let deadline = Instant::now() + WAIT;
    loop {
        let issued = admin.get(name).await?.status.and_then(|s| s.certificate);
        if let (Some(issued), Some(current)) = (issued, kubelet.serving_certificate_pem())
            && current.as_bytes().starts_with(&issued.0)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the kubelet does not use the certificate issued for {name} after {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A GET request for `path` on the apiserver.
fn http_get(path: &str) -> Result<http::Request<Vec<u8>>, Error> {
    Ok(http::Request::get(path).body(Vec::new())?)
}

/// A kubelet-serving CSR object carrying a real PKCS#10 request for the sample (an ECDSA key).
fn serving_csr(sample: &Sample) -> Result<CertificateSigningRequest, Error> {
    let pem = Request::node(sample.node).dns(sample.dns).ip(sample.ip).pem_signed_by(&testkit::Key::P256.pair()?)?;
    Ok(testkit::csr::object(sample.name, SERVING_SIGNER, &ECDSA_SERVING_USAGES, &pem))
}
