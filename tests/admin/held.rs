//! Clients that hold what the admin servers have: every connection slot, or a request head that
//! never ends. A new connection at the cap takes the slot of the oldest one without a request in
//! service, so probes are answered whoever holds the slots; a head longer than a probe's or a
//! scrape's needs is refused at once instead of buffered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use node_csr_approver::admin::{self, Readiness};
use node_csr_approver::metrics::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::cluster::{SERIAL, control_plane, http_get};
use crate::{approver_with_open_file_limit, closed_within, connect, get, logged, ports, start_health, start_metrics};

#[tokio::test]
async fn at_the_cap_the_oldest_waiting_connection_makes_room_and_shutdown_is_bounded() {
    let server = start_metrics(Metrics::new()).await;
    let mut held = Vec::new();
    for _ in 0..admin::MAX_CONNECTIONS {
        held.push(connect(server.addr).await);
        // Accepted in this order: the first is the oldest.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = connect(server.addr).await;
    assert!(closed_within(&mut held[0], Duration::from_secs(2)).await.is_some(), "the oldest is closed");
    new.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(2), new.read_to_string(&mut reply)).await.unwrap().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 "), "the new connection is served: {reply:.200}");
    assert!(still_open(&mut held[1..]).await, "only the oldest is closed");
    // A connection its client closes gives its slot back: nothing more is closed for the next.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get(server.addr, "/metrics").await.status, 200);
    assert!(still_open(&mut held[1..]).await, "a slot was free: none is closed");
    // Shutdown closes the idle connections still held, within `Running::shut_down`'s 10 s.
    server.shut_down().await;
    for stream in &mut held[1..] {
        assert!(closed_within(stream, Duration::from_secs(1)).await.is_some());
    }
}

/// Whether every one of `held` stays open for 200 ms.
async fn still_open(held: &mut [tokio::net::TcpStream]) -> bool {
    let checks = held.iter_mut().map(|stream| closed_within(stream, Duration::from_millis(200)));
    futures::future::join_all(checks).await.iter().all(Option::is_none)
}

#[tokio::test]
async fn a_request_head_longer_than_the_cap_is_refused_at_once() {
    let server = start_health(Readiness::new()).await;
    // A head of half the cap is served.
    let mut fits = connect(server.addr).await;
    let padding = "a".repeat(admin::MAX_HEAD_BYTES / 2);
    let head = format!("GET /healthz HTTP/1.1\r\nHost: a\r\nX-Padding: {padding}\r\nConnection: close\r\n\r\n");
    fits.write_all(head.as_bytes()).await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(2), fits.read_to_string(&mut reply)).await.unwrap().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply:.200}");
    // Twice the cap, unfinished: answered 431 or closed, long before the head's time is up.
    let mut long = connect(server.addr).await;
    let padding = "a".repeat(2 * admin::MAX_HEAD_BYTES);
    let head = format!("GET /healthz HTTP/1.1\r\nHost: a\r\nX-Padding: {padding}");
    let _ = long.write_all(head.as_bytes()).await;
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), long.read_to_end(&mut reply)).await;
    assert!(read.is_ok(), "still open after 2 s (the head's time is {:?})", admin::HEADER_READ_TIMEOUT);
    assert!(reply.is_empty() || reply.starts_with(b"HTTP/1.1 431 "), "{:.200}", String::from_utf8_lossy(&reply));
    server.shut_down().await;
}

/// Holds a connection to 127.0.0.1:`port` as a hostile client would, until `stop`: sends an
/// unfinished request head, then one more byte of it every 100 ms; once the server closes it,
/// opens the next 50 ms later. Counts the connections opened in `opened`.
async fn hold(port: u16, stop: Arc<AtomicBool>, opened: Arc<AtomicUsize>) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            opened.fetch_add(1, Ordering::Relaxed);
            let mut open = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: holder\r\nX-Slow: ").await.is_ok();
            let mut buffer = [0_u8; 1024];
            while open && !stop.load(Ordering::Relaxed) {
                open = tokio::select! {
                    read = stream.read(&mut buffer) => matches!(read, Ok(n) if n > 0),
                    () = tokio::time::sleep(Duration::from_millis(100)) => stream.write_all(b"x").await.is_ok(),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_probe_is_answered_while_a_client_holds_every_slot() {
    let _serial = SERIAL.lock().await;
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let cp = control_plane().await;
    let mut approver = approver_with_open_file_limit(cp.kubeconfig_path(), 1_024, &["--bypass-dns-resolution"]);
    approver.wait_ready().await;
    let (health, _) = ports(&approver);
    let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let holders = admin::MAX_CONNECTIONS + 8;
    let tasks: Vec<_> = (0..holders).map(|_| tokio::spawn(hold(health, stop.clone(), opened.clone()))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // As the kubelet probes: a fresh connection each time, answered within 1 s (its default timeout).
    let (mut failed, started) = (Vec::new(), Instant::now());
    for probe in 0..40 {
        let reply = tokio::time::timeout(Duration::from_secs(1), http_get(health, "/healthz")).await;
        if !matches!(reply, Ok(Some((200, ref body))) if body == "ok") {
            failed.push((probe, reply));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let opened = opened.load(Ordering::Relaxed);
    println!("40 probes in {took:?} beside {holders} holders, which opened {opened} connections; failed: {failed:?}");
    assert!(failed.is_empty(), "{} of 40 probes failed: {failed:?}", failed.len());
    assert!(opened > holders, "the holders never had to reconnect: the slots were not contended");
    let at_limit = logged(&approver, "admin connections at their limit");
    assert!(at_limit.iter().any(|l| l["endpoints"] == "health"), "{}", approver.logs());
    assert!(approver.wait_exit(Duration::ZERO).await.is_none(), "still running");
}
