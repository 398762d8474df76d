//! Serving the admin endpoints to clients that may be hostile: the endpoints listen on every
//! interface without authentication, so any pod or host that reaches the port can open
//! connections and send nothing. Each connection is bounded in time and in the request head it
//! may buffer, and each server in how many it holds, so idle or slow clients cannot use up the
//! process's file descriptors (which the apiserver watch, the writes and the DNS lookups need too)
//! or its memory, and running out is logged instead of retried in silence. A server at its cap
//! closes its oldest connection without a request in service to take a new one (`slots.rs`), so
//! a client holding the slots cannot keep a probe out.

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::AdminError;
use super::slots::{Slot, Slots, Taken};

/// Connections one admin server holds at once. Legitimate clients need very few: the kubelet
/// opens one connection per probe (liveness and readiness, every few seconds, each closed after
/// its answer) and each Prometheus server keeps one per target. 64 leaves room for several
/// scrapers, probes overlapping a slow moment and people with curl, while the two servers together
/// hold at most 128 descriptors, well inside the 1,024 a container often starts with. A
/// connection accepted at the cap takes the slot of the oldest connection that has no request in
/// service (one still sending its head, or idle between requests; the oldest of all when every
/// one is being answered), which is closed: a probe sends its request the moment it connects and
/// is answered within milliseconds, so a client holding the slots cannot keep it out.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a complete request head, counted from when the server
/// waits for one: on a fresh connection and, between requests, on a kept-alive one, so this is
/// also the idle (keep-alive) timeout. Probes and scrapes send their request the moment they
/// connect, within milliseconds; 5 s tolerates a loaded node, and a client holding a connection
/// without sending loses it after 5 s. An idle Prometheus connection is closed between scrapes
/// (intervals are 10 s or more) and reopened by the next one.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a connection buffers of a request head, in bytes (hyper's smallest allowed buffer is
/// 8 KiB): a probe's or a scrape's head is a few hundred bytes. A longer head is answered 431
/// (Request Header Fields Too Large) and its connection closed, so unfinished heads cost at most
/// this per connection.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The longest a connection stays open, whatever it does (a body sent a byte at a time, a
/// response read as slowly): then it is closed after the response in progress, or after
/// [`CLOSE_GRACE`] at most. A scrape takes milliseconds; Prometheus' scrape timeout is 10 s by
/// default.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30);

/// How long a connection asked to close (at [`MAX_CONNECTION_AGE`] or on shutdown) may take to
/// finish its response before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// At most one log line per server per interval about connections closed at the cap, and one
/// about failed accepts (descriptors exhausted); each gives the count since the last one.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// The first and the longest pause after a failed accept: the failure (no descriptor left) lasts
/// until connections close, so the loop waits instead of spinning, 10 ms doubling up to 1 s.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, closes the
/// port, lets the connections finish their responses (at most [`CLOSE_GRACE`]) and returns.
/// `endpoints` names the server in log lines (`health`, `metrics`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    endpoints: &'static str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdminError> {
    let slots = Slots::new(MAX_CONNECTIONS);
    let (stop, stopping) = watch::channel(false);
    let (mut evicted, mut failed) = (Throttle::new(REPORT_INTERVAL), Throttle::new(REPORT_INTERVAL));
    let mut backoff = ACCEPT_BACKOFF.0;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF.0;
                let taken = slots.take().await;
                if taken.as_ref().is_none_or(|(_, how)| *how == Taken::Evicted)
                    && let Some(count) = evicted.hit()
                {
                    tracing::warn!(
                        endpoints,
                        limit = MAX_CONNECTIONS,
                        closed = count,
                        "admin connections at their limit: closing the oldest without a request in service"
                    );
                }
                if let Some((slot, _)) = taken {
                    tokio::spawn(connection(stream, router.clone(), slot, stopping.clone()));
                }
            }
            Err(error) if is_connection_error(&error) => {}
            Err(error) => {
                if let Some(count) = failed.hit() {
                    report_accept_error(endpoints, &error, count);
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
            }
        }
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection holds its slot until it is gone: all of them free means all closed.
    slots.all_free().await;
    Ok(())
}

