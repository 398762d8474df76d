//! The periodic audit at scale: [`NODES`] Nodes whose kubelets accept the connection and never
//! answer the TLS handshake (a hung kubelet: one listener of this test, on the host end of a node
//! network's link, is every Node's InternalIP and kubelet port), scanned by the real binary with a
//! small `--audit-dial-timeout`. The scan counts every Node `unreachable` and finishes within the
//! bound docs/audit.md states, ceil(N / `--audit-dial-concurrency`) × `--audit-dial-timeout` plus
//! listing the Nodes, where dialling one kubelet at a time would take N × the timeout. A second
//! scan reads the Nodes from the watch the first one started: the apiserver counts one list of
//! them in all, not one per scan.
//!
//! Needs root (network namespaces, veth pairs), `ip`, `unshare` and `nsenter`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::cluster::{Approver, REGEX, metric};
use support::kubelet_flow::prefixes_of;
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};
use tokio::io::AsyncReadExt;

/// How many Nodes the cluster has, none of whose kubelets answers.
const NODES: u32 = 2000;
/// `--audit-dial-timeout`, in milliseconds.
const DIAL_TIMEOUT_MS: u32 = 100;
/// `--audit-dial-concurrency`.
const CONCURRENCY: u32 = 64;
/// What listing [`NODES`] Nodes may take, generously (tens of milliseconds on a quiet machine).
const LISTING: Duration = Duration::from_secs(5);

/// The longest a scan may take: every kubelet one `--audit-dial-timeout`, [`CONCURRENCY`] at
/// once, in ceil(N / concurrency) waves, plus listing the Nodes; twice that, as this machine is
/// shared. Dialling one kubelet at a time takes N × the timeout, far above it.
fn bound() -> Duration {
    let waves = NODES.div_ceil(CONCURRENCY);
    (Duration::from_millis(u64::from(DIAL_TIMEOUT_MS)) * waves + LISTING) * 2
}

/// Accepts every connection at `at` and never writes: each is closed only by the dialler.
async fn silent_kubelets(at: SocketAddr) -> u16 {
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut sink = [0_u8; 1024];
                while matches!(tcp.read(&mut sink).await, Ok(read) if read > 0) {}
            });
        }
    });
    port
}

/// How many Nodes one page of a list holds: kube-runtime's watcher lists 500 at a time.
const LIST_PAGE: u32 = 500;

/// The LIST requests of Nodes the apiserver has counted (each page one).
async fn node_lists(admin: &kube::Client) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(request).await.unwrap();
    let lists = text.lines().filter(|line| {
        line.starts_with("apiserver_request_total{")
            && line.contains("resource=\"nodes\"")
            && line.contains("verb=\"LIST\"")
    });
    lists.filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Node `i`, its kubelet at `address`.
fn node(i: u32, address: SocketAddr) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("scale-{i:05}.nodes.example.com")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address.ip().to_string()}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": address.port()}},
        },
    }))
    .unwrap()
}

/// The approver's peak resident memory (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_thousands_of_hung_kubelets_ends_within_the_documented_bound() {
    let network = tokio::task::spawn_blocking(|| NodeNetwork::create(AddressFamilies::Ipv4).unwrap());
    let cp = ControlPlane::start().await.unwrap();
    let network = network.await.unwrap();
    let host: IpAddr = network.host_addresses()[0];
    let port = silent_kubelets(SocketAddr::new(host, 0)).await;
    let kubelet = SocketAddr::new(host, port);

    let admin = cp.admin_client().await.unwrap();
    let nodes = Api::<Node>::all(admin.clone());
    let created = Instant::now();
    let creates = futures::stream::iter(0..NODES).map(|i| {
        let nodes = nodes.clone();
        async move { nodes.create(&PostParams::default(), &node(i, kubelet)).await.map(drop) }
    });
    let failed: Vec<_> = creates.buffer_unordered(32).filter_map(|done| async { done.err() }).collect().await;
    assert!(failed.is_empty(), "{failed:?}");
    eprintln!("{NODES} Nodes created in {:?}", created.elapsed());

    let flags = [
        "--bypass-dns-resolution".to_owned(),
        "--audit-period=1s".to_owned(),
        format!("--audit-dial-timeout={DIAL_TIMEOUT_MS}ms"),
        format!("--audit-dial-concurrency={CONCURRENCY}"),
        format!("--kubelet-port={port}"),
        "--events=none".to_owned(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let lists_before = node_lists(&admin).await;
    let mut approver = Approver::start_with(cp.kubeconfig_path(), REGEX, &prefixes_of(&[host]), &flags, &[]);
    approver.wait_ready().await;
    let ready = Instant::now();
    // The first scan starts a few seconds after the CSR watch synced.
    let deadline = ready + Duration::from_secs(10) + bound();
    let text = loop {
        let text = approver.metrics().await;
        if metric(&text, "node_csr_approver_audit_last_scan_timestamp_seconds").unwrap_or(0.0) > 0.0 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no scan of {NODES} Nodes completed within {:?} of readiness (bound {:?}):\n{text}",
            deadline - ready,
            bound()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let count = |series: &str| metric(&text, series).unwrap_or(-1.0);
    let took = Duration::from_secs_f64(count("node_csr_approver_audit_last_scan_duration_seconds"));
    eprintln!(
        "scan of {NODES} hung kubelets, {CONCURRENCY} at once, {DIAL_TIMEOUT_MS} ms each: {took:?} \
         (bound {:?}, serial {:?}); approver peak RSS {} KiB",
        bound(),
        Duration::from_millis(u64::from(DIAL_TIMEOUT_MS)) * NODES,
        peak_kib(approver.pid()),
    );
    assert_eq!(count("node_csr_approver_audit_nodes{state=\"unreachable\"}"), f64::from(NODES), "{text}");
    assert_eq!(count("node_csr_approver_audit_findings{finding=\"unreachable\"}"), f64::from(NODES), "{text}");
    assert_eq!(count("node_csr_approver_audit_nodes{state=\"not-dialled\"}"), 0.0, "{text}");
    let waves = Duration::from_millis(u64::from(DIAL_TIMEOUT_MS)) * NODES.div_ceil(CONCURRENCY);
    assert!(took >= waves, "every kubelet waited out its timeout: {took:?} < {waves:?}");
    assert!(took <= bound(), "the scan took {took:?}, more than {:?}", bound());

    // The next scan reads the watched Nodes: no list of them but the watch's first.
    let first = count("node_csr_approver_audit_last_scan_timestamp_seconds");
    let deadline = Instant::now() + Duration::from_secs(2) + bound();
    while metric(&approver.metrics().await, "node_csr_approver_audit_last_scan_timestamp_seconds") <= Some(first) {
        assert!(Instant::now() < deadline, "no second scan within {:?}", bound());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lists = node_lists(&admin).await - lists_before;
    eprintln!("two scans of {NODES} Nodes: {lists} LIST requests of Nodes");
    assert!(lists <= f64::from(NODES.div_ceil(LIST_PAGE)), "the Nodes were listed {lists} pages for two scans");
}
