//! Serving renewals in machine mode against real kubelets, with no Machine anywhere: the approver
//! dials the kubelet at the address its Node gives, verifies what it serves against the cluster CA
//! (the kubelet-serving signer's) and approves a CSR that asks for exactly the names of that
//! certificate; anything else waits for a Machine or a human, and a kubelet that does not answer
//! in time is retried. The dial goes only where a kubelet can be: an address of a Node inside
//! `--provider-ip-prefixes`, not reserved and not the apiserver's, at `--kubelet-port`; a Node
//! that points elsewhere is not dialled (its listener never sees a connection), and an Event never
//! says why a dial failed (refused, timed out), only that the kubelet was unreachable.
//!
//! The kubelet's own rotation is not driven here: the signer issues certificates for a year, and
//! kube-controller-manager's certificate manager renews at 70–90 % of the lifetime, so even the
//! shortest lifetime the CSR API accepts (`expirationSeconds` of 10 minutes, which the kubelet
//! does not set for serving certificates) would keep a test waiting for 7 minutes or more. The
//! renewal CSRs below are made the way the kubelet makes them: as `system:node:<name>`, with the
//! names and addresses its certificate already carries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::Request;
use support::cluster::{Approver, REGEX, create_serving_csr, unique, wait_decided, wait_event};
use testenv::{AddressFamilies, ControlPlane, Kubelet, KubeletCredentials, KubeletOptions, NodeNetwork};

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

/// Asserts that an Event note tells nothing of why a dial failed.
fn assert_tells_no_error(note: &str) {
    for error in ["refused", "os error", "timed out", "within", "reset", "corrupt"] {
        assert!(!note.contains(error), "the event tells the error: {note:?}");
    }
}

/// Asserts that nothing connected to `listener`.
fn assert_not_dialled(listener: &TcpListener, what: &str) {
    listener.set_nonblocking(true).unwrap();
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{what} was dialled: {accepted:?}"
    );
}

