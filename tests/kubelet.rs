//! End to end with a real kubelet: its own CSRs, decided by the real binary, signed by
//! kube-controller-manager, picked up by the kubelet, and trusted by kube-apiserver, which proxies
//! to the kubelet only over TLS verified with the cluster CA for that node's address.
//!
//! The kubelets run on Kubernetes' fake container runtime (testenv's `fake-cri`), sandboxed in their
//! own user and mount namespaces; their node address is this machine's own (the kubelet refuses a
//! loopback node IP), which the tests' DNS server resolves their names to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::cluster::{Approver, REGEX, unique, wait_decided, wait_event};
use testdns::{DnsServer, Records};
use testenv::{ControlPlane, Kubelet, KubeletCredentials, KubeletOptions};

const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long a kubelet's CSR may take to appear, be decided, be issued and be picked up.
const STEP: Duration = Duration::from_secs(30);

/// A node name under the provider domain the approver's `REGEX` accepts.
fn node_name(prefix: &str) -> String {
    format!("{}.nodes.example.com", unique(prefix))
}

/// The approver's `--provider-ip-prefixes`: exactly the node address.
fn prefix_of(address: IpAddr) -> String {
    let bits = if address.is_ipv4() { 32 } else { 128 };
    format!("{address}/{bits}")
}

/// What a kubelet would change on the machine if it were not sandboxed: the sysctls it rewrites
/// and the directories it creates whatever its configuration says.
fn machine_state() -> Vec<(String, Option<String>)> {
    let files = ["/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/panic", "/proc/sys/kernel/panic_on_oops"];
    let dirs = ["/var/lib/kubelet", "/var/log/containers"];
    let read = |path: &str| (path.to_owned(), std::fs::read_to_string(path).ok());
    let exists = |path: &str| (path.to_owned(), std::path::Path::new(path).exists().then(String::new));
    files.into_iter().map(read).chain(dirs.into_iter().map(exists)).collect()
}

/// Waits for the CSR of `signer` whose `spec.username` satisfies `username`; returns it.
async fn wait_csr(admin: &Client, signer: &str, username: impl Fn(&str) -> bool) -> CertificateSigningRequest {
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let deadline = Instant::now() + STEP;
    loop {
        let found = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|csr| csr.spec.signer_name == signer && csr.spec.username.as_deref().is_some_and(&username));
        if let Some(csr) = found {
            return csr;
        }
        assert!(Instant::now() < deadline, "no {signer} CSR within {STEP:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts that the CSR `name` gets exactly one condition, of `kind` with `reason`.
async fn assert_decided(admin: &Client, name: &str, kind: &str, reason: &str, context: &dyn Fn() -> String) {
    let decided = wait_decided(admin, name, STEP).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref().unwrap_or(""))).collect();
    assert_eq!(got, [(kind, reason)], "{decided:?}\n{}", context());
}

