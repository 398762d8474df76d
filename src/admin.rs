//! The admin HTTP servers: health probes (`/healthz`, `/readyz`) and metrics (`/metrics`).
//!
//! Bind a [`BindAddress`] (the Go tool's syntax, parsed by the configuration) with [`bind`], then
//! run [`serve_health`] and [`serve_metrics`] until their shutdown future completes. Both bound every connection's time
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
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::values::BindAddress;

mod serve;
mod slots;

pub use serve::{
    CLOSE_GRACE, HEADER_READ_TIMEOUT, MAX_CONNECTION_AGE, MAX_CONNECTIONS, MAX_HEAD_BYTES, REPORT_INTERVAL,
    raise_open_file_limit,
};

/// The `Content-Type` of `/metrics` responses.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An error binding or running an admin server.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address as configured.
        address: BindAddress,
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

/// Listens on `address`. `:port` listens on `[::]`, which on Linux also accepts IPv4 unless
/// `net.ipv6.bindv6only` is set, and falls back to `0.0.0.0` where IPv6 is unavailable.
pub async fn bind(address: BindAddress) -> Result<TcpListener, AdminError> {
    let bind_error = |source| AdminError::Bind { address, source };
    match address {
        BindAddress::Exact(socket) => TcpListener::bind(socket).await.map_err(bind_error),
        BindAddress::AnyHost(port) => {
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

/// The health and metrics servers of `run`, stopped last so probes and scrapes work while it
/// drains.
pub struct Servers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Result<(), AdminError>>>,
}

impl Servers {
    /// Binds and serves `/healthz` and `/readyz` at `health`, and `/metrics` at `metrics_address`
    /// unless it is off, logging the address each listens on (so `:0` can be used and the port
    /// read from the log).
    pub async fn start(
        health: BindAddress,
        metrics_address: Option<BindAddress>,
        readiness: Readiness,
        metrics: Metrics,
    ) -> Result<Servers, AdminError> {
        let (stop, stopped) = watch::channel(false);
        let stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stopped| *stopped).await;
            }
        };
        let health = listen(health, "health").await?;
        let mut tasks = vec![tokio::spawn(serve_health(health, readiness, stopped()))];
        if let Some(address) = metrics_address {
            let listener = listen(address, "metrics").await?;
            tasks.push(tokio::spawn(serve_metrics(listener, metrics, stopped())));
        }
        Ok(Servers { stop, tasks })
    }

    /// Stops the servers once their requests in flight are answered.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Binds `address` and logs the address actually bound.
async fn listen(address: BindAddress, endpoints: &'static str) -> Result<TcpListener, AdminError> {
    let listener = bind(address).await?;
    if let Ok(bound) = listener.local_addr() {
        tracing::info!(endpoints, address = %bound, "listening");
    }
    Ok(listener)
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
