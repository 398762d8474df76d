//! Lease-based leader election that gates writes.
//!
//! kube-lease-manager acquires, renews and releases a standard `coordination.k8s.io/v1` Lease. On
//! top of it, [`Leadership::is_leader`] is fenced by the Lease itself: a replica counts as leader only while
//! the Lease it last saw names it as holder with a `renewTime` younger than the renew deadline. A
//! holder that cannot renew (apiserver unreachable, process stalled) therefore stops writing before
//! its Lease can expire and another replica can take over; and each write may run only until that
//! fence would close ([`Leadership::write_timeout`], in `fence.rs`).
//!
//! [`Leadership::writable`] tells the controller each time this replica becomes able to write
//! again: it took the Lease, or its fence reopened after a renewal that came late (a stalled
//! process, a slow apiserver). The controller reconciles every undecided CSR then, because the
//! CSRs that arrived while it could not write were left alone.
//!
//! A replica the apiserver will not let touch its Lease (401 or 403) cannot take part in the
//! election: the election task then ends with [`LeaderError`], and the caller stops.

mod fence;
mod retry;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::task::JoinHandle;

use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kube_watch;
use crate::kubernetes::object_fields::{Meta, ObjectKind, resource_of};
pub use fence::Leadership;
use fence::WriteFence;

/// Leader-election settings, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Lease validity without renewal.
    pub lease_duration: Duration,
    /// The holder stops writing when it could not renew for this long.
    pub renew_deadline: Duration,
    /// Interval between renewals and acquisition attempts.
    pub retry_period: Duration,
}

/// Leader election could not start or its task ended.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease manager could not be built.
    #[error("leader election: {0}")]
    Lease(#[from] LeaseManagerError),
    /// The election task stopped by itself while the controller was running.
    #[error("leader election task ended: the election stopped")]
    Stopped,
    /// The election task failed while the controller was running.
    #[error("leader election task ended: {0}")]
    Failed(#[source] LeaseManagerError),
    /// The election task panicked or was cancelled.
    #[error("leader election task ended: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// True for errors that retrying cannot fix: this replica may not read or update the Lease, or
/// the Lease manager's state is inconsistent.
fn is_fatal(error: &LeaseManagerError) -> bool {
    match error {
        LeaseManagerError::KubeError(kube::Error::Api(status)) => matches!(status.code, 401 | 403),
        LeaseManagerError::InconsistentState(_) => true,
        _ => false,
    }
}

/// The running election: hand it to [`Election::release`] on shutdown.
#[derive(Debug)]
pub struct Election {
    /// This replica's holder identity.
    identity: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// `None` once [`Election::failed`] has seen it end.
    task: Option<JoinHandle<Result<(), LeaseManagerError>>>,
    observer: JoinHandle<()>,
}

/// The one Lease claim of `run`: contends for the Lease of `cfg` (`--leader-election`); without
/// it this replica always writes. The Lease's watch reports what it cannot decode to `skipped`.
pub async fn claim(
    client: Client,
    cfg: Option<&LeaderConfig>,
    skipped: Skipped,
) -> Result<(Leadership, Option<Election>), LeaderError> {
    match cfg {
        Some(cfg) => {
            let (leadership, election) = start(client, cfg, skipped).await?;
            Ok((leadership, Some(election)))
        }
        None => Ok((Leadership::always(), None)),
    }
}

/// Resolves when the `election` (if any) ends while the controller runs: see [`Election::failed`].
pub async fn failed(election: &mut Option<Election>) -> LeaderError {
    match election {
        Some(election) => election.failed().await,
        None => std::future::pending().await,
    }
}

/// Starts contending for the Lease of `cfg` as [`holder_identity`].
async fn start(client: Client, cfg: &LeaderConfig, skipped: Skipped) -> Result<(Leadership, Election), LeaderError> {
    let identity = holder_identity();
    let duration = cfg.lease_duration.as_secs();
    let grace = duration.saturating_sub(cfg.retry_period.as_secs().max(1)).max(1);
    let lease = LeaseSpec {
        client: client.clone(),
        name: cfg.lease_name.clone(),
        namespace: cfg.namespace.clone(),
        params: LeaseParams::new(&identity, duration, grace),
    };
    let manager = lease.manager().await?;
    let fence = Arc::new(WriteFence::new(identity.clone(), cfg.renew_deadline));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let periods = (cfg.retry_period, cfg.lease_duration);
    let task = tokio::spawn(contend(lease, manager, fence.clone(), stopped, periods));
    let leases = Api::namespaced(client, &cfg.namespace);
    let observer = tokio::spawn(observe(leases, cfg.lease_name.clone(), fence.clone(), skipped));
    let election = Election { identity, stop: Some(stop), task: Some(task), observer };
    Ok((Leadership::fenced(fence), election))
}

/// This replica's holder identity: `POD_NAME` when set, else the host name, plus a random suffix
/// so two processes never share one.
fn holder_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| "node-csr-approver".into());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// What a [`LeaseManager`] is built from.
struct LeaseSpec {
    client: Client,
    name: String,
    namespace: String,
    params: LeaseParams,
}

impl LeaseSpec {
    async fn manager(&self) -> Result<LeaseManager, LeaseManagerError> {
        let mode = LeaseCreateMode::AutoCreate;
        LeaseManager::new(self.client.clone(), &self.name, &self.namespace, self.params.clone(), mode).await
    }
}

/// Acquires and renews the Lease until stopped, then releases it. A Lease freed by its holder is
/// contended for at once: a fresh manager reads it instead of sleeping out the old holder's term.
/// Transient errors are retried after the retry period, or after the wait the apiserver named
/// when longer, within the Lease's duration ([`retry::wait_after`], `periods` holding both); a
/// fatal one ([`is_fatal`]) ends the task.
async fn contend(
    lease: LeaseSpec,
    mut manager: LeaseManager,
    fence: Arc<WriteFence>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
    (retry_period, lease_duration): (Duration, Duration),
) -> Result<(), LeaseManagerError> {
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            changed = manager.changed() => match changed {
                Ok(holding) => {
                    fence.holding.store(holding, Ordering::Release);
                    fence.changes.send_replace(holding);
                    tracing::info!(leader = holding, identity = %fence.identity, "leadership changed");
                }
                Err(error) if is_fatal(&error) => {
                    fence.holding.store(false, Ordering::Release);
                    fence.changes.send_replace(false);
                    return Err(error);
                }
                Err(error) => {
                    let wait = retry::wait_after(&error, retry_period, lease_duration, &fence, SystemTime::now());
                    tracing::warn!(%error, wait_seconds = wait.as_secs_f64(), "renewing or acquiring the Lease; retrying");
                    tokio::time::sleep(wait).await;
                }
            },
            () = fence.released.notified(), if !fence.holding.load(Ordering::Acquire) => {
                tracing::debug!("the Lease was released: contending now");
                match lease.manager().await {
                    Ok(fresh) => manager = fresh,
                    Err(error) => tracing::warn!(%error, "re-reading the released Lease"),
                }
            }
        }
    }
    fence.holding.store(false, Ordering::Release);
    manager.release().await
}

