//! The admin servers on real loopback sockets, the metrics they serve, bind-address parsing, and
//! the limits that keep hostile clients from stalling them: in process, and the real binary with
//! 1,024 file descriptors against the apiserver while thousands of connections sit idle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod held;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use node_csr_approver::admin::{self, AdminError, OPENMETRICS_CONTENT_TYPE, Readiness};
use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::metrics::{MeteredResolver, Metrics, WriteResult};
use node_csr_approver::policy::{DecisionKind, Reason};
use node_csr_approver::policy::{DnsFailure, Resolution, Resolver};
use node_csr_approver::values::BindAddress;
use support::Request;
use support::cluster::{Approver, Csrs, PREFIXES, REGEX, SERIAL, control_plane, create_serving_csr, http_get};
use support::cluster::{unique, wait_decided};
use testdns::{DnsServer, Records};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    let listener = admin::bind(BindAddress::parse("127.0.0.1:0").unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(admin::serve_health(listener, readiness, async move {
        let _ = stopped.await;
    }));
    Running { addr, stop, task }
}

async fn start_metrics(metrics: Metrics) -> Running {
    let listener = admin::bind(BindAddress::parse("127.0.0.1:0").unwrap()).await.unwrap();
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

#[tokio::test]
async fn bind_all_interfaces_and_report_busy_ports() {
    let listener = admin::bind(BindAddress::parse(":0").unwrap()).await.unwrap();
    let local = listener.local_addr().unwrap();
    assert!(local.ip().is_unspecified(), "{local}");
    // `:port` also serves IPv4 loopback (dual-stack `[::]` or the `0.0.0.0` fallback).
    let port = local.port();
    let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
    let connect = tokio::task::spawn_blocking(move || TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))));
    connect.await.unwrap().unwrap();
    accept.await.unwrap().unwrap();

    let taken = admin::bind(BindAddress::parse("127.0.0.1:0").unwrap()).await.unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let err = admin::bind(BindAddress::parse(&busy).unwrap()).await.unwrap_err();
    assert!(matches!(err, AdminError::Bind { .. }), "{err}");
    assert!(err.to_string().contains(&busy), "{err}");
}

/// How long until the server closes `stream` (end or reset; answers are read), at most `limit`.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buffer = [0_u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), stream.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn connect(addr: SocketAddr) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(addr).await.unwrap()
}

#[tokio::test]
async fn connections_without_a_complete_request_are_closed_after_the_header_read_timeout() {
    let server = start_health(Readiness::new()).await;
    let (mut idle, mut kept_alive, mut partial) =
        (connect(server.addr).await, connect(server.addr).await, connect(server.addr).await);
    kept_alive.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    partial.write_all(b"GET /healthz HTTP/1.1\r\nHost:").await.unwrap();
    let limit = admin::HEADER_READ_TIMEOUT + Duration::from_secs(3);
    let (idle, kept_alive, partial) = tokio::join!(
        closed_within(&mut idle, limit),
        closed_within(&mut kept_alive, limit),
        closed_within(&mut partial, limit)
    );
    for (what, took) in [("idle", idle), ("kept-alive", kept_alive), ("partial", partial)] {
        let took = took.unwrap_or_else(|| panic!("the {what} connection is still open after {limit:?}"));
        assert!(took >= admin::HEADER_READ_TIMEOUT - Duration::from_millis(500), "{what} closed after {took:?}");
    }
    server.shut_down().await;
}

/// The real binary as [`Approver::start`] runs it, under `prlimit` with `nofile` open files at most.
fn approver_with_open_file_limit(kubeconfig: &std::path::Path, nofile: u64, extra: &[&str]) -> Approver {
    let mut command = Command::new("prlimit");
    command.arg(format!("--nofile={nofile}:{nofile}")).arg("--").arg(env!("CARGO_BIN_EXE_node-csr-approver"));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.arg("--kubeconfig").arg(kubeconfig).args(["--provider-regex", REGEX, "--provider-ip-prefixes", PREFIXES]);
    command.args(["--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"]);
    command.args(["--log-format", "json", "--log-level", "info,node_csr_approver=debug"]).args(extra);
    command.stdin(Stdio::null()).stdout(Stdio::null());
    Approver::spawn(command)
}

/// The health and metrics ports the approver logged.
fn ports(approver: &Approver) -> (u16, u16) {
    let logs = approver.logs();
    let port = |endpoints| testkit::approver::listening(&logs, endpoints).unwrap().port();
    (port("health"), port("metrics"))
}

/// Opens up to `count` connections to 127.0.0.1:`port` that send nothing (each given 10 s).
async fn open_idle(port: u16, count: usize) -> Vec<tokio::net::TcpStream> {
    let open = |_| async move {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
        tokio::time::timeout(Duration::from_secs(10), connect).await.ok()?.ok()
    };
    futures::stream::iter(0..count).map(open).buffer_unordered(256).filter_map(std::future::ready).collect().await
}

