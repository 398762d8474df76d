//! What the approver accepts as the certificate a kubelet serves: the CA bundle file, the chain
//! verification (bundle, validity, server auth, the dialled address), the dial itself against real
//! TLS servers on loopback (bounded in time, a dead port, a silent one and an HTTP server are "unreachable" with no more said, an
//! untrusted certificate is not evidence), and `check --kubelet-certificate` as the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node_csr_approver::kubelet_tls::KubeletServingCa;
use node_csr_approver::kubelet_tls::dial::{Served, served_certificate};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, date_time_ymd,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A CA that issues kubelet serving certificates.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { pem, issuer: Issuer::new(params, key) }
    }

    /// The bundle holding this CA, as the approver reads it from a file.
    fn bundle(&self, dir: &std::path::Path) -> KubeletServingCa {
        let path = dir.join("ca.crt");
        std::fs::write(&path, &self.pem).unwrap();
        KubeletServingCa::read(&path).unwrap()
    }

    /// A serving certificate of node `node` for `sans`, valid from `years.0` to `years.1`, with
    /// `usage`; (certificate, key).
    fn issue(&self, node: &str, sans: &[&str], years: (i32, i32), usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, format!("system:node:{node}"));
        params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![usage];
        params.not_before = date_time_ymd(years.0, 1, 1);
        params.not_after = date_time_ymd(years.1, 1, 1);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { der: cert.der().clone(), pem: cert.pem(), key }
    }

    /// A currently valid serving certificate of node n1 for 127.0.0.1.
    fn n1(&self) -> Leaf {
        self.issue("n1", &["127.0.0.1"], (2020, 2100), ExtendedKeyUsagePurpose::ServerAuth)
    }
}

struct Leaf {
    der: CertificateDer<'static>,
    pem: String,
    key: KeyPair,
}

/// A TLS server on loopback presenting `leaf` to every client, until the test ends.
async fn serve(leaf: &Leaf) -> SocketAddr {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { acceptor.accept(tcp).await.map(drop) });
        }
    });
    address
}

fn now() -> UnixTime {
    UnixTime::now()
}

#[test]
fn the_bundle_must_hold_usable_ca_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let bad = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        KubeletServingCa::read(&path).unwrap_err().to_string()
    };
    assert!(bad("empty.crt", "").contains("no CERTIFICATE block"));
    assert!(bad("key.pem", &KeyPair::generate().unwrap().serialize_pem()).contains("no CERTIFICATE block"));
    assert!(bad("broken.crt", "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").contains("PEM"));
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(bad("garbage.crt", garbage).contains("certificate 1 is not a usable CA"));
    assert!(KubeletServingCa::read(&dir.path().join("missing.crt")).unwrap_err().to_string().contains("cannot read"));
    let ca = Ca::new("kubelet-serving");
    let two = format!("{}{}", ca.pem, Ca::new("next").pem);
    std::fs::write(dir.path().join("two.crt"), two).unwrap();
    assert!(KubeletServingCa::read(&dir.path().join("two.crt")).is_ok(), "a bundle across a rotation");
}

#[test]
fn a_chain_is_verified_against_the_bundle_for_server_auth_now_and_the_dialled_address() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubelet-serving");
    let bundle = ca.bundle(dir.path());
    let loopback = "127.0.0.1".parse().unwrap();
    assert!(bundle.verify(&[ca.n1().der], loopback, now()).is_ok());
    let other = Ca::new("other").n1();
    let refused = [
        ("another CA", other.der),
        ("expired", ca.issue("n1", &["127.0.0.1"], (2020, 2021), ExtendedKeyUsagePurpose::ServerAuth).der),
        ("not yet valid", ca.issue("n1", &["127.0.0.1"], (2090, 2100), ExtendedKeyUsagePurpose::ServerAuth).der),
        ("client auth only", ca.issue("n1", &["127.0.0.1"], (2020, 2100), ExtendedKeyUsagePurpose::ClientAuth).der),
        ("another address", ca.issue("n1", &["127.0.0.2"], (2020, 2100), ExtendedKeyUsagePurpose::ServerAuth).der),
        ("a DNS name only", ca.issue("n1", &["localhost"], (2020, 2100), ExtendedKeyUsagePurpose::ServerAuth).der),
    ];
    for (what, der) in refused {
        assert!(bundle.verify(&[der], loopback, now()).is_err(), "{what}");
    }
    assert!(bundle.verify(&[], loopback, now()).is_err(), "no certificate");
}

#[tokio::test]
async fn the_dial_returns_the_leaf_of_a_kubelet_the_bundle_trusts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubelet-serving");
    let leaf = ca.n1();
    let address = serve(&leaf).await;
    let served = served_certificate(address, &ca.bundle(dir.path()), Duration::from_secs(3)).await;
    assert_eq!(served, Served::Verified(leaf.der.to_vec()));
}

