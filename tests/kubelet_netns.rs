//! End to end with real kubelets that each have addresses of their own: every kubelet runs in a
//! network namespace of its own (`testenv::NodeNetwork`), linked to this machine's by a veth pair,
//! with an IPv4 address, an IPv6 address or both from documentation ranges that exist only in this
//! test's namespaces. The kubelets reach the apiserver through a relay on the host end of their
//! link; the apiserver reaches each kubelet at its own InternalIP over that link, and verifies its
//! serving certificate with the cluster CA for that address.
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare`, `nsenter` and user namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::cluster::{Approver, REGEX, wait_decided, wait_event};
use support::kubelet_flow::{
    CLIENT_SIGNER, SERVING_SIGNER, STEP, assert_decided, certificate_sans, direct_healthz, install_cluster_api,
    machine_resource, machines, node_name, prefixes_of, proxy_healthz, requested_sans, wait_csr, wait_proxy_healthz,
    wait_serving_certificate,
};
use testdns::{DnsServer, Records};
use testenv::{AddressFamilies, ControlPlane, Kubelet, KubeletCredentials, KubeletOptions, NodeNetwork};

/// The AAAA answer of the rogue node: in the documentation range, outside every node's prefix.
const ROGUE_AAAA: &str = "2001:db8:ffff::7";

/// A network of `families` for one node.
fn network(families: AddressFamilies) -> Arc<NodeNetwork> {
    Arc::new(NodeNetwork::create(families).unwrap())
}

/// The InternalIP addresses of Node `name`, as the kubelet registered them.
async fn internal_ips(admin: &Client, name: &str) -> Vec<IpAddr> {
    let node = Api::<Node>::all(admin.clone()).get(name).await.unwrap();
    let addresses = node.status.and_then(|status| status.addresses).unwrap_or_default();
    addresses.iter().filter(|a| a.type_ == "InternalIP").map(|a| a.address.parse().unwrap()).collect()
}

/// The kubelet's own serving CSR is approved with exactly the SANs it asked for (its name and all
/// its addresses), the certificate issued holds exactly those, the kubelet serves it, the
/// apiserver's proxy reaches it over TLS verified for its first InternalIP, and this process
/// reaches it over TLS verified for each of its addresses, at that address.
async fn assert_served(cp: &ControlPlane, admin: &Client, approver: &Approver, kubelet: &Kubelet) {
    let name = kubelet.node_name();
    let csr = wait_csr(admin, SERVING_SIGNER, &format!("system:node:{name}")).await;
    let mut addresses = kubelet.node_ips().to_vec();
    addresses.sort();
    assert_eq!(requested_sans(&csr), (vec![name.to_owned()], addresses.clone()), "the kubelet's request");
    let csr_name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(admin, &csr_name, "Approved", "AutoApproved", &context).await;
    let issued = wait_serving_certificate(admin, kubelet, &csr_name).await;
    assert_eq!(certificate_sans(&issued), (vec![name.to_owned()], addresses), "the issued certificate");
    assert_eq!(internal_ips(admin, name).await, kubelet.node_ips(), "the Node's InternalIPs");
    assert_eq!(wait_proxy_healthz(cp, kubelet).await, "ok");
    let ca = cp.ca_cert_pem().unwrap();
    for address in kubelet.node_ips() {
        let at = SocketAddr::new(*address, kubelet.address().port());
        assert_eq!(direct_healthz(&ca, at, *address).as_deref(), Ok("ok"), "TLS to {at}");
    }
}

/// Whether this machine has a link named `name`.
fn link_exists(name: &str) -> bool {
    std::process::Command::new("ip").args(["link", "show", "dev", name]).output().unwrap().status.success()
}

#[tokio::test]
async fn kubelets_on_ipv4_ipv6_and_dual_stack_addresses_of_their_own() {
    let started = Instant::now();
    let families = [
        AddressFamilies::Ipv4,
        AddressFamilies::Ipv6,
        AddressFamilies::DualStack,
        AddressFamilies::DualStackIpv6Primary,
    ];
    let networks = families.map(network);
    let rogue = network(AddressFamilies::Ipv6);
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let names = ["ipv4", "ipv6", "dual", "dual-ipv6-primary"].map(node_name);
    let rogue_name = node_name("rogue6");
    // DNS answers A for the IPv4 node, AAAA for the IPv6 one, both for the dual-stack ones; the
    // rogue node's AAAA answer lies outside the prefixes, though its own address does not.
    let records = names.iter().zip(&networks).fold(Records::new(), |records, (name, network)| {
        network.addresses().iter().fold(records, |records, address| records.ip(name, *address))
    });
    let dns = DnsServer::start_on_thread(records.aaaa(&rogue_name, ROGUE_AAAA)).unwrap();
    let all: Vec<IpAddr> = networks.iter().chain([&rogue]).flat_map(|n| n.addresses().to_vec()).collect();
    let dns_flag = format!("--dns-server={}", dns.addr());
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes_of(&all), &[&dns_flag], &[]);
    approver.wait_ready().await;

    let options = |name: &str, network: &Arc<NodeNetwork>| {
        KubeletOptions::in_network(name, Arc::clone(network), KubeletCredentials::NodeCertificate)
    };
    let kubelets = tokio::join!(
        cp.start_kubelet(options(&names[0], &networks[0])),
        cp.start_kubelet(options(&names[1], &networks[1])),
        cp.start_kubelet(options(&names[2], &networks[2])),
        cp.start_kubelet(options(&names[3], &networks[3])),
        cp.start_kubelet(options(&rogue_name, &rogue)),
    );
    let (rogue_kubelet, kubelets) =
        (kubelets.4.unwrap(), [kubelets.0.unwrap(), kubelets.1.unwrap(), kubelets.2.unwrap(), kubelets.3.unwrap()]);
    eprintln!("control plane, approver and five kubelets up after {:?}", started.elapsed());
    let kinds: Vec<Vec<bool>> = kubelets.iter().map(|k| k.node_ips().iter().map(IpAddr::is_ipv4).collect()).collect();
    assert_eq!(kinds, [vec![true], vec![false], vec![true, false], vec![false, true]], "IPv4 (true) or IPv6");

    // The IPv6-only node has no IPv4 address but loopback and registers only its IPv6 address, and
    // the IPv6-primary node registers its IPv6 address first: the apiserver reaches both over IPv6.
    for kubelet in &kubelets {
        assert_served(&cp, &admin, &approver, kubelet).await;
        eprintln!("{} ({:?}) served after {:?}", kubelet.node_name(), kubelet.node_ips(), started.elapsed());
    }

    // The verification is real: the IPv4 node's certificate is not valid for another address.
    let (at, other) = (kubelets[0].address(), networks[0].host_addresses()[0]);
    let error =
        direct_healthz(&cp.ca_cert_pem().unwrap(), at, other).expect_err("verified for an address not in the SANs");
    assert!(error.contains("not valid for name"), "{error}");

    // The rogue node is denied with the reason, gets no certificate, and is unreachable.
    let csr = wait_csr(&admin, SERVING_SIGNER, &format!("system:node:{rogue_name}")).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), rogue_kubelet.logs());
    assert_decided(&admin, &name, "Denied", "ResolvedIPNotInPrefixes", &context).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored = Api::<CertificateSigningRequest>::all(admin.clone()).get(&name).await.unwrap();
    assert!(stored.status.and_then(|s| s.certificate).is_none(), "a denied CSR was issued");
    assert!(rogue_kubelet.serving_certificate_pem().is_none(), "the rogue kubelet has a serving certificate");
    let error =
        proxy_healthz(&cp, &rogue_name).await.expect_err("the apiserver reached a kubelet without a certificate");
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 503 && status.message.contains("tls:")),
        "{error}"
    );

    // Dropping the kubelets and their networks removes the links, addresses and namespaces.
    let links: Vec<String> = networks.iter().chain([&rogue]).map(|n| n.link_name().to_owned()).collect();
    let namespaces: Vec<_> = networks.iter().chain([&rogue]).map(|n| n.namespace_path()).collect();
    drop((kubelets, rogue_kubelet));
    drop((networks, rogue));
    for link in &links {
        assert!(!link_exists(link), "link {link} survived");
    }
    for namespace in &namespaces {
        assert!(!namespace.exists(), "{} survived", namespace.display());
    }
    eprintln!("done after {:?}", started.elapsed());
}

#[tokio::test]
async fn ipv6_only_kubelet_joins_through_a_cluster_api_machine() {
    let started = Instant::now();
    let network = network(AddressFamilies::Ipv6);
    let address = network.addresses()[0];
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    install_cluster_api(&cp, &admin).await;
    let node = node_name("machine6");
    let dns = DnsServer::start_on_thread(Records::new().aaaa(&node, address)).unwrap();

    // The infrastructure provider has created the Machine and reported its (IPv6) addresses.
    let machine = DynamicObject::new("worker-6", &machine_resource()).data(json!({"spec": {"clusterName": "test"}}));
    machines(&admin).create(&PostParams::default(), &machine).await.unwrap();
    let addresses = json!([{"type": "InternalDNS", "address": node}, {"type": "InternalIP", "address": address}]);
    let status = json!({"status": {"addresses": addresses}});
    machines(&admin).patch_status("worker-6", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();

    let dns_flag = format!("--dns-server={}", dns.addr());
    let machine_mode = [
        dns_flag.as_str(),
        "--machine-api=cluster.x-k8s.io/v1beta1",
        "--bootstrapper-username=system:bootstrap:*",
        "--bootstrapper-groups=system:bootstrappers,system:authenticated",
    ];
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes_of(&[address]), &machine_mode, &[]);
    approver.wait_ready().await;

    // The kubelet has only a bootstrap token: its client CSR must be approved before it can start.
    let token = cp.create_bootstrap_token().await.unwrap();
    let token_id = token.split('.').next().unwrap().to_owned();
    let options = KubeletOptions::in_network(&node, Arc::clone(&network), KubeletCredentials::BootstrapToken(token));
    let kubelet = cp.start_kubelet(options).await.unwrap();
    let csr = wait_csr(&admin, CLIENT_SIGNER, &format!("system:bootstrap:{token_id}")).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    eprintln!("kubelet bootstrapped after {:?}", started.elapsed());

    // It registers its Node with only its IPv6 address, and requests its serving certificate.
    let nodes = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + STEP;
    while nodes.get_opt(&node).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "Node {node} not registered\n{}", context());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let csr = wait_csr(&admin, SERVING_SIGNER, &format!("system:node:{node}")).await;
    let name = csr.metadata.name.clone().unwrap();
    assert_eq!(requested_sans(&csr), (vec![node.clone()], vec![address]), "the kubelet's request");
    // No Machine refers to the Node yet: the serving CSR waits.
    let event = wait_event(&admin, &name, "MachineNotFound", STEP).await;
    assert!(event.is_some(), "no MachineNotFound event\n{}", context());
    assert!(wait_decided(&admin, &name, Duration::ZERO).await.is_empty(), "decided before the Machine claimed it");

    // The Machine's nodeRef is set; the serving CSR is approved against the Machine's IPv6
    // address, and the apiserver reaches the kubelet there over verified TLS.
    let node_ref = json!({"status": {"nodeRef": {"kind": "Node", "apiVersion": "v1", "name": node}}});
    machines(&admin).patch_status("worker-6", &PatchParams::default(), &Patch::Merge(node_ref)).await.unwrap();
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    let issued = wait_serving_certificate(&admin, &kubelet, &name).await;
    assert_eq!(certificate_sans(&issued), (vec![node.clone()], vec![address]), "the issued certificate");
    assert_eq!(internal_ips(&admin, &node).await, [address]);
    assert_eq!(wait_proxy_healthz(&cp, &kubelet).await, "ok");
    assert_eq!(direct_healthz(&cp.ca_cert_pem().unwrap(), kubelet.address(), address).as_deref(), Ok("ok"));
    eprintln!("done after {:?}", started.elapsed());
}
