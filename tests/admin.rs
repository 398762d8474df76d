//! The admin servers on real loopback sockets, the metrics they serve, and bind-address parsing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use node_csr_approver::admin::{self, AdminError, OPENMETRICS_CONTENT_TYPE, Readiness};
use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::metrics::{MeteredResolver, Metrics, WriteResult};
use node_csr_approver::policy::{DecisionKind, Reason};
use node_csr_approver::policy::{DnsFailure, Resolution, Resolver};
use testdns::{DnsServer, Records};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A response as seen on the wire.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`), read to the end.
async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response head");
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .map(|line| {
                let (key, value) = line.split_once(':').unwrap();
                (key.trim().to_owned(), value.trim().to_owned())
            })
            .collect();
        Reply { status, headers, body: body.to_owned() }
    })
    .await
    .unwrap()
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path).await
}

/// A running server, its address and the trigger that shuts it down.
struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), AdminError>>,
}

impl Running {
    /// Triggers the graceful shutdown and waits for the server to return.
    async fn shut_down(self) {
        self.stop.send(()).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("server stops").unwrap();
        result.unwrap();
    }
}

async fn start_health(readiness: Readiness) -> Running {
    let listener = admin::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(admin::serve_health(listener, readiness, async move {
        let _ = stopped.await;
    }));
    Running { addr, stop, task }
}

async fn start_metrics(metrics: Metrics) -> Running {
    let listener = admin::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(admin::serve_metrics(listener, metrics, async move {
        let _ = stopped.await;
    }));
    Running { addr, stop, task }
}

#[tokio::test]
async fn health_and_readiness() {
    let readiness = Readiness::new();
    let server = start_health(readiness.clone()).await;

    let healthz = get(server.addr, "/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
    let readyz = get(server.addr, "/readyz").await;
    assert_eq!(readyz.status, 503, "{readyz:?}");
    assert!(!readiness.is_ready());

    readiness.set_ready();
    assert!(readiness.is_ready());
    let readyz = get(server.addr, "/readyz").await;
    assert_eq!((readyz.status, readyz.body.as_str()), (200, "ok"));
    let healthz = get(server.addr, "/healthz").await;
    assert_eq!(healthz.status, 200);

    assert_eq!(get(server.addr, "/unknown").await.status, 404);
    assert_eq!(get(server.addr, "/metrics").await.status, 404, "metrics are served on their own port");
    assert_eq!(request(server.addr, "POST", "/healthz").await.status, 405);

    server.shut_down().await;
}

#[tokio::test]
async fn graceful_shutdown_closes_the_port() {
    let server = start_health(Readiness::new()).await;
    let addr = server.addr;
    assert_eq!(get(addr, "/healthz").await.status, 200);
    server.shut_down().await;
    assert!(TcpStream::connect(addr).is_err(), "nothing listens on {addr} after shutdown");
}

#[tokio::test]
async fn metrics_endpoint_serves_openmetrics() {
    let metrics = Metrics::new();
    metrics.record_decision(DecisionKind::Approve, Reason::AutoApproved);
    metrics.record_write(WriteResult::Success);
    metrics.observe_evaluation(Duration::from_millis(3));
    metrics.set_leader(true);
    let server = start_metrics(metrics.clone()).await;

    let reply = get(server.addr, "/metrics").await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
    let body = &reply.body;
    assert!(
        body.contains("\nnode_csr_approver_decisions_total{decision=\"approve\",reason=\"AutoApproved\"} 1\n"),
        "{body}"
    );
    assert!(body.contains("\nnode_csr_approver_writes_total{result=\"success\"} 1\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_writes_total{result=\"conflict\"} 0\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_writes_total{result=\"not_found\"} 0\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_evaluation_duration_seconds_count 1\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_evaluation_duration_seconds_bucket{le=\"0.005\"} 1\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_evaluation_duration_seconds_bucket{le=\"0.001\"} 0\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_leader 1\n"), "{body}");
    assert!(body.contains("\nnode_csr_approver_csrs_waiting_retry 0\n"), "{body}");
    assert!(body.contains("\n# TYPE process_cpu_seconds counter\n"), "{body}");
    for name in
        ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"]
    {
        let value = body
            .lines()
            .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{name} missing:\n{body}"));
        let value: f64 = value.parse().unwrap_or_else(|e| panic!("{name} value {value:?}: {e}"));
        if name != "process_cpu_seconds_total" {
            assert!(value > 0.0, "{name} = {value}");
        }
    }
    assert!(body.ends_with("# EOF\n"), "{body}");

    // A scrape reflects updates made after the server started.
    metrics.record_decision(DecisionKind::Approve, Reason::AutoApproved);
    let body = get(server.addr, "/metrics").await.body;
    assert!(body.contains("node_csr_approver_decisions_total{decision=\"approve\",reason=\"AutoApproved\"} 2\n"));

    server.shut_down().await;
}

#[tokio::test]
async fn metered_resolver_counts_failures_and_lookups() {
    let metrics = Metrics::new();
    let timeout = Duration::from_millis(500);

    let failing = DnsServer::servfail().await.unwrap();
    let resolver =
        MeteredResolver::new(HickoryResolver::new(Some(&[failing.addr()]), timeout).unwrap(), metrics.clone());
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Unavailable(DnsFailure::ServFail));
    let text = metrics.encode().unwrap();
    assert!(text.contains("node_csr_approver_dns_failures_total{kind=\"servfail\"} 1\n"), "{text}");
    assert!(text.contains("node_csr_approver_dns_failures_total{kind=\"timeout\"} 0\n"), "{text}");
    assert!(text.contains("node_csr_approver_dns_lookup_duration_seconds_count 1\n"), "{text}");

    let working = DnsServer::start(Records::new().a("n1.example.com", "10.0.0.1")).await.unwrap();
    let resolver =
        MeteredResolver::new(HickoryResolver::new(Some(&[working.addr()]), timeout).unwrap(), metrics.clone());
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Addresses(vec!["10.0.0.1".parse().unwrap()]));
    assert_eq!(resolver.resolve("missing.example.com").await, Resolution::NotFound);
    let text = metrics.encode().unwrap();
    assert!(text.contains("node_csr_approver_dns_lookup_duration_seconds_count 3\n"), "{text}");
    assert!(text.contains("node_csr_approver_dns_failures_total{kind=\"servfail\"} 1\n"), "{text}");
    assert!(!text.contains("n1.example.com"), "names never become labels: {text}");
}

#[test]
fn parse_bind_address_accepts_go_forms() {
    let cases = [
        (":8080", "[::]:8080"),
        (":0", "[::]:0"),
        ("0.0.0.0:8080", "0.0.0.0:8080"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("localhost:8081", "127.0.0.1:8081"),
        ("[::1]:8081", "[::1]:8081"),
        ("[::]:9090", "[::]:9090"),
    ];
    for (text, expected) in cases {
        let parsed = admin::parse_bind_address(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed, expected.parse::<SocketAddr>().unwrap(), "{text}");
    }
}

#[test]
fn parse_bind_address_rejects_bad_forms() {
    assert!(matches!(admin::parse_bind_address(""), Err(AdminError::EmptyAddress)));
    assert!(matches!(admin::parse_bind_address("  "), Err(AdminError::EmptyAddress)));
    for text in [
        "0",
        "8080",
        "127.0.0.1",
        ":",
        ":http",
        ":+80",
        ":65536",
        ":-1",
        "::1:8080",
        "[::1]",
        "[10.0.0.1]:80",
        "example.com:8080",
        "256.0.0.1:80",
        "127.0.0.1:80:80",
    ] {
        let err = admin::parse_bind_address(text).expect_err(text);
        assert!(matches!(err, AdminError::InvalidAddress { .. }), "{text}: {err}");
        assert!(err.to_string().contains(&format!("{text:?}")), "the message names the address: {err}");
    }
}

#[tokio::test]
async fn bind_all_interfaces_and_report_busy_ports() {
    let listener = admin::bind(":0").await.unwrap();
    let local = listener.local_addr().unwrap();
    assert!(local.ip().is_unspecified(), "{local}");
    // `:port` also serves IPv4 loopback (dual-stack `[::]` or the `0.0.0.0` fallback).
    let port = local.port();
    let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
    let connect = tokio::task::spawn_blocking(move || TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))));
    connect.await.unwrap().unwrap();
    accept.await.unwrap().unwrap();

    let taken = admin::bind("127.0.0.1:0").await.unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let err = admin::bind(&busy).await.unwrap_err();
    assert!(matches!(err, AdminError::Bind { .. }), "{err}");
    assert!(err.to_string().contains(&busy), "{err}");
    assert!(matches!(admin::bind("").await.unwrap_err(), AdminError::EmptyAddress));
}
