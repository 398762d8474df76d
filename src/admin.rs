//! The admin HTTP servers: health probes (`/healthz`, `/readyz`) and metrics (`/metrics`).
//!
//! Bind addresses use the Go tool's syntax (`:8080`, `127.0.0.1:8080`, `[::1]:8081`), so
//! `METRICS_BIND_ADDRESS` and `HEALTH_PROBE_BIND_ADDRESS` values carry over. Validate them at
//! startup with [`parse_bind_address`], bind with [`bind`], then run [`serve_health`] and
//! [`serve_metrics`] until their shutdown future completes. Both bound every connection's time
//! ([`HEADER_READ_TIMEOUT`], [`MAX_CONNECTION_AGE`]) and how many each server holds
//! ([`MAX_CONNECTIONS`]), so clients that connect and send nothing cannot stall the process.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

mod serve;

pub use serve::{
    CLOSE_GRACE, HEADER_READ_TIMEOUT, MAX_CONNECTION_AGE, MAX_CONNECTIONS, REPORT_INTERVAL, raise_open_file_limit,
};

/// The `Content-Type` of `/metrics` responses.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An error parsing a bind address or running an admin server.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The bind address is empty.
    #[error("empty bind address: give host:port, for example :8080 or 127.0.0.1:8080")]
    EmptyAddress,
    /// The bind address is not `[host]:port` with an IP address (or `localhost`) as host.
    #[error("invalid bind address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address as given.
        address: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The server failed while running.
    #[error("admin server failed: {0}")]
    Serve(#[source] io::Error),
}

/// Whether the process is ready to serve; `/readyz` answers 503 until [`Readiness::set_ready`].
/// Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A handle that is not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the process ready.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Readiness::set_ready`] has been called.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Where to listen: a wildcard host (`:8080`) or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BindTarget {
    AnyHost(u16),
    Exact(SocketAddr),
}

fn invalid(address: &str, reason: impl Into<String>) -> AdminError {
    AdminError::InvalidAddress { address: address.to_owned(), reason: reason.into() }
}

/// Parses a Go-style `host:port` listen address.
fn parse_target(text: &str) -> Result<BindTarget, AdminError> {
    if text.trim().is_empty() {
        return Err(AdminError::EmptyAddress);
    }
    if text == "0" {
        return Err(invalid(text, "disabling a server with \"0\" is not supported; give host:port such as :8080"));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return Err(invalid(text, "missing ']' after the IPv6 address"));
        };
        let Some(port) = after.strip_prefix(':') else {
            return Err(invalid(text, "missing port; give [address]:port, for example [::1]:8080"));
        };
        match inner.parse::<Ipv6Addr>() {
            Ok(ip) => (Some(IpAddr::V6(ip)), port),
            Err(_) => return Err(invalid(text, format!("{inner:?} is not an IPv6 address"))),
        }
    } else {
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(invalid(text, "missing port; give host:port, for example :8080"));
        };
        if host.contains(':') {
            return Err(invalid(text, "an IPv6 address must be in brackets, for example [::1]:8080"));
        }
        let ip = if host.is_empty() {
            None
        } else if host.eq_ignore_ascii_case("localhost") {
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        } else {
            match host.parse::<Ipv4Addr>() {
                Ok(ip) => Some(IpAddr::V4(ip)),
                Err(_) => return Err(invalid(text, format!("host {host:?} is not an IP address or localhost"))),
            }
        };
        (ip, port)
    };
    // Digits only: `u16::from_str` would also take `+80`.
    let port: u16 = match port.parse() {
        Ok(number) if port.bytes().all(|b| b.is_ascii_digit()) => number,
        _ => return Err(invalid(text, format!("port {port:?} is not a number from 0 to 65535"))),
    };
    Ok(match host {
        None => BindTarget::AnyHost(port),
        Some(ip) => BindTarget::Exact(SocketAddr::new(ip, port)),
    })
}

/// Parses a listen address in the Go tool's syntax: `:8080` (every interface; returned as
/// `[::]:8080`), `0.0.0.0:8080`, `127.0.0.1:0`, `localhost:8080`, `[::1]:8081`. An empty
/// address, `0`, a host name other than `localhost`, an unbracketed IPv6 address or a missing or
/// non-numeric port is an error.
pub fn parse_bind_address(text: &str) -> Result<SocketAddr, AdminError> {
    Ok(match parse_target(text)? {
        BindTarget::AnyHost(port) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
        BindTarget::Exact(addr) => addr,
    })
}

/// Listens on a Go-style address (see [`parse_bind_address`]). `:port` listens on `[::]`, which
/// on Linux also accepts IPv4 unless `net.ipv6.bindv6only` is set, and falls back to `0.0.0.0`
/// where IPv6 is unavailable.
pub async fn bind(addr: &str) -> Result<TcpListener, AdminError> {
    let bind_error = |source| AdminError::Bind { address: addr.to_owned(), source };
    match parse_target(addr)? {
        BindTarget::Exact(socket) => TcpListener::bind(socket).await.map_err(bind_error),
        BindTarget::AnyHost(port) => {
            match TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)).await {
                Ok(listener) => Ok(listener),
                // A busy or forbidden port is not an IPv6 problem: report it instead of serving IPv4 only.
                Err(e) if matches!(e.kind(), io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied) => {
                    Err(bind_error(e))
                }
                Err(_) => TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
                    .await
                    .map_err(bind_error),
            }
        }
    }
}

/// Serves `/healthz` (always 200 `ok`) and `/readyz` (200 `ok` once ready, else 503) until
/// `shutdown` completes, then closes the port and lets the connections finish their responses
/// (at most [`CLOSE_GRACE`]).
pub async fn serve_health(
    listener: TcpListener,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdminError> {
    let router = Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(readiness);
    serve::serve(listener, router, "health", shutdown).await
}

/// Serves `/metrics` as OpenMetrics text until `shutdown` completes, then closes the port as
/// [`serve_health`] does.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdminError> {
    let router = Router::new().route("/metrics", get(metrics_handler)).with_state(metrics);
    serve::serve(listener, router, "metrics", shutdown).await
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, &'static str) {
    if readiness.is_ready() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
}

async fn metrics_handler(State(metrics): State<Metrics>) -> Response {
    match metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_host_is_wildcard() {
        assert_eq!(parse_target(":8080").unwrap(), BindTarget::AnyHost(8080));
        assert_eq!(parse_target("localhost:1").unwrap(), BindTarget::Exact("127.0.0.1:1".parse().unwrap()));
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
            let parsed = parse_bind_address(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(parsed, expected.parse::<SocketAddr>().unwrap(), "{text}");
        }
    }

    #[test]
    fn parse_bind_address_rejects_bad_forms() {
        assert!(matches!(parse_bind_address(""), Err(AdminError::EmptyAddress)));
        assert!(matches!(parse_bind_address("  "), Err(AdminError::EmptyAddress)));
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
            let err = parse_bind_address(text).expect_err(text);
            assert!(matches!(err, AdminError::InvalidAddress { .. }), "{text}: {err}");
            assert!(err.to_string().contains(&format!("{text:?}")), "the message names the address: {err}");
        }
    }
}
