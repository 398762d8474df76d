//! Against the real control plane (testenv): a node asking for the apiserver's own addresses is
//! denied `ClusterIdentity`, inside its prefixes and with `--bypass-dns-resolution`, and the
//! signer issues nothing; the addresses come from the watched `default/kubernetes` Service and its
//! EndpointSlices, kept current. A control-plane node, whose own address the apiserver advertises,
//! gets it in its serving certificate; no other node does, and neither does it once another node
//! claims the address too.
//!
//! The control-plane flow needs root (a network namespace for its kubelet), `ip`, `unshare`,
//! `nsenter` and user namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::Request;
use support::cluster::{
    Approver, Csrs, REGEX, SERIAL, conditions, create_serving_csr, unique, wait_decided, wait_event,
};
use support::kubelet_flow::{
    SERVING_SIGNER, assert_decided, certificate_sans, node_name, prefixes_of, requested_sans, wait_csr,
    wait_proxy_healthz, wait_serving_certificate,
};
use testdns::{DnsServer, Records};
use testenv::{AddressFamilies, ControlPlane, KubeletCredentials, KubeletOptions, NodeNetwork};

const DECIDE: Duration = Duration::from_secs(20);
/// How long the signer is given to issue a certificate it should not issue.
const SIGNER_GRACE: Duration = Duration::from_secs(5);

fn asks(node: &str, ip: &str) -> Request {
    Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(ip)
}

async fn certificate(admin: &Client, name: &str) -> Option<k8s_openapi::ByteString> {
    let csr = Api::<CertificateSigningRequest>::all(admin.clone()).get(name).await.unwrap();
    csr.status.and_then(|s| s.certificate)
}

