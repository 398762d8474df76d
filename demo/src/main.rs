//! The README demo: a local etcd + kube-apiserver, a DNS server on loopback with a few node
//! records, and the real `node-csr-approver` binary against both. Three kubelet-serving CSRs are
//! created through node impersonation (a legitimate one, a forged hostname, an IP outside the
//! prefixes) and their decisions are printed as the apiserver stored them.
//!
//! Usage: `cargo run -p demo` (builds the approver with cargo if needed).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use testdns::{DnsServer, Records};
use testenv::ControlPlane;

const REGEX: &str = r"^[a-z0-9-]+\.nodes\.example\.com$";
const PREFIXES: &str = "10.0.0.0/16";

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
    match demo().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> Result<(), Error> {
    let approver = approver_binary()?;
    println!("starting etcd + kube-apiserver on 127.0.0.1 ...");
    let control_plane = ControlPlane::start().await?;
    let dns = DnsServer::start(
        Records::new().a("worker-1.nodes.example.com", "10.0.0.11").a("worker-2.nodes.example.com", "10.0.0.12"),
    )
    .await?;
    println!("DNS server on {} with worker-1/worker-2.nodes.example.com", dns.addr());
    let mut child = Command::new(&approver)
        .arg("--kubeconfig")
        .arg(control_plane.kubeconfig_path())
        .args([
            "--provider-regex",
            REGEX,
            "--provider-ip-prefixes",
            PREFIXES,
            "--log-format",
            "text",
            "--log-level",
            "warn",
        ])
        .arg(format!("--dns-server={}", dns.addr()))
        .args(["--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    println!("approver: {} --provider-regex '{REGEX}' --provider-ip-prefixes {PREFIXES}\n", approver.display());
    let result = create_and_report(&control_plane).await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn create_and_report(control_plane: &ControlPlane) -> Result<(), Error> {
    for sample in &SAMPLES {
        let client =
            control_plane.impersonated_client(&format!("system:node:{}", sample.node), &["system:nodes"]).await?;
        let csr = serving_csr(sample)?;
        Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await?;
    }
    let admin = Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?);
    println!("\n{:<22} {:<24} {:<9} {:<18} MESSAGE", "CSR", "KIND", "DECISION", "REASON");
    for sample in &SAMPLES {
        let deadline = Instant::now() + Duration::from_secs(30);
        let condition = loop {
            let csr = admin.get(sample.name).await?;
            let found = csr.status.and_then(|s| s.conditions).and_then(|c| c.into_iter().next());
            match found {
                Some(condition) => break condition,
                None if Instant::now() > deadline => {
                    return Err(format!("{} was not decided in 30s", sample.name).into());
                }
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        println!(
            "{:<22} {:<24} {:<9} {:<18} {}",
            sample.name,
            sample.what,
            condition.type_,
            condition.reason.unwrap_or_default(),
            condition.message.unwrap_or_default()
        );
    }
    Ok(())
}

/// A kubelet-serving CSR object carrying a real PKCS#10 request for the sample.
fn serving_csr(sample: &Sample) -> Result<CertificateSigningRequest, Error> {
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, format!("system:node:{}", sample.node));
    subject.push(DnType::OrganizationName, "system:nodes");
    params.distinguished_name = subject;
    params.subject_alt_names = vec![SanType::DnsName(sample.dns.try_into()?), SanType::IpAddress(sample.ip.parse()?)];
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let pem = params.serialize_request(&key)?.pem()?;
    Ok(CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(sample.name.to_owned()), ..ObjectMeta::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: "kubernetes.io/kubelet-serving".into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    })
}

/// The approver binary: `NODE_CSR_APPROVER_BIN`, or built with cargo from this workspace.
fn approver_binary() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("NODE_CSR_APPROVER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&workspace)
        .args(["build", "--release", "-q", "-p", "node-csr-approver"])
        .status()?;
    if !status.success() {
        return Err("building node-csr-approver failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    Ok(target.join("release/node-csr-approver"))
}