/// Waits until the kubelet uses the certificate issued for CSR `name`; returns that certificate.
async fn wait_serving_certificate(admin: &Client, kubelet: &Kubelet, name: &str) -> String {
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let deadline = Instant::now() + STEP;
    loop {
        let issued = api.get(name).await.unwrap().status.and_then(|s| s.certificate).map(|c| c.0);
        if let (Some(issued), Some(current)) = (issued, kubelet.serving_certificate_pem()) {
            let issued = String::from_utf8(issued).unwrap();
            assert!(current.starts_with(&issued), "the kubelet serves another certificate:\n{current}");
            return issued;
        }
        assert!(Instant::now() < deadline, "certificate of {name} not picked up within {STEP:?}\n{}", kubelet.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An admin client that does not retry (kube retries 503, which is how the apiserver reports a
/// kubelet it cannot reach, for minutes).
async fn admin_without_retries(cp: &ControlPlane) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// `GET /api/v1/nodes/<node>/proxy/healthz` through the apiserver, as the admin.
async fn proxy_healthz(cp: &ControlPlane, node: &str) -> Result<String, kube::Error> {
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/healthz")).body(Vec::new()).unwrap();
    admin_without_retries(cp).await.request_text(request).await
}

/// The proxy call, retried for a few seconds while the kubelet switches to its new certificate.
async fn wait_proxy_healthz(cp: &ControlPlane, kubelet: &Kubelet) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match proxy_healthz(cp, kubelet.node_name()).await {
            Ok(body) => return body,
            Err(error) if Instant::now() > deadline => {
                panic!("proxy to the kubelet failed: {error}\n{}", kubelet.logs())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test]
async fn real_kubelet_gets_a_serving_certificate_the_apiserver_trusts() {
    let started = Instant::now();
    let host = testenv::host_address().unwrap();
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let (good, rogue, untrusted) = (node_name("kubelet"), node_name("rogue"), node_name("selfsigned"));
    // The rogue node's name resolves outside the prefixes; its own address does not.
    let dns = DnsServer::start_on_thread(Records::new().ip(&good, host).a(&rogue, "10.99.0.7")).unwrap();
    let dns_flag = format!("--dns-server={}", dns.addr());
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefix_of(host), &[&dns_flag], &[]);
    approver.wait_ready().await;

    let before = machine_state();
    let options = |name: &str| KubeletOptions::new(name, host, KubeletCredentials::NodeCertificate);
    // A kubelet that serves its own self-signed certificate instead of asking for one.
    let untrusted = KubeletOptions { server_tls_bootstrap: false, ..options(&untrusted) };
    let (kubelet, rogue_kubelet, untrusted_kubelet) =
        tokio::join!(cp.start_kubelet(options(&good)), cp.start_kubelet(options(&rogue)), cp.start_kubelet(untrusted),);
    let (kubelet, rogue_kubelet, untrusted_kubelet) =
        (kubelet.unwrap(), rogue_kubelet.unwrap(), untrusted_kubelet.unwrap());
    eprintln!("control plane, approver and three kubelets up after {:?}", started.elapsed());

    // The kubelet's own serving CSR, as the kubelet wrote it, is approved, issued and picked up.
    let csr = wait_csr(&admin, SERVING_SIGNER, |user| user == format!("system:node:{good}")).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    wait_serving_certificate(&admin, &kubelet, &name).await;
    // The apiserver proxies to the kubelet only over TLS it verifies with the cluster CA for the
    // node's InternalIP: this works only with the issued certificate.
    assert_eq!(wait_proxy_healthz(&cp, &kubelet).await, "ok");
    eprintln!("kubelet approved, issued and reachable after {:?}", started.elapsed());
    // The apiserver does verify: a kubelet serving a certificate of its own (for its name only) is
    // not trusted.
    let error = proxy_healthz(&cp, untrusted_kubelet.node_name()).await.expect_err("a self-signed kubelet was trusted");
    assert!(
        matches!(&error, kube::Error::Api(status) if status.message.contains("tls: failed to verify certificate")),
        "{error}"
    );

    // The rogue kubelet's CSR is denied with the reason, gets no certificate, and the apiserver
    // cannot reach it over verified TLS.
    let csr = wait_csr(&admin, SERVING_SIGNER, |user| user == format!("system:node:{rogue}")).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), rogue_kubelet.logs());
    assert_decided(&admin, &name, "Denied", "ResolvedIPNotInPrefixes", &context).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored = Api::<CertificateSigningRequest>::all(admin.clone()).get(&name).await.unwrap();
    assert!(stored.status.and_then(|s| s.certificate).is_none(), "a denied CSR was issued");
    assert!(rogue_kubelet.serving_certificate_pem().is_none(), "the rogue kubelet has a serving certificate");
    let error = proxy_healthz(&cp, &rogue).await.expect_err("the apiserver reached a kubelet without a certificate");
    // The kubelet has no certificate to offer, so the apiserver's TLS handshake with it fails.
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 503 && status.message.contains("tls:")),
        "{error}"
    );

    // The kubelets changed nothing outside their directories.
    assert_eq!(machine_state(), before);

    // Dropping a kubelet ends it and its runtime and removes its directory.
    let ids = kubelet.process_ids();
    let dir = kubelet.dir().to_owned();
    drop(kubelet);
    assert!(ids.iter().all(|&id| !testenv::process_running(id)), "kubelet processes {ids:?} survived");
    assert!(!dir.exists(), "{} survived", dir.display());
    eprintln!("done after {:?}", started.elapsed());
}

