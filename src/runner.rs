//! The `run` command: connects to the cluster, starts leader election, the admin endpoints and the
//! controller, and shuts all of it down gracefully on SIGTERM or SIGINT.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::events::Reporter;
use kube::{Api, Client};
use tokio::sync::watch;

use crate::admin::{self, Readiness};
use crate::cluster::KubeCluster;
use crate::config::{DnsConfig, MachineSource, PolicyConfig, RunConfig};
use crate::controller::{self, Context, Events};
use crate::dns::HickoryResolver;
use crate::leader::{self, Leadership};
use crate::machines::MachineCache;
use crate::metrics::{MeteredResolver, Metrics};

/// The controller could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable cluster configuration.
    #[error("cluster configuration: {0}")]
    Kubeconfig(String),
    /// The DNS resolver could not be built.
    #[error("DNS resolver: {0}")]
    Dns(#[from] crate::dns::DnsError),
    /// An admin endpoint could not listen or serve.
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
}

/// Builds a client from `--kubeconfig`, else in-cluster config, else the default kubeconfig.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, RunError> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| RunError::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| RunError::Kubeconfig(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| RunError::Kubeconfig(e.to_string()))
}

/// Runs the controller until SIGTERM/SIGINT; returns once in-flight writes finished and the Lease
/// was released.
pub async fn run(
    policy: PolicyConfig,
    dns: DnsConfig,
    cfg: RunConfig,
    machine: Option<MachineSource>,
) -> Result<(), RunError> {
    let client = client(cfg.kubeconfig.as_deref()).await?;
    let machines = match &machine {
        Some(source) => Some(machine_cache(&client, source).await?),
        None => None,
    };
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    };

    let health = admin::bind(&cfg.health_address).await?;
    let mut servers = vec![tokio::spawn(admin::serve_health(health, readiness.clone(), stopped()))];
    if let Some(address) = &cfg.metrics_address {
        let listener = admin::bind(address).await?;
        servers.push(tokio::spawn(admin::serve_metrics(listener, metrics.clone(), stopped())));
    }

    let (leadership, election) = match &cfg.leader {
        Some(leader) => {
            let (leadership, election) = leader::start(client.clone(), leader).await?;
            (leadership, Some(election))
        }
        None => (Leadership::always(), None),
    };
    metrics.set_leader(leadership.is_leader());
    let leader_gained = leader_gained(&leadership, metrics.clone());

    let resolver = MeteredResolver::new(HickoryResolver::new(dns.servers.as_deref(), dns.timeout)?, metrics.clone());
    let instance = cfg.leader.as_ref().map(|l| l.identity.clone());
    let (events, event_publisher) =
        Events::start(client.clone(), Reporter { controller: "node-csr-approver".into(), instance });
    let ctx = Arc::new(Context {
        api: Api::all(client.clone()),
        policy,
        resolver,
        cluster: KubeCluster::new(client.clone(), machines.clone()),
        leadership,
        events,
        metrics,
        dry_run: cfg.dry_run,
        memory: Mutex::new(Default::default()),
    });
    let synced = readiness.clone();
    if let (Some(cache), Some(rules)) = (&machines, &ctx.policy.machine) {
        tokio::spawn(report_pending_brake(cache.clone(), rules.max_pending_delta, ctx.metrics.clone()));
    }
    let controller = controller::run(ctx, cfg.concurrency, machines, leader_gained, stopped(), move || {
        tracing::info!("CSR watch synced: ready");
        synced.set_ready();
    });
    tracing::info!(
        concurrency = cfg.concurrency,
        dry_run = cfg.dry_run,
        leader_election = cfg.leader.is_some(),
        "started"
    );

    let mut election = election;
    let outcome = tokio::select! {
        _ = controller => Ok(()),
        signal = shutdown_signal() => {
            tracing::info!(signal, "shutting down: finishing in-flight work");
            Ok(())
        }
        error = election_failed(&mut election) => Err(RunError::Leader(error)),
    };
    let _ = stop_tx.send(true);
    if let Some(election) = election {
        if let Err(error) = election.release().await {
            tracing::warn!(%error, "releasing the Lease");
        } else {
            tracing::info!("Lease released");
        }
    }
    // The controller (and with it every handle on the event queue) is gone and the Lease is free:
    // publish what is still queued.
    event_publisher.drain().await;
    for server in servers {
        let _ = server.await;
    }
    outcome
}

/// Starts machine mode's caches, reading Machines from `--machine-kubeconfig` when given.
pub async fn machine_cache(client: &Client, source: &MachineSource) -> Result<MachineCache, RunError> {
    let machine_client = match &source.kubeconfig {
        Some(path) => self::client(Some(path)).await?,
        None => client.clone(),
    };
    Ok(MachineCache::start(client.clone(), machine_client, source).await)
}

/// Keeps the pending-brake gauges current.
async fn report_pending_brake(cache: MachineCache, delta: u32, metrics: Metrics) {
    loop {
        if let Ok(load) = cache.load() {
            metrics.set_pending_brake(load.pending, load.machines.max(load.nodes).saturating_add(delta as usize));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// A stream that yields each time this replica gains the Lease, and keeps the leader gauge true.
fn leader_gained(leadership: &Leadership, metrics: Metrics) -> futures::stream::BoxStream<'static, ()> {
    let Some(changes) = leadership.changes() else { return futures::stream::empty().boxed() };
    stream_of_changes(changes)
        .filter_map(move |leader| {
            metrics.set_leader(leader);
            futures::future::ready(leader.then_some(()))
        })
        .boxed()
}

fn stream_of_changes(changes: watch::Receiver<bool>) -> impl futures::Stream<Item = bool> + Send {
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        let now = *changes.borrow_and_update();
        Some((now, changes))
    })
}

async fn election_failed(election: &mut Option<leader::Election>) -> leader::LeaderError {
    match election {
        Some(election) => election.failed().await,
        None => std::future::pending().await,
    }
}

/// Resolves on SIGTERM or SIGINT with the signal's name.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
