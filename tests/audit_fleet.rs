//! What `audit` costs over a fleet (ignored by default: it measures, and takes about a minute).
//! [`NODES`] Nodes on a testenv control plane, each with its own IPv6 InternalIP, added to the host
//! end of one node network's link (inside the `/64` that network alone owns), where a TLS server
//! of this test listens on each: most serve a certificate of the cluster CA for their Node's name
//! and address, as a kubelet whose serving CSR was approved does; some serve a self-signed one;
//! some addresses refuse connections, a few accept and never answer (each costs one
//! `--dial-timeout`), and a few Nodes are outside `--provider-ip-prefixes`. The audit runs under
//! `/usr/bin/time -v`, and its wall time, CPU time per Node and peak RSS are printed.
//!
//! `AUDIT_BINARY` names the binary to measure (default: this build's):
//!
//! ```sh
//! nice -n 5 cargo build --release
//! AUDIT_BINARY=target/release/node-csr-approver cargo test --test audit_fleet -- --ignored --nocapture
//! ```
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare` and `nsenter`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};

/// How many Nodes the fleet has.
const NODES: usize = 1000;
/// Of them, how many serve a self-signed certificate, refuse connections, never answer, and are
/// outside the prefixes; the rest serve the cluster CA's certificate for their own names.
const SELF_SIGNED: usize = 20;
const REFUSING: usize = 20;
const SILENT: usize = 5;
const OUTSIDE: usize = 10;

/// What one Node's address does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Issued,
    SelfSigned,
    Refusing,
    Silent,
    Outside,
}

/// The role of Node `i`: the few of each kind spread through the fleet.
fn role(i: usize) -> Role {
    let few =
        [(Role::SelfSigned, SELF_SIGNED), (Role::Refusing, REFUSING), (Role::Silent, SILENT), (Role::Outside, OUTSIDE)];
    let mut first = 0;
    for (role, count) in few {
        if (first..first + count).contains(&(i % 100 * 10 + i / 100)) {
            return role;
        }
        first += count;
    }
    Role::Issued
}

/// Node `i`'s name.
fn name(i: usize) -> String {
    format!("fleet-{i:04}.nodes.example.com")
}

/// Adds `addresses` to `link` (the host end of a node network: they go with it).
fn add_addresses(link: &str, addresses: &[Ipv6Addr]) {
    let mut ip = Command::new("ip").args(["-batch", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    let mut batch = String::new();
    for address in addresses {
        batch.push_str(&format!("address add {address}/128 dev {link} nodad\n"));
    }
    ip.stdin.take().unwrap().write_all(batch.as_bytes()).unwrap();
    assert!(ip.wait().unwrap().success());
}

/// A server config presenting `certificate` with `key`.
fn tls(certificate: rcgen::Certificate, key: &rcgen::KeyPair) -> tokio_rustls::TlsAcceptor {
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certificate.der().clone()], key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// Serves `acceptor` at `at` until the test ends.
async fn serve(at: SocketAddr, acceptor: tokio_rustls::TlsAcceptor) {
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { drop(acceptor.accept(tcp).await) });
        }
    });
}

/// Creates Node `name` with InternalIP `address` and kubelet port `port`.
async fn create_node(nodes: &Api<Node>, name: String, address: IpAddr, port: u16) {
    let node = Node { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": address.to_string()}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
    }});
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// The value of `/usr/bin/time -v`'s line `label`.
fn measured<'a>(report: &'a str, label: &str) -> &'a str {
    let line = report.lines().find(|line| line.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{report}"));
    line.rsplit(": ").next().unwrap().trim()
}

/// Seconds of `/usr/bin/time -v`'s elapsed wall clock, `[h:]m:ss.cc`.
fn seconds(clock: &str) -> f64 {
    clock.split(':').fold(0.0, |total, part| total * 60.0 + part.parse::<f64>().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures the audit of a fleet; run it by name (see the module documentation)"]
async fn audit_of_a_fleet() {
    let network = tokio::task::spawn_blocking(|| NodeNetwork::create(AddressFamilies::Ipv6).unwrap());
    let cp = ControlPlane::start().await.unwrap();
    let network = network.await.unwrap();
    let IpAddr::V6(host) = network.host_addresses()[0] else { panic!("an IPv6 network") };
    let prefix = u128::from(host) & !u128::from(u64::MAX);
    let address = |i: usize| Ipv6Addr::from(prefix | 0x1_0000 | i as u128);
    let addresses: Vec<Ipv6Addr> = (0..NODES).filter(|i| role(*i) != Role::Outside).map(address).collect();
    add_addresses(network.link_name(), &addresses);
    let port = std::net::TcpListener::bind((host, 0)).unwrap().local_addr().unwrap().port();

    let ca_pem = cp.ca_cert_pem().unwrap();
    // The cluster CA as testenv makes it (its subject is all an issuer needs to match).
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(cp.state_dir().unwrap().join("ca.key")).unwrap());
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "testenv-ca");
    let ca = rcgen::Issuer::new(ca_params, ca_key.unwrap());
    let key = rcgen::KeyPair::generate().unwrap();
    let mut silent = Vec::new();
    for i in 0..NODES {
        let at = SocketAddr::new(IpAddr::V6(address(i)), port);
        let mut params = rcgen::CertificateParams::new(vec![name(i), address(i).to_string()]).unwrap();
        match role(i) {
            Role::Issued => {
                params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{}", name(i)));
                params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
                serve(at, tls(params.signed_by(&key, &ca).unwrap(), &key)).await;
            }
            Role::SelfSigned => {
                params.distinguished_name.push(rcgen::DnType::CommonName, format!("{}@1795772569", name(i)));
                serve(at, tls(params.self_signed(&key).unwrap(), &key)).await;
            }
            Role::Silent => silent.push(std::net::TcpListener::bind(at).unwrap()),
            Role::Refusing | Role::Outside => {}
        }
    }
    let admin: Client = cp.admin_client().await.unwrap();
    let nodes = Api::<Node>::all(admin);
    let created = Instant::now();
    futures::stream::iter((0..NODES).map(|i| {
        let address = match role(i) {
            Role::Outside => IpAddr::V6(Ipv6Addr::from(0x2001_0db8_ffff_u128 << 80 | i as u128)),
            _ => IpAddr::V6(address(i)),
        };
        create_node(&nodes, name(i), address, port)
    }))
    .buffer_unordered(16)
    .collect::<Vec<()>>()
    .await;
    eprintln!("{NODES} Nodes created in {:?}", created.elapsed());

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-serving-ca.crt");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let binary = std::env::var_os("AUDIT_BINARY").unwrap_or(env!("CARGO_BIN_EXE_node-csr-approver").into());
    let mut command = Command::new("/usr/bin/time");
    command.arg("-v").arg(&binary).arg("audit").args([
        format!("--kubeconfig={}", cp.kubeconfig_path().display()),
        r"--provider-regex=^fleet-[0-9]+\.nodes\.example\.com$".to_owned(),
        format!("--provider-ip-prefixes={}/64", Ipv6Addr::from(prefix)),
        "--bypass-dns-resolution".to_owned(),
        format!("--kubelet-serving-ca-file={}", ca_file.display()),
        format!("--kubelet-port={port}"),
        "-o".to_owned(),
        "json".to_owned(),
    ]);
    eprintln!("{command:?}");
    let output = command.stdin(Stdio::null()).output().unwrap();
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}");
    let mut states = BTreeMap::<String, usize>::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let audit: Value = serde_json::from_str(line).unwrap();
        *states.entry(audit["state"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    let issued = NODES - SELF_SIGNED - REFUSING - SILENT - OUTSIDE;
    let expected = [
        ("compliant", issued),
        ("not-dialled", OUTSIDE),
        ("self-signed", SELF_SIGNED),
        ("unreachable", REFUSING + SILENT),
    ];
    assert_eq!(states, expected.map(|(state, n)| (state.to_owned(), n)).into(), "{report}");
    let wall = seconds(measured(&report, "Elapsed (wall clock) time"));
    let cpu: f64 = ["User time (seconds)", "System time (seconds)"]
        .iter()
        .map(|label| measured(&report, label).parse::<f64>().unwrap())
        .sum();
    let rss_kib: u64 = measured(&report, "Maximum resident set size (kbytes)").parse().unwrap();
    eprintln!(
        "audit of {NODES} Nodes ({states:?}): {wall:.2} s wall, {cpu:.2} s CPU (user+sys), {:.2} ms CPU per Node, \
         peak RSS {:.1} MiB",
        cpu * 1000.0 / NODES as f64,
        rss_kib as f64 / 1024.0,
    );
    drop(silent);
}