/// Relays every connection to `listener` to `to`: a kubelet seen at another address.
async fn relay(listener: tokio::net::TcpListener, to: SocketAddr) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
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
    let (kubelet, other_ca_kubelet) = (kubelet.unwrap(), other_ca_kubelet.unwrap());
    approve_first_certificate(&admin, &kubelet).await;
    eprintln!("kubelets up, the first certificate issued by hand after {:?}", started.elapsed());

    // Every Node below points at the kubelet port of the first kubelet, at another address: one
    // network gives this machine the addresses of its host end (198.51.100.x, 2001:db8:...::1)
    // and the node end's address, where nothing listens; another an address outside the prefixes.
    let port = kubelet.address().port();
    let (net, outside_net) =
        (NodeNetwork::create(AddressFamilies::DualStack).unwrap(), NodeNetwork::create(AddressFamilies::Ipv4).unwrap());
    let (host_v4, host_v6, node_v4) = (net.host_addresses()[0], net.host_addresses()[1], net.addresses()[0]);
    let at = |ip: IpAddr| SocketAddr::new(ip, port);
    // A node whose Node object gives the address of the first kubelet, which serves another node's
    // certificate; one whose kubelet (relayed) serves a certificate of its own CA; one whose
    // kubelet port accepts connections and never answers; one where nothing listens.
    let (ghost, untrusted_node, silent, closed) =
        (node_name("ghost"), node_name("untrusted"), node_name("silent"), node_name("closed"));
    create_node(&admin, &ghost, kubelet.address()).await;
    let relayed = tokio::net::TcpListener::bind(at(host_v4)).await.unwrap();
    tokio::spawn(relay(relayed, other_ca_kubelet.address()));
    create_node(&admin, &untrusted_node, at(host_v4)).await;
    let silent_port = TcpListener::bind(at(host_v6)).unwrap();
    create_node(&admin, &silent, at(host_v6)).await;
    create_node(&admin, &closed, at(node_v4)).await;
    // Nodes that point where no kubelet can be, each with a listener that must see no connection:
    // loopback (inside the prefixes), an address outside the prefixes, another port.
    let (loopback, outside, other_port, apiserver) =
        (node_name("loopback"), node_name("outside"), node_name("other-port"), node_name("apiserver"));
    let loopback_port = TcpListener::bind(at("127.0.0.1".parse().unwrap())).unwrap();
    create_node(&admin, &loopback, at("127.0.0.1".parse().unwrap())).await;
    let outside_port = TcpListener::bind(at(outside_net.host_addresses()[0])).unwrap();
    create_node(&admin, &outside, at(outside_net.host_addresses()[0])).await;
    let another_port = TcpListener::bind((host, 0)).unwrap();
    create_node(&admin, &other_port, another_port.local_addr().unwrap()).await;
    // The apiserver's ClusterIP, inside the prefixes.
    let service = Api::<Service>::namespaced(admin.clone(), "default").get("kubernetes").await.unwrap();
    let cluster_ip: IpAddr = service.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
    create_node(&admin, &apiserver, at(cluster_ip)).await;

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, cp.ca_cert_pem().unwrap()).unwrap();
    let ca_flag = format!("--kubelet-serving-ca-file={}", ca_file.display());
    let port_flag = format!("--kubelet-port={port}");
    // The Machine API is not served: no Machine claims any node. The extra prefix lets a request
    // carry an address that is not the node's; loopback and the ClusterIP are inside the prefixes,
    // so that only the reserved and apiserver addresses keep them from being dialled.
    let single = |ip: IpAddr| format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 });
    let prefixes = [host, host_v4, host_v6, node_v4, "127.0.0.1".parse().unwrap(), cluster_ip].map(single).join(",");
    let prefixes = format!("{prefixes},10.0.0.0/16");
    let flags =
        ["--machine-api=cluster.x-k8s.io/v1beta1", "--bypass-dns-resolution", ca_flag.as_str(), port_flag.as_str()];
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
    create_serving_csr(&cp, &untrusted, &untrusted_node, &renewal_of(&untrusted_node, host)).await;
    assert_waits(&admin, &approver, &untrusted, "MachineNotFound", "UnknownIssuer").await;
    // Kubelets that do not answer or are not there: retried, never decided, and the Event says
    // "unreachable" and nothing of why.
    let mut waiting = vec![extra, foreign, untrusted];
    for (node, listening) in [(&silent, Some(&silent_port)), (&closed, None)] {
        let csr = unique("unreachable");
        let asked = Instant::now();
        create_serving_csr(&cp, &csr, node, &renewal_of(node, host)).await;
        let event = wait_event(&admin, &csr, "KubeletUnreachable", STEP).await;
        let note = event.and_then(|e| e.note).unwrap_or_else(|| panic!("no event for {csr}\n{}", approver.logs()));
        assert!(note.contains(" unreachable"), "{note:?}");
        assert_tells_no_error(&note);
        assert!(asked.elapsed() < STEP, "the dial is bounded");
        assert!(wait_decided(&admin, &csr, Duration::ZERO).await.is_empty(), "{csr} was decided");
        if let Some(listener) = listening {
            listener.set_nonblocking(true).unwrap();
            assert!(listener.accept().is_ok(), "the silent kubelet port was dialled");
        }
        waiting.push(csr);
    }
    // The log keeps what the Events do not tell.
    let logs = approver.logs();
    assert!(logs.contains("kubelet unreachable") && logs.contains("refused"), "{logs}");
    // Nodes that point where no kubelet can be: not dialled, and waiting for a Machine.
    let not_dialled = [
        (&loopback, Some(&loopback_port), "is loopback (127.0.0.0/8)".to_owned()),
        (&outside, Some(&outside_port), "is outside --provider-ip-prefixes".to_owned()),
        (&other_port, Some(&another_port), format!("is not the kubelet port {port} (--kubelet-port)")),
        (&apiserver, None, "is an address of the apiserver".to_owned()),
    ];
    for (node, listener, says) in not_dialled {
        let csr = unique("not-dialled");
        create_serving_csr(&cp, &csr, node, &renewal_of(node, host)).await;
        assert_waits(&admin, &approver, &csr, "MachineNotFound", "the kubelet is not dialled: the Node's").await;
        assert_waits(&admin, &approver, &csr, "MachineNotFound", &says).await;
        if let Some(listener) = listener {
            assert_not_dialled(listener, node);
        }
        waiting.push(csr);
    }
    for name in &waiting {
        let stored = csrs.get(name).await.unwrap();
        assert!(stored.status.and_then(|s| s.certificate).is_none(), "{name} was issued");
    }
    drop((silent_port, net, outside_net));
    eprintln!("done after {:?}", started.elapsed());
}
