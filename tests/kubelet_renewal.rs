//! Serving renewals in machine mode against real kubelets, with no Machine anywhere: the approver
//! dials the kubelet at the address its Node gives, verifies what it serves against the cluster CA
//! (the kubelet-serving signer's) and approves a CSR that asks for exactly the names of that
//! certificate; anything else waits for a Machine or a human, and a kubelet that does not answer
//! in time is retried.
//!
//! The kubelet's own rotation is not driven here: the signer issues certificates for a year, and
//! kube-controller-manager's certificate manager renews at 70–90 % of the lifetime, so even the
//! shortest lifetime the CSR API accepts (`expirationSeconds` of 10 minutes, which the kubelet
//! does not set for serving certificates) would keep a test waiting for 7 minutes or more. The
//! renewal CSRs below are made the way the kubelet makes them: as `system:node:<name>`, with the
//! names and addresses its certificate already carries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::Request;
use support::cluster::{Approver, REGEX, create_serving_csr, unique, wait_decided, wait_event};
use testenv::{ControlPlane, Kubelet, KubeletCredentials, KubeletOptions};

const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How long a CSR may take to appear, be decided, be issued and be picked up.
const STEP: Duration = Duration::from_secs(30);

fn node_name(prefix: &str) -> String {
    format!("{}.nodes.example.com", unique(prefix))
}

