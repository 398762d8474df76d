//! `audit` against real kubelets, each in a network namespace of its own (`testenv::NodeNetwork`)
//! on the one kubelet port: one serving the certificate the approver got issued (compliant, and
//! expiring under a threshold longer than the signer's year), one with `serverTLSBootstrap: false`
//! (self-signed), one whose certificate carries a name today's narrower `--provider-regex` denies
//! (issued before the policy was narrowed); a test TLS server serving a certificate the signer
//! issued for 10 minutes (`expirationSeconds: 600`, the shortest the API accepts) after the
//! approver approved its CSR (expiring); a Node whose address has nothing listening and one whose
//! kubelet port accepts connections and never answers (both unreachable, the silent one within
//! `--dial-timeout`) and one whose InternalIP is outside `--provider-ip-prefixes` (not dialled).
//! Every report is named correctly, JSON lines parse, and the exit code follows `--fail-on`.
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare`, `nsenter` and user namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::cluster::{Approver, REGEX, unique};
use support::kubelet_flow::{SERVING_SIGNER, node_name, prefixes_of, start_kubelet_in, wait_approved_and_served};
use support::process::{binary, run, stderr};
use support::{Request, SERVING_USAGES};
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};

/// The one kubelet port: every kubelet listens on it in its own namespace.
const KUBELET_PORT: u16 = 10250;
/// Exit code of `audit` when a Node has a finding `--fail-on` names.
const FINDINGS: i32 = 3;

/// Creates a Node `name` whose kubelet would be at `kubelet`, as a kubelet registering would.
async fn create_node(admin: &Client, name: &str, kubelet: SocketAddr) {
    let nodes = Api::<Node>::all(admin.clone());
    let node = Node { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": kubelet.ip().to_string()}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port()}},
    }});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// Has the approver approve a serving CSR of `node` for its name and `ip`, with
/// `expirationSeconds: 600`, and serves the certificate the signer issues at `at` (a test TLS
/// server standing in for the kubelet); returns the server's task.
async fn serve_short_lived(
    cp: &ControlPlane,
    admin: &Client,
    node: &str,
    at: SocketAddr,
) -> tokio::task::JoinHandle<()> {
    let key = rcgen::KeyPair::generate().unwrap();
    let pem = Request::node(node).dns(node).ip(&at.ip().to_string()).pem_signed_by(&key).unwrap();
    let name = unique("short-lived");
    let mut csr = testkit::csr::object(&name, SERVING_SIGNER, &SERVING_USAGES, &pem);
    csr.spec.expiration_seconds = Some(600);
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await.unwrap();
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let deadline = Instant::now() + support::kubelet_flow::STEP;
    let issued = loop {
        if let Some(certificate) = api.get(&name).await.unwrap().status.and_then(|s| s.certificate) {
            break certificate.0;
        }
        assert!(Instant::now() < deadline, "{name} was not issued");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let leaf = rustls::pki_types::CertificateDer::from(pem::parse(issued).unwrap().into_contents());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { drop(acceptor.accept(tcp).await) });
        }
    })
}

/// Runs `audit` with the shared flags and `extra`.
fn audit(kubeconfig: &Path, shared: &[String], extra: &[&str]) -> Output {
    let mut command = binary();
    command.arg("audit").arg(format!("--kubeconfig={}", kubeconfig.display())).args(shared).args(extra);
    run(&mut command)
}

/// The JSON lines of an audit, by Node name.
fn json_reports(output: &Output) -> BTreeMap<String, Value> {
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    let parse = |line: &str| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    text.lines().map(parse).map(|report| (report["node"].as_str().unwrap().to_owned(), report)).collect()
}

// Two workers: the audits run as blocking processes while the test server answers on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_each_kubelets_serving_certificate_and_exits_as_fail_on_says() {
    let started = Instant::now();
    let network = || Arc::new(NodeNetwork::create(AddressFamilies::Ipv4).unwrap());
    let (compliant_net, self_signed_net, narrowed_net, unreachable_net) = (network(), network(), network(), network());
    // The short-lived certificate's server and the silent port listen on this machine's ends of
    // two of the links.
    let (short_lived_at, silent_at) = (
        SocketAddr::new(unreachable_net.host_addresses()[0], KUBELET_PORT),
        SocketAddr::new(self_signed_net.host_addresses()[0], KUBELET_PORT),
    );
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let (compliant, self_signed, narrowed, unreachable, outside) = (
        node_name("compliant"),
        node_name("selfsigned"),
        node_name("narrowed"),
        node_name("unreachable"),
        node_name("outside"),
    );
    let (short_lived, silent) = (node_name("expiring"), node_name("silent"));
    let mut addresses: Vec<IpAddr> =
        [&compliant_net, &self_signed_net, &narrowed_net, &unreachable_net].iter().map(|n| n.addresses()[0]).collect();
    addresses.extend([short_lived_at.ip(), silent_at.ip()]);
    let prefixes = prefixes_of(&addresses);
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes, &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;

    let (compliant_kubelet, _self_signed_kubelet, narrowed_kubelet) = tokio::join!(
        start_kubelet_in(&cp, &compliant, &compliant_net, KUBELET_PORT, true),
        start_kubelet_in(&cp, &self_signed, &self_signed_net, KUBELET_PORT, false),
        start_kubelet_in(&cp, &narrowed, &narrowed_net, KUBELET_PORT, true),
    );
    wait_approved_and_served(&admin, &approver, &compliant_kubelet).await;
    wait_approved_and_served(&admin, &approver, &narrowed_kubelet).await;
    create_node(&admin, &unreachable, SocketAddr::new(unreachable_net.addresses()[0], KUBELET_PORT)).await;
    create_node(&admin, &outside, SocketAddr::new("192.0.2.77".parse().unwrap(), KUBELET_PORT)).await;
    create_node(&admin, &short_lived, short_lived_at).await;
    let _server = serve_short_lived(&cp, &admin, &short_lived, short_lived_at).await;
    let _silent_port = std::net::TcpListener::bind(silent_at).unwrap();
    create_node(&admin, &silent, silent_at).await;
    drop(approver);
    eprintln!("control plane, three kubelets, a test server and four Nodes up after {:?}", started.elapsed());

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, cp.ca_cert_pem().unwrap()).unwrap();
    // Today's policy is narrower than the one that approved the kubelets: `narrowed-…` names no
    // longer match.
    let shared = vec![
        r"--provider-regex=^(compliant|selfsigned|unreachable|outside|expiring|silent)-[0-9a-f]+\.nodes\.example\.com$"
            .to_owned(),
        format!("--provider-ip-prefixes={prefixes}"),
        "--bypass-dns-resolution".to_owned(),
        format!("--kubelet-serving-ca-file={}", ca_file.display()),
        format!("--kubelet-port={KUBELET_PORT}"),
        "--dial-timeout=1s".to_owned(),
    ];
    let kubeconfig = cp.kubeconfig_path();
    let scan = Instant::now();
    let output = audit(kubeconfig, &shared, &["-o", "json"]);
    eprintln!("audit of seven Nodes took {:?}", scan.elapsed());
    assert!(scan.elapsed() < std::time::Duration::from_secs(3), "the silent kubelet costs one --dial-timeout");
    assert_eq!(output.status.code(), Some(0), "no --fail-on: {}", stderr(&output));
    let reports = json_reports(&output);
    let state = |node: &str| reports[node]["state"].as_str().unwrap().to_owned();
    let all = [&compliant, &self_signed, &narrowed, &short_lived, &unreachable, &silent, &outside];
    let states: Vec<String> = all.iter().map(|node| state(node)).collect();
    let expected =
        ["compliant", "self-signed", "non-compliant", "expiring", "unreachable", "unreachable", "not-dialled"];
    assert_eq!(states, expected, "{reports:#?}");

    let good = &reports[&compliant];
    assert_eq!(good["findings"], json!([]));
    assert_eq!(good["verified"], json!(true));
    assert_eq!(good["cn_is_node"], json!(true));
    assert_eq!(good["policy"]["decision"], "approve");
    assert_eq!(good["address"], format!("{}:{KUBELET_PORT}", addresses[0]));
    assert_eq!(good["certificate"]["names"]["dns_names"], json!([compliant]));
    assert_eq!(good["certificate"]["self_issued_chain"], json!(false));
    assert!(good["certificate"]["key"].as_str().unwrap().starts_with("ECDSA"), "{good}");
    let days_left = good["seconds_left"].as_i64().unwrap() / 86_400;
    assert!((360..=365).contains(&days_left), "the signer issues for a year: {days_left} days");

    let own = &reports[&self_signed];
    assert_eq!(own["verified"], json!(false));
    assert_eq!(own["certificate"]["self_issued_chain"], json!(true));
    assert_eq!(own["cn_is_node"], json!(false), "the kubelet's own certificate is CN <host>@<time>");
    assert!(own["findings"].as_array().unwrap().contains(&json!("non-compliant")), "{own}");

    let denied = &reports[&narrowed];
    assert_eq!(denied["findings"], json!(["non-compliant"]), "{denied}");
    assert_eq!(denied["verified"], json!(true), "issued by the cluster's signer");
    assert_eq!(denied["policy"]["reason"], "RegexMismatch", "{denied}");

    let expiring = &reports[&short_lived];
    assert_eq!(expiring["findings"], json!(["expiring"]), "{expiring}");
    assert_eq!((&expiring["verified"], &expiring["policy"]["decision"]), (&json!(true), &json!("approve")));
    let left = expiring["seconds_left"].as_i64().unwrap();
    assert!((300..=600).contains(&left), "issued for 10 minutes: {left} s left");

    assert_eq!(reports[&unreachable]["address"], format!("{}:{KUBELET_PORT}", addresses[3]));
    let silence = reports[&silent]["detail"].as_str().unwrap();
    assert!(silence.contains("no TLS handshake within 1s"), "{silence}");
    assert!(reports[&outside]["detail"].as_str().unwrap().contains("outside --provider-ip-prefixes"));
    assert_eq!(reports[&outside]["address"], Value::Null, "never dialled");

    // The exit code follows --fail-on; the year-long certificate is expiring under a longer threshold.
    let code = |extra: &[&str]| audit(kubeconfig, &shared, extra).status.code();
    assert_eq!(code(&["--fail-on=self-signed"]), Some(FINDINGS));
    assert_eq!(code(&["--fail-on=non-compliant", &narrowed]), Some(FINDINGS));
    assert_eq!(code(&["--fail-on=unreachable", &unreachable]), Some(FINDINGS));
    assert_eq!(code(&["--fail-on=not-dialled", &outside]), Some(FINDINGS));
    let quiet = ["--fail-on=expiring=300d,self-signed,non-compliant,unreachable,not-dialled", &compliant];
    assert_eq!(code(&quiet), Some(0));
    assert_eq!(code(&["--fail-on=expiring", &short_lived]), Some(FINDINGS), "10 minutes left, within 7 days");
    assert_eq!(code(&["--fail-on=expiring=4m", &short_lived]), Some(0), "more than 4 minutes left");
    let year = audit(kubeconfig, &shared, &["-o", "json", "--fail-on=expiring=400d", &compliant]);
    assert_eq!(year.status.code(), Some(FINDINGS), "{}", stderr(&year));
    assert_eq!(json_reports(&year)[&compliant]["state"], "expiring");
    assert!(stderr(&year).contains(&compliant), "the failing Node is named: {}", stderr(&year));
    let bad = audit(kubeconfig, &shared, &["--fail-on=expiring=soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--fail-on"), "{}", stderr(&bad));

    // The table names every Node with its state.
    let table = audit(kubeconfig, &shared, &[]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("NODE "), "{text}");
    for (node, state) in all.iter().zip(&states) {
        assert!(text.lines().any(|line| line.starts_with(node.as_str()) && line.contains(state.as_str())), "{text}");
    }
    eprintln!("{text}");
    eprintln!("done after {:?}", started.elapsed());
}
