//! `audit` against real kubelets, each in a network namespace of its own (`testenv::NodeNetwork`)
//! on the one kubelet port: one serving the certificate the approver got issued (compliant, and
//! expiring under a threshold longer than the signer's year), one with `serverTLSBootstrap: false`
//! (self-signed), one whose certificate carries a name today's narrower `--provider-regex` denies
//! (issued before the policy was narrowed), and one whose serving CSR the approver approved while
//! the signer issued for 10 minutes (`--cluster-signing-duration`; the kubelet asks for no
//! `expirationSeconds`): expiring. A test TLS server presents a certificate the signer issued
//! after the approver approved its CSR, and signs the handshake with another key (malformed: it
//! does not hold the certificate's key). A Node whose address has nothing listening and one whose
//! kubelet port accepts connections and never answers (both unreachable, the silent one within
//! `--dial-timeout`) and one whose InternalIP is outside `--provider-ip-prefixes` (not dialled).
//! Every report is named correctly, JSON lines parse, the exit code follows `--fail-on`, and an
//! identity that may not read CSRs gets the same reports (the audit lists none).
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare`, `nsenter` and user namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::cluster::{Approver, REGEX, access, unique, wait_access};
use support::kubelet_flow::{SERVING_SIGNER, node_name, prefixes_of, start_kubelet_in, wait_approved_and_served};
use support::process::{binary, run, stderr};
use support::{Request, SERVING_USAGES};
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};

/// The one kubelet port: every kubelet listens on it in its own namespace.
const KUBELET_PORT: u16 = 10250;
/// Exit code of `audit` when a Node has a finding `--fail-on` names.
const FINDINGS: i32 = 3;
/// The signer's `--cluster-signing-duration` while the expiring kubelet's certificate is issued.
/// The signer backdates a certificate this short by 5 minutes, so the kubelet renews it 5.5 to
/// 8.5 minutes after issuance (at 70 to 90 % of its 15 minutes): never during the test.
const SHORT_SIGNING: Duration = Duration::from_secs(600);

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

/// Presents one chain and signs with one key, whether or not the key is the leaf's.
#[derive(Debug)]
struct Presents(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Presents {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// Has the approver approve a serving CSR of `node` for its name and `at`'s address, and serves
/// the certificate the signer issues at `at` (a test TLS server standing in for the kubelet), but
/// signs each handshake with another key of the same type: the chain is presented and the
/// handshake's signature does not verify with its key. Returns the server's task.
async fn serve_without_its_key(
    cp: &ControlPlane,
    admin: &Client,
    node: &str,
    at: SocketAddr,
) -> tokio::task::JoinHandle<()> {
    let key = rcgen::KeyPair::generate().unwrap();
    let pem = Request::node(node).dns(node).ip(&at.ip().to_string()).pem_signed_by(&key).unwrap();
    let name = unique("keyless");
    let csr = testkit::csr::object(&name, SERVING_SIGNER, &SERVING_USAGES, &pem);
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await.unwrap();
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let deadline = Instant::now() + support::kubelet_flow::STEP;
    let issued = loop {
        if let Some(certificate) = api.get(&name).await.unwrap().status.and_then(|s| s.certificate) {
            break certificate.0;
        }
        assert!(Instant::now() < deadline, "{name} was not issued");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let leaf = rustls::pki_types::CertificateDer::from(pem::parse(issued).unwrap().into_contents());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let other_key = rustls::pki_types::PrivateKeyDer::Pkcs8(rcgen::KeyPair::generate().unwrap().serialize_der().into());
    let signing_key = provider.key_provider.load_private_key(other_key).unwrap();
    let presents = Presents(Arc::new(rustls::sign::CertifiedKey::new(vec![leaf], signing_key)));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(presents));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { drop(acceptor.accept(tcp).await) });
        }
    })
}

/// Writes to `dir` a kubeconfig of a ServiceAccount that may read Nodes and the `default/kubernetes`
/// Service and EndpointSlices, and nothing of CSRs; returns its path and a client of it.
async fn auditor_without_csrs(cp: &ControlPlane, admin: &Client, dir: &Path) -> (std::path::PathBuf, Client) {
    let (namespace, account) = ("audit", "auditor");
    let token = cp.service_account_token(namespace, account).await.unwrap();
    let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": namespace}]);
    let nodes: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "auditor-nodes"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    let nodes_binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "auditor-nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "auditor-nodes"},
        "subjects": subject,
    }))
    .unwrap();
    let apiserver: Role = serde_json::from_value(json!({
        "metadata": {"name": "auditor-apiserver", "namespace": "default"},
        "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        ],
    }))
    .unwrap();
    let apiserver_binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "auditor-apiserver", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "auditor-apiserver"},
        "subjects": subject,
    }))
    .unwrap();
    let post = PostParams::default();
    Api::<ClusterRole>::all(admin.clone()).create(&post, &nodes).await.unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&post, &nodes_binding).await.unwrap();
    Api::<Role>::namespaced(admin.clone(), "default").create(&post, &apiserver).await.unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default").create(&post, &apiserver_binding).await.unwrap();
    let path = dir.join("auditor.kubeconfig");
    cp.write_kubeconfig_for_token(&token, &path).unwrap();
    let client = cp.service_account_client(namespace, account).await.unwrap();
    for (verb, group, resource, namespace) in [
        ("get", "", "nodes", None),
        ("list", "", "nodes", None),
        ("watch", "", "services", Some("default")),
        ("watch", "discovery.k8s.io", "endpointslices", Some("default")),
    ] {
        wait_access(&client, access(verb, group, resource, namespace, None), true).await;
    }
    (path, client)
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

/// A report without the seconds left, which change from one audit to the next.
fn timeless(report: &Value) -> Value {
    let mut report = report.clone();
    report.as_object_mut().unwrap().remove("seconds_left");
    report
}

// Two workers: the audits run as blocking processes while the test server answers on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_each_kubelets_serving_certificate_and_exits_as_fail_on_says() {
    let started = Instant::now();
    // The node networks are created while the control plane starts.
    let network = || tokio::task::spawn_blocking(|| Arc::new(NodeNetwork::create(AddressFamilies::Ipv4).unwrap()));
    let networks = [network(), network(), network(), network(), network()];
    let cp = ControlPlane::start().await.unwrap();
    let mut created = Vec::new();
    for network in networks {
        created.push(network.await.unwrap());
    }
    let [compliant_net, self_signed_net, narrowed_net, expiring_net, unreachable_net] = created.try_into().unwrap();
    // The keyless server and the silent port listen on this machine's ends of two of the links.
    let (keyless_at, silent_at) = (
        SocketAddr::new(unreachable_net.host_addresses()[0], KUBELET_PORT),
        SocketAddr::new(self_signed_net.host_addresses()[0], KUBELET_PORT),
    );
    let year_signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let (compliant, self_signed, narrowed, expiring, unreachable, outside) = (
        node_name("compliant"),
        node_name("selfsigned"),
        node_name("narrowed"),
        node_name("expiring"),
        node_name("unreachable"),
        node_name("outside"),
    );
    let (keyless, silent) = (node_name("keyless"), node_name("silent"));
    let mut addresses: Vec<IpAddr> = [&compliant_net, &self_signed_net, &narrowed_net, &expiring_net, &unreachable_net]
        .iter()
        .map(|n| n.addresses()[0])
        .collect();
    addresses.extend([keyless_at.ip(), silent_at.ip()]);
    let prefixes = prefixes_of(&addresses);
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes, &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;

    let (compliant_kubelet, _self_signed_kubelet, narrowed_kubelet, _keyless_server) = tokio::join!(
        start_kubelet_in(&cp, &compliant, &compliant_net, KUBELET_PORT, true),
        start_kubelet_in(&cp, &self_signed, &self_signed_net, KUBELET_PORT, false),
        start_kubelet_in(&cp, &narrowed, &narrowed_net, KUBELET_PORT, true),
        serve_without_its_key(&cp, &admin, &keyless, keyless_at),
    );
    wait_approved_and_served(&admin, &approver, &compliant_kubelet).await;
    wait_approved_and_served(&admin, &approver, &narrowed_kubelet).await;
    // Every certificate so far is the signer's year; from now on it issues for 10 minutes.
    drop(year_signer);
    let (short_signer, expiring_kubelet) = tokio::join!(
        cp.start_signer_issuing_for(SHORT_SIGNING),
        start_kubelet_in(&cp, &expiring, &expiring_net, KUBELET_PORT, true)
    );
    let _short_signer = short_signer.unwrap();
    let expiring_csr = wait_approved_and_served(&admin, &approver, &expiring_kubelet).await;
    assert_eq!(expiring_csr.spec.expiration_seconds, None, "the kubelet asks for no shorter life");
    create_node(&admin, &unreachable, SocketAddr::new(unreachable_net.addresses()[0], KUBELET_PORT)).await;
    create_node(&admin, &outside, SocketAddr::new("192.0.2.77".parse().unwrap(), KUBELET_PORT)).await;
    create_node(&admin, &keyless, keyless_at).await;
    let _silent_port = std::net::TcpListener::bind(silent_at).unwrap();
    create_node(&admin, &silent, silent_at).await;
    drop(approver);
    eprintln!("control plane, four kubelets, a test server and four Nodes up after {:?}", started.elapsed());

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, cp.ca_cert_pem().unwrap()).unwrap();
    // Today's policy is narrower than the one that approved the kubelets: `narrowed-…` names no
    // longer match.
    let shared = vec![
        r"--provider-regex=^(compliant|selfsigned|expiring|keyless|unreachable|outside|silent)-[0-9a-f]+\.nodes\.example\.com$"
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
    eprintln!("audit of eight Nodes took {:?}", scan.elapsed());
    assert!(scan.elapsed() < Duration::from_secs(3), "the silent kubelet costs one --dial-timeout");
    assert_eq!(output.status.code(), Some(0), "no --fail-on: {}", stderr(&output));
    let reports = json_reports(&output);
    let state = |node: &str| reports[node]["state"].as_str().unwrap().to_owned();
    let all = [&compliant, &self_signed, &narrowed, &expiring, &keyless, &unreachable, &silent, &outside];
    let states: Vec<String> = all.iter().map(|node| state(node)).collect();
    let expected = [
        "compliant",
        "self-signed",
        "non-compliant",
        "expiring",
        "malformed",
        "unreachable",
        "unreachable",
        "not-dialled",
    ];
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

    let short = &reports[&expiring];
    assert_eq!(short["findings"], json!(["expiring"]), "{short}");
    assert_eq!((&short["verified"], &short["policy"]["decision"]), (&json!(true), &json!("approve")));
    assert_eq!((&short["cn_is_node"], &short["address"]), (&json!(true), &json!(expiring_kubelet.address())));
    let left = short["seconds_left"].as_i64().unwrap();
    assert!((300..=600).contains(&left), "issued for 10 minutes: {left} s left");
    let validity = |field: &str| short["certificate"][field].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let lifetime = validity("not_after").duration_since(validity("not_before"));
    assert_eq!(lifetime.as_secs(), 900, "10 minutes, backdated 5 by the signer: {short}");

    let unproven = &reports[&keyless];
    assert_eq!(unproven["findings"], json!(["malformed"]), "{unproven}");
    let detail = unproven["detail"].as_str().unwrap();
    assert!(detail.contains("BadSignature"), "the handshake's signature is not the leaf key's: {detail}");
    assert_eq!(unproven["certificate"]["names"]["dns_names"], json!([keyless]), "the chain presented is read");
    assert_eq!((&unproven["verified"], &unproven["policy"]["decision"]), (&json!(true), &json!("approve")));

    assert_eq!(reports[&unreachable]["address"], format!("{}:{KUBELET_PORT}", addresses[4]));
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
    assert_eq!(code(&["--fail-on=malformed", &keyless]), Some(FINDINGS));
    let quiet = ["--fail-on=expiring=300d,self-signed,non-compliant,unreachable,not-dialled,malformed", &compliant];
    assert_eq!(code(&quiet), Some(0));
    assert_eq!(code(&["--fail-on=expiring", &expiring]), Some(FINDINGS), "10 minutes left, within 7 days");
    assert_eq!(code(&["--fail-on=expiring=1h", &expiring]), Some(FINDINGS), "10 minutes left, within an hour");
    assert_eq!(code(&["--fail-on=expiring=5m", &expiring]), Some(0), "more than 5 minutes left");
    let year = audit(kubeconfig, &shared, &["-o", "json", "--fail-on=expiring=400d", &compliant]);
    assert_eq!(year.status.code(), Some(FINDINGS), "{}", stderr(&year));
    assert_eq!(json_reports(&year)[&compliant]["state"], "expiring");
    assert!(stderr(&year).contains(&compliant), "the failing Node is named: {}", stderr(&year));
    let bad = audit(kubeconfig, &shared, &["--fail-on=expiring=soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--fail-on"), "{}", stderr(&bad));

    // The audit lists no CSR: an identity that may not read them gets the same reports.
    let (auditor, auditor_client) = auditor_without_csrs(&cp, &admin, dir.path()).await;
    let listed = Api::<CertificateSigningRequest>::all(auditor_client).list(&Default::default()).await;
    assert!(matches!(listed, Err(kube::Error::Api(ref status)) if status.code == 403), "{listed:?}");
    let audited: Vec<&str> = all.iter().filter(|node| **node != &silent).map(|node| node.as_str()).collect();
    let restricted = audit(&auditor, &shared, &[&["-o", "json"], audited.as_slice()].concat());
    assert_eq!(restricted.status.code(), Some(0), "{}", stderr(&restricted));
    let restricted = json_reports(&restricted);
    assert_eq!(restricted.len(), audited.len());
    for (node, report) in &restricted {
        assert_eq!(timeless(report), timeless(&reports[node]), "{node}");
    }

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