const MACHINES: &str = "machines";

fn machines(admin: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"));
    Api::namespaced_with(admin.clone(), MACHINES, &resource)
}

/// Installs the Cluster API Machine CRD and the namespace of the Machines.
async fn install_cluster_api(cp: &ControlPlane, admin: &Client) {
    let path = format!("{}/tests/fixtures/crds/machines.cluster.x-k8s.io.yaml", env!("CARGO_MANIFEST_DIR"));
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cp.install_crds(vec![crd]).await.unwrap();
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta { name: Some(MACHINES.into()), ..Default::default() },
        ..Default::default()
    };
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

#[tokio::test]
async fn real_kubelet_joins_through_a_cluster_api_machine() {
    let started = Instant::now();
    let host = testenv::host_address().unwrap();
    let cp = ControlPlane::start().await.unwrap();
    let _signer = cp.start_signer().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    install_cluster_api(&cp, &admin).await;
    let node = node_name("machine");
    let dns = DnsServer::start_on_thread(Records::new().ip(&node, host)).unwrap();

    // The infrastructure provider has created the Machine and reported its addresses.
    let machine = DynamicObject::new(
        "worker-0",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine")),
    )
    .data(json!({"spec": {"clusterName": "test"}}));
    machines(&admin).create(&PostParams::default(), &machine).await.unwrap();
    let addresses =
        json!([{"type": "InternalDNS", "address": node}, {"type": "InternalIP", "address": host.to_string()}]);
    let status = json!({"status": {"addresses": addresses}});
    machines(&admin).patch_status("worker-0", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();

    let dns_flag = format!("--dns-server={}", dns.addr());
    let machine_mode = [
        dns_flag.as_str(),
        "--machine-api=cluster.x-k8s.io/v1beta1",
        "--bootstrapper-username=system:bootstrap:*",
        "--bootstrapper-groups=system:bootstrappers,system:authenticated",
    ];
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefix_of(host), &machine_mode, &[]);
    approver.wait_ready().await;

    // The kubelet has only a bootstrap token: its client CSR must be approved before it can start.
    let token = cp.create_bootstrap_token().await.unwrap();
    let token_id = token.split('.').next().unwrap().to_owned();
    let options = KubeletOptions::new(&node, host, KubeletCredentials::BootstrapToken(token));
    let kubelet = cp.start_kubelet(options).await.unwrap();
    let csr = wait_csr(&admin, CLIENT_SIGNER, |user| user == format!("system:bootstrap:{token_id}")).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    // The signer issues the certificate after the approval, and the kubelet then writes it.
    let deadline = Instant::now() + STEP;
    while kubelet.client_certificate_pem().is_none() {
        assert!(Instant::now() < deadline, "the kubelet has no client certificate\n{}", context());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("kubelet bootstrapped after {:?}", started.elapsed());

    // It registers its Node, and requests its serving certificate as that node.
    let nodes = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + STEP;
    while nodes.get_opt(&node).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "Node {node} not registered\n{}", context());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let csr = wait_csr(&admin, SERVING_SIGNER, |user| user == format!("system:node:{node}")).await;
    let name = csr.metadata.name.clone().unwrap();
    // No Machine refers to the Node yet: the serving CSR waits.
    let event = wait_event(&admin, &name, "MachineNotFound", STEP).await;
    assert!(event.is_some(), "no MachineNotFound event\n{}", context());
    assert!(wait_decided(&admin, &name, Duration::ZERO).await.is_empty(), "decided before the Machine claimed it");

    // Cluster API's Machine controller sets the nodeRef; the serving CSR is then approved against
    // the Machine's addresses, and the apiserver reaches the kubelet over verified TLS.
    let node_ref = json!({"status": {"nodeRef": {"kind": "Node", "apiVersion": "v1", "name": node}}});
    machines(&admin).patch_status("worker-0", &PatchParams::default(), &Patch::Merge(node_ref)).await.unwrap();
    assert_decided(&admin, &name, "Approved", "AutoApproved", &context).await;
    wait_serving_certificate(&admin, &kubelet, &name).await;
    assert_eq!(wait_proxy_healthz(&cp, &kubelet).await, "ok");
    eprintln!("done after {:?}", started.elapsed());
}
