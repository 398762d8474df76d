//! The real signer: kube-controller-manager signs what the approver approves. Every corpus entry the
//! apiserver accepts is created as node `n1`, one at a time: `check` reports it while pending, then
//! the controller decides it: an approved request gets a certificate whose subject and SANs are exactly what `check`
//! reported, and every attack shape is denied and never gets a certificate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use differential::{Expect, Seeds, corpus};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use testenv::ControlPlane;
use x509_cert::Certificate;
use x509_cert::der::Decode;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

const ARGS: [&str; 10] = [
    "--provider-regex",
    "^[a-z0-9.-]+$",
    "--provider-ip-prefixes",
    "0.0.0.0/0,::/0",
    "--bypass-dns-resolution",
    "--allowed-dns-names",
    "1000",
    "--allowed-ip-addresses",
    "1000",
    "--log-level=warn",
];
const DECIDE: Duration = Duration::from_secs(60);

/// The approver binary: `NODE_CSR_APPROVER_BIN` (scripts/test.sh sets it), else a debug build.
fn approver_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NODE_CSR_APPROVER_BIN") {
        return PathBuf::from(path);
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--bin", "node-csr-approver"])
        .current_dir(&workspace)
        .status()
        .unwrap();
    assert!(status.success());
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace.join("target"), PathBuf::from);
    target.join("debug").join("node-csr-approver")
}

/// What a request or certificate names.
#[derive(Debug, PartialEq, Eq)]
struct Names {
    common_names: Vec<String>,
    organizations: Vec<String>,
    dns_names: Vec<String>,
    ip_addresses: Vec<IpAddr>,
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// `check NAME -o json` for every pending CSR: name -> (decision, the request's names).
async fn check(binary: &PathBuf, cp: &ControlPlane, names: &[String]) -> Vec<(String, String, Option<Names>)> {
    let output = tokio::process::Command::new(binary)
        .arg("check")
        .args(names)
        .args(["--kubeconfig"])
        .arg(cp.kubeconfig_path())
        .args(ARGS)
        .args(["-o", "json"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let report: serde_json::Value = serde_json::from_str(line).unwrap();
            let request = report.get("request").filter(|r| !r.is_null()).map(|r| Names {
                common_names: strings(&r["common_names"]),
                organizations: strings(&r["organizations"]),
                dns_names: strings(&r["dns_names"]),
                ip_addresses: strings(&r["ip_addresses"]).iter().map(|ip| ip.parse().unwrap()).collect(),
            });
            (report["name"].as_str().unwrap().to_owned(), report["decision"].as_str().unwrap().to_owned(), request)
        })
        .collect()
}

/// The subject and SANs of an issued certificate.
fn certificate_names(pem: &[u8]) -> Names {
    let text = String::from_utf8_lossy(pem);
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(body).unwrap();
    let certificate = Certificate::from_der(&der).unwrap();
    let mut names =
        Names { common_names: Vec::new(), organizations: Vec::new(), dns_names: Vec::new(), ip_addresses: Vec::new() };
    for attribute in certificate.tbs_certificate().subject().iter() {
        let value = String::from_utf8_lossy(attribute.value.value()).into_owned();
        match attribute.oid.to_string().as_str() {
            "2.5.4.3" => names.common_names.push(value),
            "2.5.4.10" => names.organizations.push(value),
            other => panic!("unexpected subject attribute {other}"),
        }
    }
    for extension in certificate.tbs_certificate().extensions().into_iter().flatten() {
        if extension.extn_id.to_string() == "2.5.29.17" {
            for name in SubjectAltName::from_der(extension.extn_value.as_bytes()).unwrap().0 {
                match name {
                    GeneralName::DnsName(dns) => names.dns_names.push(dns.to_string()),
                    GeneralName::IpAddress(ip) => names.ip_addresses.push(match ip.as_bytes().len() {
                        4 => IpAddr::from(<[u8; 4]>::try_from(ip.as_bytes()).unwrap()),
                        _ => IpAddr::from(<[u8; 16]>::try_from(ip.as_bytes()).unwrap()),
                    }),
                    other => panic!("unexpected SAN {other:?}"),
                }
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_requests_get_exactly_the_reported_certificate_and_attacks_get_none() {
    let cp = ControlPlane::shared_with_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let node = cp.impersonated_client("system:node:n1", &["system:nodes"]).await.unwrap();
    let csrs = Api::<CertificateSigningRequest>::all(admin.clone());
    let as_node = Api::<CertificateSigningRequest>::all(node);
    let seeds = Seeds::new().unwrap();
    let binary = approver_binary();
    // One CSR at a time: `check` reports it while pending, then a controller decides it (and the
    // signer signs it) before the next is created: of a node's serving CSRs pending together only
    // the newest that passes would be approved (the older ones wait for it, then are `Superseded`),
    // and every entry here is node n1's.
    let mut created = Vec::new();
    let mut refused_by_apiserver = Vec::new();
    let mut approved = 0;
    for (i, entry) in corpus(&seeds).into_iter().enumerate() {
        let name = format!("signer-{i}");
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(entry.request.clone()),
                signer_name: "kubernetes.io/kubelet-serving".into(),
                usages: Some(vec!["digital signature".into(), "server auth".into()]),
                ..CertificateSigningRequestSpec::default()
            },
            status: None,
        };
        match as_node.create(&PostParams::default(), &csr).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 422 => {
                refused_by_apiserver.push(entry.name);
                continue;
            }
            Err(error) => panic!("{}: {error}", entry.name),
        }
        // `check` reads it from the cluster as the controller will, every older CSR of n1 decided.
        let reports = check(&binary, cp, std::slice::from_ref(&name)).await;
        let [(reported_name, decision, request)] = reports.as_slice() else { panic!("{}: {reports:?}", entry.name) };
        assert_eq!(&name, reported_name);
        let expected = if entry.expect == Expect::Approve { "approve" } else { "deny" };
        assert_eq!(decision, expected, "{}: check decided {decision}", entry.name);
        let mut controller = tokio::process::Command::new(&binary)
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .args(ARGS)
            .args(["--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=0"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + DECIDE;
        loop {
            let csr = csrs.get(&name).await.unwrap();
            let status = csr.status.unwrap_or_default();
            let condition = status.conditions.unwrap_or_default().into_iter().next().map(|c| c.type_);
            match (entry.expect, condition.as_deref(), status.certificate) {
                (Expect::Approve, Some("Approved"), Some(certificate)) if !certificate.0.is_empty() => {
                    assert_eq!(Some(certificate_names(&certificate.0)), *request, "{}", entry.name);
                    approved += 1;
                    break;
                }
                (Expect::Refuse | Expect::Deny, Some("Denied"), None) => break,
                (_, Some(other), certificate) if other != "Approved" || entry.expect != Expect::Approve => {
                    panic!("{}: condition {other}, certificate {certificate:?}", entry.name)
                }
                _ => {
                    assert!(Instant::now() < deadline, "{}: not decided and signed in time", entry.name);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        controller.kill().await.unwrap();
        created.push((name, entry));
    }
    println!("created {} CSRs; the apiserver refused {refused_by_apiserver:?}", created.len());
    assert!(created.iter().any(|(_, e)| e.name.starts_with("end and begin")), "the finding must reach the approver");
    assert!(approved >= 4, "too few approvals reached the signer: {approved}");
    // A denied CSR is never signed, however long the signer runs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, entry) in created.iter().filter(|(_, e)| e.expect != Expect::Approve) {
        let status = csrs.get(name).await.unwrap().status.unwrap_or_default();
        assert!(status.certificate.is_none(), "{}: a denied request was signed", entry.name);
    }
}