/// Serves one connection over HTTP/1.1 with the limits above, holding `slot` until closed, and
/// closes it at once when its slot is taken back.
async fn connection(stream: TcpStream, router: Router, slot: Slot, mut stopping: watch::Receiver<bool>) {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).keep_alive(true);
    builder.max_buf_size(MAX_HEAD_BYTES);
    let router = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(|request| {
        let in_service = slot.in_service();
        let response = hyper::service::Service::call(&router, request);
        async move {
            let response = response.await;
            drop(in_service);
            response
        }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        // Errors (a timeout, a reset, a malformed request) concern this client only.
        _ = connection.as_mut() => return,
        () = slot.evicted() => return,
        _ = stopping.wait_for(|stop| *stop) => {}
        () = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
    }
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = tokio::time::timeout(CLOSE_GRACE, connection) => {}
        () = slot.evicted() => {}
    }
}

/// Errors of one connection that went away before it was accepted: nothing to report.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Whether a failed accept means the process (EMFILE) or the system (ENFILE) has no file
/// descriptor left.
fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

fn report_accept_error(endpoints: &'static str, error: &io::Error, count: u64) {
    if out_of_descriptors(error) {
        let limit = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft).unwrap_or_default();
        tracing::error!(
            endpoints,
            %error,
            open_file_limit = limit,
            failed_accepts = count,
            "out of file descriptors: cannot accept admin connections (and the controller cannot open any)"
        );
    } else {
        tracing::error!(endpoints, %error, failed_accepts = count, "accepting admin connections failed");
    }
}

/// Counts events and says when to report them: the first at once, then at most once per
/// interval, with how many happened since the last report.
#[derive(Debug)]
struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    unreported: u64,
}

impl Throttle {
    fn new(interval: Duration) -> Throttle {
        Throttle { interval, last: None, unreported: 0 }
    }

    /// Counts one event; `Some(count)` when it is time to report, `count` the events since the
    /// last report, this one included.
    fn hit(&mut self) -> Option<u64> {
        self.hit_at(Instant::now())
    }

    fn hit_at(&mut self, now: Instant) -> Option<u64> {
        self.unreported += 1;
        if self.last.is_some_and(|last| now.duration_since(last) < self.interval) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) to the hard limit, as Go programs do
/// since Go 1.19: the soft limit is often 1,024 while the hard one allows far more. Logs the
/// limits before and after at debug, and a failure at warn.
pub fn raise_open_file_limit() {
    let before = match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok(limits) => limits,
        Err(error) => {
            tracing::warn!(%error, "cannot read the open-file limit (RLIMIT_NOFILE)");
            return;
        }
    };
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => {
            tracing::debug!(before = before.0, after = soft, hard = before.1, "open-file limit (RLIMIT_NOFILE)")
        }
        Err(error) => tracing::warn!(%error, soft = before.0, hard = before.1, "cannot raise the open-file limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_throttled_to_one_per_interval_with_the_count_since_the_last() {
        let start = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(60));
        assert_eq!(throttle.hit_at(start), Some(1));
        assert_eq!(throttle.hit_at(start + Duration::from_secs(1)), None);
        assert_eq!(throttle.hit_at(start + Duration::from_secs(59)), None);
        assert_eq!(throttle.hit_at(start + Duration::from_secs(60)), Some(3));
        assert_eq!(throttle.hit_at(start + Duration::from_secs(61)), None);
        assert_eq!(throttle.hit_at(start + Duration::from_secs(500)), Some(2));
    }

    #[test]
    fn descriptor_exhaustion_is_told_apart_from_a_vanished_client() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(libc::ECONNABORTED)));
        assert!(is_connection_error(&io::Error::from_raw_os_error(libc::ECONNABORTED)));
        assert!(!is_connection_error(&io::Error::from_raw_os_error(libc::EMFILE)));
    }
}
