//! Steps of the real-kubelet flows: waiting for a kubelet's own CSR and its decision, for the
//! kubelet to use the issued certificate, the apiserver's proxy to it, and what a CSR or a
//! certificate asks for or holds, read with `x509-parser` (not the approver's own parser).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use rustls::pki_types::{CertificateDer, ServerName};
use testenv::{ControlPlane, Kubelet, KubeletCredentials, KubeletOptions, NodeNetwork};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate, X509CertificationRequest};

use super::cluster::{Approver, unique, wait_decided};

/// The signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The signer of kubelet client certificates (TLS bootstrapping).
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long a kubelet's CSR may take to appear, be decided, be issued and be picked up.
pub const STEP: Duration = Duration::from_secs(30);
/// The namespace of the Cluster API Machines.
pub const MACHINES: &str = "machines";

/// A node name under the provider domain the approver's `REGEX` accepts.
pub fn node_name(prefix: &str) -> String {
    format!("{}.nodes.example.com", unique(prefix))
}

/// An approver's `--provider-ip-prefixes` of exactly `addresses`.
pub fn prefixes_of(addresses: &[IpAddr]) -> String {
    let exact = |address: &IpAddr| format!("{address}/{}", if address.is_ipv4() { 32 } else { 128 });
    addresses.iter().map(exact).collect::<Vec<_>>().join(",")
}

/// Waits for the CSR of `signer` whose `spec.username` is `username`; returns it.
pub async fn wait_csr(admin: &Client, signer: &str, username: &str) -> CertificateSigningRequest {
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let deadline = Instant::now() + STEP;
    loop {
        let found = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|csr| csr.spec.signer_name == signer && csr.spec.username.as_deref() == Some(username));
        if let Some(csr) = found {
            return csr;
        }
        assert!(Instant::now() < deadline, "no {signer} CSR of {username} within {STEP:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts that the CSR `name` gets exactly one condition, of `kind` with `reason`.
pub async fn assert_decided(admin: &Client, name: &str, kind: &str, reason: &str, context: &dyn Fn() -> String) {
    let decided = wait_decided(admin, name, STEP).await;
    let got: Vec<_> = decided.iter().map(|c| (c.type_.as_str(), c.reason.as_deref().unwrap_or(""))).collect();
    assert_eq!(got, [(kind, reason)], "{decided:?}\n{}", context());
}

/// Waits until the kubelet uses the certificate issued for CSR `name`; returns that certificate.
pub async fn wait_serving_certificate(admin: &Client, kubelet: &Kubelet, name: &str) -> String {
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

/// Starts the kubelet of Node `name` in `network`, with a node certificate, listening on `port`,
/// with `serverTLSBootstrap` on or off.
pub async fn start_kubelet_in(
    cp: &ControlPlane,
    name: &str,
    network: &Arc<NodeNetwork>,
    port: u16,
    server_tls_bootstrap: bool,
) -> Kubelet {
    let options = KubeletOptions::in_network(name, Arc::clone(network), KubeletCredentials::NodeCertificate);
    cp.start_kubelet(KubeletOptions { port: Some(port), server_tls_bootstrap, ..options }).await.unwrap()
}

/// Waits until the approver has approved `kubelet`'s own serving CSR and the kubelet serves it;
/// returns the CSR.
pub async fn wait_approved_and_served(
    admin: &Client,
    approver: &Approver,
    kubelet: &Kubelet,
) -> CertificateSigningRequest {
    let csr = wait_csr(admin, SERVING_SIGNER, &format!("system:node:{}", kubelet.node_name())).await;
    let name = csr.metadata.name.clone().unwrap();
    let context = || format!("{}\n{}", approver.logs(), kubelet.logs());
    assert_decided(admin, &name, "Approved", "AutoApproved", &context).await;
    wait_serving_certificate(admin, kubelet, &name).await;
    csr
}

/// `GET /api/v1/nodes/<node>/proxy/healthz` through the apiserver, as the admin, without retries
/// (kube retries 503, which is how the apiserver reports a kubelet it cannot reach, for minutes).
pub async fn proxy_healthz(cp: &ControlPlane, node: &str) -> Result<String, kube::Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.default_retry = false;
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/healthz")).body(Vec::new()).unwrap();
    Client::try_from(config).unwrap().request_text(request).await
}

/// The proxy call, retried for a few seconds while the kubelet switches to its new certificate.
pub async fn wait_proxy_healthz(cp: &ControlPlane, kubelet: &Kubelet) -> String {
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

/// `GET /healthz` on the kubelet's HTTPS server at `address`, straight from this process (not
/// through the apiserver), over TLS verified with the CA `ca_pem` for the IP address `verify_as`.
pub fn direct_healthz(ca_pem: &str, address: SocketAddr, verify_as: IpAddr) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pem::parse(ca_pem).unwrap().into_contents())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connection = rustls::ClientConnection::new(Arc::new(config), ServerName::IpAddress(verify_as.into()))
        .map_err(|error| error.to_string())?;
    let tcp = TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(|error| error.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n")
        .map_err(|error| error.to_string())?;
    let mut response = Vec::new();
    // The kubelet may close without close_notify once it has answered: what was read counts.
    if let Err(error) = tls.read_to_end(&mut response)
        && response.is_empty()
    {
        return Err(error.to_string());
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or(response))
}

/// Subject alternative names: DNS names and IP addresses, each sorted.
pub type Sans = (Vec<String>, Vec<IpAddr>);

/// The SANs the CSR's `spec.request` asks for.
pub fn requested_sans(csr: &CertificateSigningRequest) -> Sans {
    let (_, block) = x509_parser::pem::parse_x509_pem(&csr.spec.request.0).unwrap();
    let (_, request) = X509CertificationRequest::from_der(&block.contents).unwrap();
    let extensions = request.requested_extensions().into_iter().flatten();
    let names = extensions.filter_map(|extension| match extension {
        ParsedExtension::SubjectAlternativeName(san) => Some(san.general_names.clone()),
        _ => None,
    });
    sans(names.flatten())
}

/// The SANs of the certificate `pem` begins with.
pub fn certificate_sans(pem: &str) -> Sans {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let (_, certificate) = X509Certificate::from_der(&block.contents).unwrap();
    let san = certificate.subject_alternative_name().unwrap().expect("no SAN extension");
    sans(san.value.general_names.iter().cloned())
}

fn sans<'a>(names: impl Iterator<Item = GeneralName<'a>>) -> Sans {
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for name in names {
        match name {
            GeneralName::DNSName(dns_name) => dns.push(dns_name.to_owned()),
            GeneralName::IPAddress(bytes) => ips.push(match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(bytes).unwrap()),
                _ => IpAddr::from(<[u8; 16]>::try_from(bytes).unwrap()),
            }),
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    dns.sort();
    ips.sort();
    (dns, ips)
}

/// The Cluster API Machines of namespace [`MACHINES`].
pub fn machines(admin: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(admin.clone(), MACHINES, &machine_resource())
}

/// `cluster.x-k8s.io/v1beta1` Machine.
pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"))
}

/// Installs the Cluster API Machine CRD and the namespace of the Machines.
pub async fn install_cluster_api(cp: &ControlPlane, admin: &Client) {
    let path = format!("{}/tests/fixtures/crds/machines.cluster.x-k8s.io.yaml", env!("CARGO_MANIFEST_DIR"));
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cp.install_crds(vec![crd]).await.unwrap();
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta { name: Some(MACHINES.into()), ..Default::default() },
        ..Default::default()
    };
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}
