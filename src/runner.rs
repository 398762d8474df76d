//! The `run` command: connects to the cluster, starts leader election, the admin endpoints and the
//! controller, and shuts all of it down gracefully on SIGTERM or SIGINT: the controller stops
//! taking work and finishes what is in flight (bounded by `--drain-timeout`) while the Lease is
//! still held, then the Lease is released, queued events are published and the endpoints close.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::kubernetes::csr_cache;
use futures::FutureExt;
use kube::Api;
use kube::runtime::events::Reporter;
use tokio::sync::oneshot;
use tokio_util::task::AbortOnDropHandle;

use crate::admin::{self, Readiness};
use crate::audit::metrics::AuditMetrics;
use crate::audit::periodic::{self, Host};
use crate::config::Settings;
use crate::controller::{self, Context};
use crate::dns::HickoryResolver;
use crate::events::Events;
use crate::kubernetes::cluster::KubeCluster;
use crate::kubernetes::connect::{ConnectError, Connection, connect, lease_client};
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::csr_object::RequestRoom;
use crate::kubernetes::decoded::Skipped;
use crate::kubernetes::leader::{self, Leadership};
use crate::kubernetes::node_index::NodeIndex;
use crate::metrics::{MeteredResolver, Metrics};
use crate::policy::{ClusterView, PolicyConfig, Resolver};
use crate::shutdown::ShutdownSignals;

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
    let Settings { policy, dns, run: cfg, leader: lease, machines: machine_source, audit, .. } = settings;
    // Registered first, so a signal during startup is seen once the controller runs.
    let signals = ShutdownSignals::register();
    let metrics = Metrics::new();
    let skipped = {
        let metrics = metrics.clone();
        Skipped::counting(move |kind| metrics.record_undecodable(kind))
    };
    let budget = cfg.request_budget();
    let read_node = policy.user_rules.read_node();
    let Connection { client, nodes, machines } =
        connect(cfg.kubeconfig.as_deref(), budget, machine_source.as_ref(), read_node, &skipped).await?;
    // The CSR cache: the controller's watch fills it, the ledger reads it, and the approvals the
    // controller wrote from what it knows of each CSR.
    let (csr_cache, csrs) = csr_cache::cache();
    let kubelet_dial = machine_source.as_ref().and_then(|source| source.kubelet_dial(&policy));
    let memory = Arc::new(controller::Memory::new(metrics.clone()));
    let ledger = CsrLedger::new(csr_cache, machine_source.map(|source| source.rules), Some(memory.clone()));
    let readiness = Readiness::new();
    let servers = admin::Servers::start(
        cfg.health_probe_bind_address,
        cfg.metrics_bind_address,
        readiness.clone(),
        metrics.clone(),
    )
    .await?;
    let lease_client = lease_client(cfg.kubeconfig.as_deref(), budget, &client).await?;
    let (leadership, mut election) = leader::claim(lease_client, lease.as_ref(), skipped.clone()).await?;
    metrics.set_leader(leadership.is_leader());
    if let Some(changes) = leadership.changes() {
        tokio::spawn(metrics.clone().follow_leader(changes));
    }
    let writable = leadership.writable();

    let resolver = MeteredResolver::new(HickoryResolver::new(dns.servers.as_deref(), dns.timeout)?, metrics.clone());
    let instance = election.as_ref().map(|election| election.identity().to_owned());
    let (events, event_publisher) =
        Events::start(client.clone(), Reporter { controller: "node-csr-approver".into(), instance }, cfg.events);
    let cluster = KubeCluster::new(client.clone(), nodes.clone(), machines.clone(), ledger, skipped.clone(), read_node)
        .with_kubelet_dial(kubelet_dial)
        .watching_nodes();
    let ctx = Arc::new(Context {
        api: Api::all(client.clone()),
        policy,
        resolver,
        cluster,
        nodes,
        leadership,
        events,
        metrics,
        skipped,
        dry_run: cfg.dry_run,
    });
    if let Some(rules) = &ctx.policy.machine {
        let metrics = ctx.metrics.clone();
        let report = move |pending, limit| metrics.set_pending_brake(pending, limit);
        tokio::spawn(ctx.cluster.clone().report_pending_brake(rules.max_pending_delta, report));
    }
    let (stop_controller, controller_stopped) = oneshot::channel::<()>();
    let stopped = async move {
        let _ = controller_stopped.await;
    }
    .shared();
    // The periodic audit, when on: started once the CSR watch synced, stopped as soon as the
    // controller is told to stop (a scan in flight dropped), ended with this function.
    let (audit_synced, audit_start) = oneshot::channel::<()>();
    let _audit = audit.clone().map(|schedule| {
        let (ctx, stopped) = (ctx.clone(), stopped.clone());
        AbortOnDropHandle::new(tokio::spawn(async move {
            if audit_start.await.is_ok() {
                tokio::select! {
                    () = periodic::run(ctx, schedule) => {}
                    () = stopped => {}
                }
            }
        }))
    });
    let on_synced = move || {
        tracing::info!("CSR watch synced: ready");
        readiness.set_ready();
        let _ = audit_synced.send(());
    };
    let schedule = controller::Schedule {
        concurrency: cfg.concurrency,
        resync_period: cfg.resync_period,
        request_room: RequestRoom {
            csrs_below: usize::try_from(cfg.cache_requests_below).unwrap_or(usize::MAX),
            bytes: usize::try_from(cfg.cache_request_bytes).unwrap_or(usize::MAX),
        },
        writable,
        shutdown: stopped.boxed(),
    };
    let controller = controller::run(ctx, memory, schedule, csrs, machines, on_synced);
    tracing::info!(
        concurrency = cfg.concurrency,
        dry_run = cfg.dry_run,
        resync_period = %humantime::format_duration(cfg.resync_period),
        cache_requests_below = cfg.cache_requests_below,
        cache_request_bytes = cfg.cache_request_bytes,
        leader_election = lease.is_some(),
        audit_period = %audit.map(|audit| humantime::format_duration(audit.period).to_string()).unwrap_or_else(|| "off".into()),
        "started"
    );

    let outcome = supervise(controller, stop_controller, signals, &mut election, cfg.drain_timeout).await;
    if let Some(election) = election {
        election.release_logged().await;
    }
    // The controller is done and the Lease is free: close the event queue and publish what it
    // still holds; the drain returns as soon as that is done.
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
        error = leader::failed(election) => Err(RunError::Leader(error)),
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

/// The periodic audit runs beside the reconciles, on what they share.
impl<R: Resolver + 'static, C: ClusterView + 'static> Host for Context<R, C> {
    type Resolver = R;
    type Cluster = C;

    fn policy(&self) -> &PolicyConfig {
        &self.policy
    }

    fn resolver(&self) -> &R {
        &self.resolver
    }

    fn cluster(&self) -> &C {
        &self.cluster
    }

    fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    fn events(&self) -> &Events {
        &self.events
    }

    fn metrics(&self) -> &AuditMetrics {
        self.metrics.audit()
    }

    fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    fn nodes(&self) -> &NodeIndex {
        &self.nodes
    }

    fn client(&self) -> kube::Client {
        self.api.clone().into_client()
    }
}