async fn wait_certificate(admin: &Client, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if certificate(admin, name).await.is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Asserts `name` was denied `ClusterIdentity` naming `ip`, and stays without a certificate.
async fn assert_denied_unsigned(admin: &Client, name: &str, ip: &str, approver: &Approver) {
    let decided = wait_decided(admin, name, DECIDE).await;
    let first = decided.first().unwrap_or_else(|| panic!("{name} undecided:\n{}", approver.logs()));
    assert_eq!((first.type_.as_str(), first.reason.as_deref()), ("Denied", Some("ClusterIdentity")), "{decided:?}");
    assert!(first.message.as_deref().unwrap_or_default().contains(ip), "{decided:?}");
    assert!(!wait_certificate(admin, name, SIGNER_GRACE).await, "the signer issued a certificate for {ip}");
}

#[tokio::test]
async fn a_node_asking_for_the_apiservers_addresses_is_denied_and_nothing_is_issued() {
    let _serial = SERIAL.lock().await;
    // The signer is this process's own, so whatever it issues is seen.
    let cp = ControlPlane::shared_with_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let service = Api::<Service>::namespaced(admin.clone(), "default").get("kubernetes").await.unwrap();
    let cluster_ip = service.spec.and_then(|spec| spec.cluster_ip).unwrap();
    let inside: ipnet::IpNet = testkit::policy::PREFIXES.parse().unwrap();
    assert!(inside.contains(&cluster_ip.parse::<std::net::IpAddr>().unwrap()), "{cluster_ip} outside the prefixes");
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");

    // `check NAME` reads the same addresses from the cluster before it decides.
    let checked = csrs.name("identity-check");
    create_serving_csr(cp, &checked, &node, &asks(&node, &cluster_ip)).await;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.args(["check", "-o", "json", "--bypass-dns-resolution", "--kubeconfig"]).arg(cp.kubeconfig_path());
    command.args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", testkit::policy::PREFIXES]);
    let output = command.arg(&checked).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    assert_eq!(
        (report["decision"].as_str(), report["reason"].as_str()),
        (Some("deny"), Some("ClusterIdentity")),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    assert_denied_unsigned(&admin, &checked, &cluster_ip, &approver).await;

    // The signer runs: a legitimate CSR is approved and issued.
    let legit = csrs.name("identity-legit");
    create_serving_csr(cp, &legit, &node, &asks(&node, "10.0.0.71")).await;
    let decided = wait_decided(&admin, &legit, DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    assert!(wait_certificate(&admin, &legit, DECIDE).await, "the signer issued nothing for an approved CSR");

    // The Service's ClusterIP, inside the prefixes, DNS bypassed: denied, nothing issued.
    let forged = csrs.name("identity-clusterip");
    create_serving_csr(cp, &forged, &node, &asks(&node, &cluster_ip)).await;
    assert_denied_unsigned(&admin, &forged, &cluster_ip, &approver).await;

    // An EndpointSlice of the Service added while the approver runs: its address is denied too.
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let slice_name = unique("kubernetes-extra");
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some(slice_name.clone()),
            labels: Some([("kubernetes.io/service-name".to_owned(), "kubernetes".to_owned())].into()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint { addresses: vec!["10.0.0.72".into()], ..Endpoint::default() }],
        ports: None,
    };
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let endpoint = csrs.name("identity-endpoint");
    // The local watch delivers the slice within moments; the CSR comes after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    create_serving_csr(cp, &endpoint, &node, &asks(&node, "10.0.0.72")).await;
    let denied = wait_decided(&admin, &endpoint, DECIDE).await;
    slices.delete(&slice_name, &DeleteParams::default()).await.unwrap();
    let first = denied.first().unwrap();
    assert_eq!(first.reason.as_deref(), Some("ClusterIdentity"), "{denied:?}\n{}", approver.logs());
    assert!(!wait_certificate(&admin, &endpoint, SIGNER_GRACE).await, "the signer issued a certificate");
}

/// Waits until the `default/kubernetes` EndpointSlices list `address`.
async fn wait_advertised(admin: &Client, address: IpAddr) {
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let selector = ListParams::default().labels("kubernetes.io/service-name=kubernetes");
    let deadline = Instant::now() + DECIDE;
    loop {
        let listed = slices.list(&selector).await.unwrap().items;
        let addresses = listed.iter().flat_map(|slice| slice.endpoints.iter().flat_map(|e| e.addresses.iter()));
        if addresses.clone().any(|a| a.parse() == Ok(address)) {
            return;
        }
        assert!(Instant::now() < deadline, "the apiserver does not advertise {address}: {listed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The topology of a kubeadm control-plane node: the apiserver advertised on the address of a
/// kubelet's own network namespace (its own reconciler lists it in `default/kubernetes`). That
/// kubelet's serving CSR, for its name and that address, is approved and issued, and the
/// apiserver's proxy reaches it over TLS verified for it. A worker asking for the address, its
/// name resolving to it, is denied; once the worker writes the address into its own Node's
/// status (as a node may), nothing the kubelets cannot write tells the two apart: both are retried
/// with an Event, neither denied; once the control-plane node carries the control-plane role label
/// (which NodeRestriction keeps kubelets from setting), it gets the address and the worker is denied.
#[tokio::test]
async fn a_control_plane_kubelet_gets_its_advertise_address_and_no_other_node_does() {
    let network = Arc::new(NodeNetwork::create(AddressFamilies::Ipv4).unwrap());
    let address = network.addresses()[0];
    let cp = ControlPlane::start_advertising(Some(address)).await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    wait_advertised(&admin, address).await;
    let (control_plane, worker) = (node_name("control-plane"), node_name("worker"));
    let dns = DnsServer::start_on_thread(Records::new().ip(&control_plane, address).ip(&worker, address)).unwrap();
    let dns_flag = format!("--dns-server={}", dns.addr());
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes_of(&[address]), &[&dns_flag], &[]);
    approver.wait_ready().await;

    let options = KubeletOptions::in_network(&control_plane, Arc::clone(&network), KubeletCredentials::NodeCertificate);
    let kubelet = cp.start_kubelet(options).await.unwrap();
    let csr = wait_csr(&admin, SERVING_SIGNER, &format!("system:node:{control_plane}")).await;
    let sans = (vec![control_plane.clone()], vec![address]);
    assert_eq!(requested_sans(&csr), sans, "the control-plane kubelet's request");
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    let issued = wait_serving_certificate(&admin, &kubelet, &name).await;
    assert_eq!(certificate_sans(&issued), sans, "the issued certificate");
    assert_eq!(wait_proxy_healthz(&cp, &kubelet).await, "ok");

    // A worker whose name resolves to the address asks for it: denied, nothing issued.
    let csrs = Csrs::new(cp.kubeconfig_path());
    let ip = address.to_string();
    let asks = |node: &str| Request::node(node).dns(node).ip(&ip);
    let forged = csrs.name("advertise-worker");
    create_serving_csr(&cp, &forged, &worker, &asks(&worker)).await;
    assert_denied_unsigned(&admin, &forged, &ip, &approver).await;

    // The worker registers its own Node with the address: now two nodes claim it, and neither
    // gets it while nothing tells them apart: both are retried, with an Event naming the worker.
    let as_worker = cp.impersonated_client(&format!("system:node:{worker}"), &["system:nodes"]).await.unwrap();
    let nodes = Api::<Node>::all(as_worker);
    let object =
        Node { metadata: ObjectMeta { name: Some(worker.clone()), ..ObjectMeta::default() }, ..Node::default() };
    nodes.create(&PostParams::default(), &object).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
    nodes.patch_status(&worker, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let (again, renewal) = (csrs.name("advertise-worker-claims"), csrs.name("advertise-ambiguous"));
    create_serving_csr(&cp, &again, &worker, &asks(&worker)).await;
    create_serving_csr(&cp, &renewal, &control_plane, &asks(&control_plane)).await;
    for name in [&again, &renewal] {
        let event = wait_event(&admin, name, "AdvertiseAddressContested", DECIDE).await;
        let note = event.and_then(|event| event.note).unwrap_or_default();
        assert!(note.contains(&worker) && note.contains(&ip), "{name}: {note:?}\n{}", approver.logs());
        assert!(conditions(&admin, name).await.is_empty(), "{name} was decided while contested");
    }
    // The administrator labels the control-plane node: its renewal is approved, the worker denied.
    let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
    let admin_nodes = Api::<Node>::all(admin.clone());
    admin_nodes.patch(&control_plane, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    assert_decided(&admin, &renewal, "Approved", "AutoApproved", &context).await;
    assert_denied_unsigned(&admin, &again, &ip, &approver).await;
    let message = wait_decided(&admin, &again, DECIDE).await.first().and_then(|c| c.message.clone());
    assert!(message.as_deref().unwrap_or_default().contains(&control_plane), "{message:?}");
    admin_nodes.delete(&worker, &DeleteParams::default()).await.unwrap();
}

/// `check --objects` reads the `default/kubernetes` Service and its EndpointSlices, so an offline
/// check decides as the controller does; any other Service or EndpointSlice is refused.
#[test]
fn an_offline_check_reads_the_apiserver_service_and_slices_from_objects() {
    let dir = tempfile::tempdir().unwrap();
    let csr = |ip: &str| {
        let pem = asks("n1", ip).pem();
        let body = support::pem_block("X", pem.as_bytes());
        let base64: String = body.lines().filter(|l| !l.starts_with("-----")).collect();
        format!(
            "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: asks-{ip}\n  \
             creationTimestamp: \"2026-01-01T00:00:00Z\"\nspec:\n  signerName: kubernetes.io/kubelet-serving\n  \
             username: system:node:n1\n  groups: [system:nodes, system:authenticated]\n  usages: [digital \
             signature, server auth]\n  request: {base64}\n"
        )
    };
    let csrs = dir.path().join("csrs.yaml");
    std::fs::write(&csrs, [csr("10.0.0.1"), csr("10.0.0.2"), csr("10.0.0.3")].join("---\n")).unwrap();
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: kubernetes, namespace: default}\nspec:\n  \
                   clusterIP: 10.0.0.1\n  clusterIPs: [10.0.0.1]\n";
    let slice = |namespace: &str, service: &str| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: kubernetes\n  namespace: \
             {namespace}\n  labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nendpoints:\n  - \
             addresses: [10.0.0.2]\n"
        )
    };
    let check = |objects: &str| {
        let path = dir.path().join("objects.yaml");
        std::fs::write(&path, objects).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
        command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        command.args(["check", "-o", "json", "--bypass-dns-resolution", "--now", "2026-01-01T00:01:00Z"]);
        command.args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", "10.0.0.0/16"]);
        command.arg("--file").arg(&csrs).arg("--objects").arg(&path);
        command.output().unwrap()
    };
    let output = check(&format!("{service}---\n{}", slice("default", "kubernetes")));
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let decisions: Vec<(String, String)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|r| (r["decision"].as_str().unwrap().to_owned(), r["reason"].as_str().unwrap().to_owned()))
        .collect();
    let expect = |d: &str, r: &str| (d.to_owned(), r.to_owned());
    assert_eq!(
        decisions,
        [expect("deny", "ClusterIdentity"), expect("deny", "ClusterIdentity"), expect("approve", "AutoApproved")]
    );
    // The slice's address is n1's own once n1's Node lists it, and contested when n2's does too.
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  addresses:\n  - {{type: InternalIP, address: 10.0.0.2}}\n"
        )
    };
    let owned = format!("{service}---\n{}---\n{}", slice("default", "kubernetes"), node("n1"));
    let ambiguous = format!("{owned}---\n{}", node("n2"));
    for (objects, second) in
        [(owned, expect("approve", "AutoApproved")), (ambiguous, expect("retry", "AdvertiseAddressContested"))]
    {
        let output = check(&objects);
        let decisions: Vec<(String, String)> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .map(|r| (r["decision"].as_str().unwrap().to_owned(), r["reason"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            decisions,
            [expect("deny", "ClusterIdentity"), second, expect("approve", "AutoApproved")],
            "{objects}"
        );
    }
    for other in [
        service.replace("name: kubernetes", "name: web"),
        service.replace("namespace: default", "namespace: kube-system"),
        slice("kube-system", "kubernetes"),
        slice("default", "web"),
    ] {
        let output = check(&other);
        assert_eq!(output.status.code(), Some(1), "accepted {other}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("default/kubernetes"), "{stderr}");
    }
}