/// Approves, as a human would, the first serving CSR of `kubelet`, and waits until it serves the
/// certificate issued for it.
async fn approve_first_certificate(admin: &Client, kubelet: &Kubelet) {
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let user = format!("system:node:{}", kubelet.node_name());
    let deadline = Instant::now() + STEP;
    let name = loop {
        let csrs = api.list(&Default::default()).await.unwrap().items;
        let found = csrs
            .into_iter()
            .find(|csr| csr.spec.signer_name == SERVING_SIGNER && csr.spec.username.as_deref() == Some(user.as_str()));
        if let Some(csr) = found {
            break csr.metadata.name.unwrap();
        }
        assert!(Instant::now() < deadline, "no serving CSR of {user}\n{}", kubelet.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let approval = json!({"status": {"conditions": [
        {"type": "Approved", "status": "True", "reason": "ApprovedByHand", "message": "the node's first certificate"}
    ]}});
    api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(approval)).await.unwrap();
    while kubelet.serving_certificate_pem().is_none() {
        assert!(Instant::now() < deadline, "{user} serves no issued certificate\n{}", kubelet.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates a Node `name` whose kubelet is at `kubelet` (InternalIP and kubelet port), as a
/// kubelet registering would.
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

/// The renewal request of node `node` on `host`: its name and its address.
fn renewal_of(node: &str, host: IpAddr) -> Request {
    Request::node(node).dns(node).ip(&host.to_string())
}

/// Asserts that CSR `name` stays undecided and is announced with `reason`, whose note contains `says`.
async fn assert_waits(admin: &Client, approver: &Approver, name: &str, reason: &str, says: &str) {
    let event = wait_event(admin, name, reason, STEP).await;
    let note =
        event.and_then(|e| e.note).unwrap_or_else(|| panic!("no {reason} event for {name}\n{}", approver.logs()));
    assert!(note.contains(says), "{name}: {note:?} does not say {says:?}");
    assert!(wait_decided(admin, name, Duration::ZERO).await.is_empty(), "{name} was decided\n{}", approver.logs());
}

#[tokio::test]
async fn a_real_kubelets_serving_renewal_is_approved_without_a_machine_and_nothing_else_is() {
    let started = Instant::now();
    let host = testenv::host_address().unwrap();
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let (good, other_ca) = (node_name("renewing"), node_name("selfsigned"));
    let options = |name: &str| KubeletOptions::new(name, host, KubeletCredentials::NodeCertificate);
    // A kubelet that serves a certificate of its own instead of one of the signer's.
    let self_signed = KubeletOptions { server_tls_bootstrap: false, ..options(&other_ca) };
    let (kubelet, other_ca_kubelet) = tokio::join!(cp.start_kubelet(options(&good)), cp.start_kubelet(self_signed));
    let (kubelet, _other_ca_kubelet) = (kubelet.unwrap(), other_ca_kubelet.unwrap());
    approve_first_certificate(&admin, &kubelet).await;
    eprintln!("kubelets up, the first certificate issued by hand after {:?}", started.elapsed());

    // A node whose Node object gives the address of the first kubelet, which serves another node's
    // certificate; and one whose kubelet port accepts connections and never answers.
    let (ghost, silent) = (node_name("ghost"), node_name("silent"));
    create_node(&admin, &ghost, kubelet.address()).await;
    let silent_port = std::net::TcpListener::bind((host, 0)).unwrap();
    create_node(&admin, &silent, silent_port.local_addr().unwrap()).await;

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, cp.ca_cert_pem().unwrap()).unwrap();
    let ca_flag = format!("--kubelet-serving-ca-file={}", ca_file.display());
    // The Machine API is not served: no Machine claims any node. The extra prefix lets a request
    // carry an address that is not the node's.
    let prefixes = format!("{host}/{},10.0.0.0/16", if host.is_ipv4() { 32 } else { 128 });
    let flags = ["--machine-api=cluster.x-k8s.io/v1beta1", "--bypass-dns-resolution", ca_flag.as_str()];
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes, &flags, &[]);
    approver.wait_ready().await;

    // The renewal: the same names as the certificate the kubelet serves.
    let csrs = Api::<CertificateSigningRequest>::all(admin.clone());
    let renewal = unique("renewal");
    create_serving_csr(&cp, &renewal, &good, &renewal_of(&good, host)).await;
    let decided = wait_decided(&admin, &renewal, STEP).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref().unwrap_or(""))).collect();
    assert_eq!(got, [("Approved", "AutoApproved")], "{}", approver.logs());
    let message = decided[0].message.clone().unwrap_or_default();
    assert!(message.contains(&format!("renews the certificate node {good:?}'s kubelet serves (serial ")), "{message}");
    eprintln!("renewal approved after {:?}", started.elapsed());

    // One more address than the served certificate has.
    let extra = unique("extra-san");
    create_serving_csr(&cp, &extra, &good, &renewal_of(&good, host).ip("10.0.0.7")).await;
    assert_waits(&admin, &approver, &extra, "MachineNotFound", "are not those of the served certificate").await;
    // A node whose Node points at another node's kubelet: that kubelet's certificate is not its own.
    let foreign = unique("other-node");
    create_serving_csr(&cp, &foreign, &ghost, &renewal_of(&ghost, host)).await;
    assert_waits(&admin, &approver, &foreign, "MachineNotFound", &format!("has CN [\"system:node:{good}\"]")).await;
    // A kubelet serving a certificate of another CA.
    let untrusted = unique("other-ca");
    create_serving_csr(&cp, &untrusted, &other_ca, &renewal_of(&other_ca, host)).await;
    assert_waits(&admin, &approver, &untrusted, "MachineNotFound", "UnknownIssuer").await;
    // A kubelet that does not answer: retried, never decided.
    let unreachable = unique("unreachable");
    let asked = Instant::now();
    create_serving_csr(&cp, &unreachable, &silent, &renewal_of(&silent, host)).await;
    assert_waits(&admin, &approver, &unreachable, "KubeletUnreachable", "within 3s").await;
    assert!(asked.elapsed() < STEP, "the dial is bounded");
    for name in [&extra, &foreign, &untrusted, &unreachable] {
        let stored = csrs.get(name).await.unwrap();
        assert!(stored.status.and_then(|s| s.certificate).is_none(), "{name} was issued");
    }
    drop(silent_port);
    eprintln!("done after {:?}", started.elapsed());
}
