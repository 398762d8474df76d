//! The `run` command: connects to the cluster, starts leader election, the admin endpoints and the
//! controller, and shuts all of it down gracefully on SIGTERM or SIGINT: the controller stops
//! taking work and finishes what is in flight (bounded by `--drain-timeout`) while the Lease is
//! still held, then the Lease is released, queued events are published and the endpoints close.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::Reporter;
use kube::runtime::reflector;
use kube::{Api, Client};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{oneshot, watch};

use crate::admin::{self, Readiness};
use crate::config::{BindAddress, RunConfig, Settings};
use crate::dns::HickoryResolver;
use crate::kubernetes::cluster::KubeCluster;
use crate::kubernetes::connect::{ConnectError, Connection, connect};
use crate::kubernetes::controller::{self, Context, Events, ReconcileState};
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::leader::{self, Leadership};
use crate::metrics::{MeteredResolver, Metrics};
use crate::policy::{ClusterView, brake_limit};

/// The controller could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable cluster configuration.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The DNS resolver could not be built.
    #[error("DNS resolver: {0}")]
    Dns(#[from] crate::dns::DnsError),
    /// An admin endpoint could not listen or serve.
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// In-flight work did not finish within `--drain-timeout` after a shutdown signal; it was
    /// cancelled (nothing half-written: a CSR left undecided is decided by the next leader).
    #[error("in-flight work did not finish within --drain-timeout {}", humantime::format_duration(*.0))]
    DrainTimeout(Duration),
}

/// Runs the controller until SIGTERM/SIGINT; returns once in-flight work finished (within
/// `--drain-timeout`) and the Lease was released.
pub async fn run(settings: Settings) -> Result<(), RunError> {
    let Settings { policy, dns, run: cfg, machines: machine_source, .. } = settings;
    // Registered first, so a signal during startup is seen once the controller runs.
    let signals = ShutdownSignals::register();
    let Connection { client, machines } = connect(cfg.kubeconfig.as_deref(), machine_source.as_ref()).await?;
    // The CSR cache: the controller's watch fills it, machine mode's ledger reads it.
    let (csr_cache, csrs) = reflector::store();
    let ledger = machine_source.map(|source| CsrLedger::new(csr_cache, source.rules));
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let servers = AdminServers::start(&cfg, readiness.clone(), metrics.clone()).await?;
    let (leadership, mut election) = elect(&client, &cfg).await?;
    metrics.set_leader(leadership.is_leader());
    if let Some(changes) = leadership.changes() {
        tokio::spawn(report_leader(changes, metrics.clone()));
    }
    let writable = leadership.writable();

    let resolver = MeteredResolver::new(HickoryResolver::new(dns.servers.as_deref(), dns.timeout)?, metrics.clone());
    let instance = cfg.leader.as_ref().map(|l| l.identity.clone());
    let (events, event_publisher) =
        Events::start(client.clone(), Reporter { controller: "node-csr-approver".into(), instance }, cfg.events);
    let ctx = Arc::new(Context {
        api: Api::all(client.clone()),
        policy,
        resolver,
        cluster: KubeCluster::new(client.clone(), machines.clone().zip(ledger)),
        leadership,
        events,
        metrics,
        dry_run: cfg.dry_run,
        reconciles: ReconcileState::default(),
    });
    if let Some(rules) = &ctx.policy.machine {
        tokio::spawn(report_pending_brake(ctx.cluster.clone(), rules.max_pending_delta, ctx.metrics.clone()));
    }
    let (stop_controller, controller_stopped) = oneshot::channel::<()>();
    let on_synced = move || {
        tracing::info!("CSR watch synced: ready");
        readiness.set_ready();
    };
    let schedule = controller::Schedule {
        concurrency: cfg.concurrency,
        resync_period: cfg.resync_period,
        writable,
        shutdown: async move {
            let _ = controller_stopped.await;
        },
    };
    let controller = controller::run(ctx, schedule, csrs, machines, on_synced);
    tracing::info!(
        concurrency = cfg.concurrency,
        dry_run = cfg.dry_run,
        resync_period = %humantime::format_duration(cfg.resync_period),
        leader_election = cfg.leader.is_some(),
        "started"
    );

    let outcome = supervise(controller, stop_controller, signals, &mut election, cfg.drain_timeout).await;
    if let Some(election) = election {
        release(election).await;
    }
    // The controller (and with it every handle on the event queue) is gone and the Lease is free:
    // publish what is still queued.
    event_publisher.drain().await;
    servers.stop().await;
    outcome
}