/// The Lease as the fence reads it: its holder and last renewal.
#[derive(Debug, Clone, serde::Deserialize)]
struct LeaseObject {
    metadata: Meta,
    #[serde(default)]
    spec: LeaseFields,
}

resource_of!(LeaseObject, Lease);

/// The fields of a Lease's spec the fence reads.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseFields {
    holder_identity: Option<String>,
    renew_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
}

/// Follows the Lease: records its `renewTime` whenever it names this replica as holder, and
/// wakes [`contend`] when it has no holder. A version of the Lease that cannot be decoded is
/// reported to `skipped` and changes nothing: the fence closes by itself when no renewal it can
/// read comes within the renew deadline.
async fn observe(api: Api<Decoded<LeaseObject>>, name: String, fence: Arc<WriteFence>, skipped: Skipped) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let leases = kube_watch::stream(api, config);
    let mut leases = std::pin::pin!(leases);
    while let Some(event) = leases.next().await {
        let lease = match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                let Some(lease) = skipped.keep(ObjectKind::Lease, lease) else { continue };
                lease
            }
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(%error, "watching the leader Lease");
                continue;
            }
        };
        let spec = lease.spec;
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if holder.is_empty() {
            fence.released.notify_one();
        }
        let renewed = spec.renew_time.filter(|_| holder == fence.identity).map(|t| SystemTime::from(t.0));
        *fence.renewed() = renewed;
    }
}

impl Election {
    /// This replica's holder identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Resolves with an error if the election task ends while the controller runs; never
    /// resolves again afterwards.
    pub async fn failed(&mut self) -> LeaderError {
        let Some(task) = self.task.as_mut() else { return std::future::pending().await };
        let outcome = task.await;
        self.task = None;
        match outcome {
            Ok(Ok(())) => LeaderError::Stopped,
            Ok(Err(error)) => LeaderError::Failed(error),
            Err(join) => LeaderError::Task(join),
        }
    }

    /// [`Election::release`], logging how it went.
    pub async fn release_logged(self) {
        match self.release().await {
            Ok(()) => tracing::info!("Lease released"),
            Err(error) => tracing::warn!(%error, "releasing the Lease"),
        }
    }

    /// Stops contending and releases the Lease if held, so another replica takes over at once.
    /// After [`Election::failed`] resolved there is nothing left to release.
    pub async fn release(mut self) -> Result<(), LeaderError> {
        self.observer.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            None => Ok(()),
            Some(task) => match task.await {
                Ok(result) => result.map_err(LeaderError::Lease),
                Err(join) => Err(LeaderError::Task(join)),
            },
        }
    }
}