#[tokio::test]
async fn a_certificate_the_bundle_does_not_trust_is_no_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = Ca::new("kubelet-serving").bundle(dir.path());
    // What a kubelet with serverTLSBootstrap: false serves: a certificate of its own CA.
    let address = serve(&Ca::new("kubelet-self-signed").n1()).await;
    let served = served_certificate(address, &bundle, Duration::from_secs(3)).await;
    assert!(matches!(&served, Served::Untrusted(why) if why.contains("UnknownIssuer")), "{served:?}");
}

#[tokio::test]
async fn a_dead_or_silent_kubelet_is_unreachable_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = Ca::new("kubelet-serving").bundle(dir.path());
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    // Whatever failed, the text names the address only: it goes into Events, which must not tell a
    // closed port from a silent one or from a server of another protocol.
    let served = served_certificate(closed, &bundle, Duration::from_secs(3)).await;
    assert_eq!(served, Served::Unreachable(format!("{closed} unreachable")));
    // Accepts the connection and never answers the ClientHello.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let held = tokio::spawn(async move { silent.accept().await.map(|(tcp, _)| tcp) });
    let started = Instant::now();
    let served = served_certificate(address, &bundle, Duration::from_millis(500)).await;
    let took = started.elapsed();
    assert_eq!(served, Served::Unreachable(format!("{address} unreachable")));
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(2), "{took:?}");
    held.abort();
    // An HTTP server answers the ClientHello with plain text.
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = http.local_addr().unwrap();
    let answered = tokio::spawn(async move {
        let (mut tcp, _) = http.accept().await.unwrap();
        let mut hello = [0u8; 512];
        let _ = tokio::io::AsyncReadExt::read(&mut tcp, &mut hello).await;
        tokio::io::AsyncWriteExt::write_all(&mut tcp, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await
    });
    let served = served_certificate(address, &bundle, Duration::from_secs(3)).await;
    assert_eq!(served, Served::Unreachable(format!("{address} unreachable")));
    answered.abort();
}

/// `check` in machine mode on a serving CSR of node n1 (no Machine) with `--kubelet-certificate`.
fn check_renewal(dir: &std::path::Path, ca: &Ca, served: &Leaf, csr_ip: &str) -> (String, String, String) {
    let request = support::Request::node("n1.nodes.example.com").dns("n1.nodes.example.com").ip(csr_ip).pem();
    let encoded = support::pem_block("X", request.as_bytes());
    let encoded: String = encoded.lines().filter(|l| !l.starts_with("-----")).collect();
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: renewal\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\nspec:\n  signerName: kubernetes.io/kubelet-serving\n  username: system:node:n1.nodes.example.com\n  groups: [system:nodes, system:authenticated]\n  usages: [digital signature, server auth]\n  request: {encoded}\n"
    );
    let node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1.nodes.example.com\nstatus:\n  addresses:\n    - {type: InternalIP, address: 10.0.0.11}\n";
    for (name, text) in [("csr.yaml", csr.as_str()), ("node.yaml", node), ("served.pem", &served.pem)] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    std::fs::write(dir.join("ca.crt"), &ca.pem).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
        .env_clear()
        .stdin(Stdio::null())
        .current_dir(dir)
        .args(["check", "-o", "json", "-f", "csr.yaml", "--objects", "node.yaml", "--now", "2026-01-01T00:01:00Z"])
        .args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", "10.0.0.0/16"])
        .args(["--bypass-dns-resolution", "--machine-api=cluster.x-k8s.io/v1beta1", "--kubelet-serving-ca-file=ca.crt"])
        .args(["--kubelet-certificate", "n1.nodes.example.com=served.pem"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let field = |name: &str| report[name].as_str().unwrap().to_owned();
    (field("decision"), field("reason"), field("message"))
}

#[test]
fn check_explains_a_renewal_from_a_certificate_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubelet-serving");
    let sans = ["n1.nodes.example.com", "10.0.0.11"];
    let served = ca.issue("n1.nodes.example.com", &sans, (2025, 2027), ExtendedKeyUsagePurpose::ServerAuth);
    let (decision, reason, message) = check_renewal(dir.path(), &ca, &served, "10.0.0.11");
    assert_eq!((decision.as_str(), reason.as_str()), ("approve", "AutoApproved"), "{message}");
    assert!(message.contains("renews the certificate node \"n1.nodes.example.com\"'s kubelet serves"), "{message}");
    let (decision, reason, message) = check_renewal(dir.path(), &ca, &served, "10.0.0.12");
    assert_eq!((decision.as_str(), reason.as_str()), ("retry", "MachineNotFound"), "{message}");
    let foreign =
        Ca::new("other").issue("n1.nodes.example.com", &sans, (2025, 2027), ExtendedKeyUsagePurpose::ServerAuth);
    let (decision, reason, message) = check_renewal(dir.path(), &ca, &foreign, "10.0.0.11");
    assert_eq!((decision.as_str(), reason.as_str()), ("retry", "MachineNotFound"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
}