/// Runs `controller` until a shutdown signal or a failed election. On a signal the controller is
/// told to stop taking work and awaited for at most `drain_timeout`, so in-flight evaluations
/// and writes finish; a failed election drops it at once.
async fn supervise(
    controller: impl Future<Output = ()>,
    stop: oneshot::Sender<()>,
    mut signals: ShutdownSignals,
    election: &mut Option<leader::Election>,
    drain_timeout: Duration,
) -> Result<(), RunError> {
    let mut controller = std::pin::pin!(controller);
    tokio::select! {
        () = &mut controller => Ok(()),
        signal = signals.recv() => {
            let _ = stop.send(());
            drain(controller, signal, drain_timeout).await
        }
        error = election_failed(election) => Err(RunError::Leader(error)),
    }
}

/// Awaits the stopping controller, at most `limit`.
async fn drain(controller: Pin<&mut impl Future<Output = ()>>, signal: &str, limit: Duration) -> Result<(), RunError> {
    let timeout = humantime::format_duration(limit);
    tracing::info!(signal, drain_timeout = %timeout, "shutting down: finishing in-flight work");
    match tokio::time::timeout(limit, controller).await {
        Ok(()) => {
            tracing::info!("in-flight work finished");
            Ok(())
        }
        Err(_) => Err(RunError::DrainTimeout(limit)),
    }
}

/// Starts contending for the Lease with `--leader-election`; without it this replica always
/// writes.
async fn elect(client: &Client, cfg: &RunConfig) -> Result<(Leadership, Option<leader::Election>), RunError> {
    match &cfg.leader {
        Some(leader) => {
            let (leadership, election) = leader::start(client.clone(), leader).await?;
            Ok((leadership, Some(election)))
        }
        None => Ok((Leadership::always(), None)),
    }
}

/// Releases the Lease (if held) so a standby takes over at once.
async fn release(election: leader::Election) {
    match election.release().await {
        Ok(()) => tracing::info!("Lease released"),
        Err(error) => tracing::warn!(%error, "releasing the Lease"),
    }
}

/// The health and metrics servers, stopped last so probes and scrapes work during the drain.
struct AdminServers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Result<(), admin::AdminError>>>,
}

impl AdminServers {
    /// Binds and serves `/healthz`, `/readyz` and (unless disabled) `/metrics`, logging the
    /// address each listens on (so `:0` can be used and the port read from the log).
    async fn start(cfg: &RunConfig, readiness: Readiness, metrics: Metrics) -> Result<AdminServers, RunError> {
        let (stop, stopped) = watch::channel(false);
        let stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stopped| *stopped).await;
            }
        };
        let health = listen(cfg.health_address, "health").await?;
        let mut tasks = vec![tokio::spawn(admin::serve_health(health, readiness, stopped()))];
        if let Some(address) = cfg.metrics_address {
            let listener = listen(address, "metrics").await?;
            tasks.push(tokio::spawn(admin::serve_metrics(listener, metrics, stopped())));
        }
        Ok(AdminServers { stop, tasks })
    }

    /// Stops the servers once their requests in flight are answered.
    async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Binds `address` and logs the address actually bound.
async fn listen(address: BindAddress, endpoints: &'static str) -> Result<tokio::net::TcpListener, RunError> {
    let listener = admin::bind(address).await?;
    if let Ok(bound) = listener.local_addr() {
        tracing::info!(endpoints, address = %bound, "listening");
    }
    Ok(listener)
}

/// Keeps the pending-brake gauges current.
async fn report_pending_brake(cluster: KubeCluster, delta: u32, metrics: Metrics) {
    loop {
        if let Ok(load) = cluster.load().await {
            metrics.set_pending_brake(load.pending, brake_limit(&load, delta));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Keeps the leader gauge equal to whether the Lease manager holds the Lease.
async fn report_leader(mut changes: watch::Receiver<bool>, metrics: Metrics) {
    while changes.changed().await.is_ok() {
        metrics.set_leader(*changes.borrow_and_update());
    }
}

async fn election_failed(election: &mut Option<leader::Election>) -> leader::LeaderError {
    match election {
        Some(election) => election.failed().await,
        None => std::future::pending().await,
    }
}

/// SIGTERM and SIGINT, caught from the moment they are registered.
struct ShutdownSignals(Option<(Signal, Signal)>);

impl ShutdownSignals {
    /// Installs the handlers; if that fails the signals keep their default action.
    fn register() -> ShutdownSignals {
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => ShutdownSignals(Some((term, int))),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "cannot handle SIGTERM and SIGINT: they will end the process at once");
                ShutdownSignals(None)
            }
        }
    }

    /// Resolves on the next SIGTERM or SIGINT with the signal's name.
    async fn recv(&mut self) -> &'static str {
        let Some((term, int)) = &mut self.0 else { return std::future::pending().await };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}