/// Polls `path` until it answers 200, at most `limit`; each try may take 2 s.
async fn answers_200(port: u16, path: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let reply = tokio::time::timeout(Duration::from_secs(2), http_get(port, path)).await;
        if matches!(reply, Ok(Some((200, _)))) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// The JSON log lines whose message starts with `message`.
fn logged(approver: &Approver, message: &str) -> Vec<serde_json::Value> {
    let lines = approver.log_lines().into_iter();
    lines.filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with(message))).collect()
}

#[tokio::test]
async fn thousands_of_idle_connections_stall_neither_decisions_nor_probes() {
    let _serial = SERIAL.lock().await;
    // This process holds the connections: it needs some 5,000 descriptors.
    let ours = rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let per_port = usize::try_from(ours.saturating_sub(512) / 2).unwrap().min(2_500);
    assert!(per_port > 1_100, "this test needs an open-file limit of at least 2,800 (have {ours})");
    let (cp, node) = (control_plane().await, unique("n"));
    let dns = DnsServer::start_on_thread(Records::new().a(&format!("{node}.nodes.example.com"), "10.0.0.31")).unwrap();
    let dns_flag = format!("--dns-server={}", dns.addr());
    let mut approver = approver_with_open_file_limit(cp.kubeconfig_path(), 1_024, &[&dns_flag]);
    approver.wait_ready().await;
    let raised = logged(&approver, "open-file limit (RLIMIT_NOFILE)");
    assert_eq!(raised.first().map(|l| [&l["before"], &l["after"], &l["hard"]]), Some([&1024.into(); 3]), "{raised:?}");
    let (health, metrics) = ports(&approver);

    let started = Instant::now();
    let (to_health, to_metrics) = tokio::join!(open_idle(health, per_port), open_idle(metrics, per_port));
    assert_eq!((to_health.len(), to_metrics.len()), (per_port, per_port), "every connection was accepted");
    let held = std::fs::read_dir(format!("/proc/{}/fd", approver.pid())).unwrap().count();
    let bound = 2 * admin::MAX_CONNECTIONS + 100; // both servers full, and what the controller uses
    assert!(held < bound, "the approver holds {held} descriptors with {} idle connections open", 2 * per_port);

    let csrs = Csrs::new(cp.kubeconfig_path());
    let name = csrs.name("idle-flood");
    let request = Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.31");
    create_serving_csr(cp, &name, &node, &request).await;
    let decided = wait_decided(&cp.admin_client().await.unwrap(), &name, Duration::from_secs(15)).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    let probe_within = admin::HEADER_READ_TIMEOUT + Duration::from_secs(10);
    assert!(answers_200(health, "/healthz", probe_within).await, "/healthz\n{}", approver.logs());
    assert!(answers_200(metrics, "/metrics", probe_within).await, "/metrics\n{}", approver.logs());
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    assert!(logged(&approver, "out of file descriptors").is_empty(), "{}", approver.logs());
    let at_limit = logged(&approver, "admin connections at their limit");
    let servers: Vec<_> = at_limit.iter().map(|l| l["endpoints"].as_str().unwrap_or_default()).collect();
    assert_eq!(servers.len(), 2, "once per server: {at_limit:?}");
    assert!(servers.contains(&"health") && servers.contains(&"metrics"), "{at_limit:?}");

    drop((to_health, to_metrics));
    assert!(answers_200(health, "/healthz", Duration::from_secs(5)).await);
    assert!(approver.wait_exit(Duration::ZERO).await.is_none(), "still running");
}

#[tokio::test]
async fn running_out_of_descriptors_is_logged_once_and_recovered_from() {
    let _serial = SERIAL.lock().await;
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let cp = control_plane().await;
    // Too few for two full servers: accepting runs out of descriptors before the cap.
    let mut approver = approver_with_open_file_limit(cp.kubeconfig_path(), 96, &["--bypass-dns-resolution"]);
    approver.wait_ready().await;
    let (health, metrics) = ports(&approver);
    let (to_health, to_metrics) = tokio::join!(open_idle(health, 300), open_idle(metrics, 300));
    let deadline = Instant::now() + Duration::from_secs(5);
    while logged(&approver, "out of file descriptors").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exhausted = logged(&approver, "out of file descriptors");
    assert!(!exhausted.is_empty() && exhausted.len() <= 2, "one line per server:\n{}", approver.logs());
    let emfile = |l: &serde_json::Value| l["error"].as_str().is_some_and(|e| e.contains("os error 24"));
    assert!(exhausted.iter().all(|l| l["open_file_limit"] == 96 && emfile(l)), "{exhausted:?}");
    drop((to_health, to_metrics));
    assert!(answers_200(health, "/healthz", Duration::from_secs(10)).await, "{}", approver.logs());
    assert!(approver.wait_exit(Duration::ZERO).await.is_none(), "still running");
}
