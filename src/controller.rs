//! The controller: watch CSRs -> evaluate -> write the approval condition -> record.
//!
//! Writes go through the `approval` subresource with the cached resourceVersion as a precondition,
//! so a replica working from a stale view gets a conflict, never a second decision. Only the leader
//! evaluates and writes; standbys keep their watch warm and reconcile every CSR when they gain the
//! Lease. [`step`] decides what a reconcile does; this module carries it out.

mod approval;
mod events;
mod memory;
mod step;
mod trim;

pub use approval::write_condition;
pub(crate) use events::Events;
pub(crate) use memory::Memory;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource, ResourceExt};

use crate::leader::Leadership;
use crate::machines::MachineCache;
use crate::metrics::{Metrics, WriteResult};
use crate::policy::{
    ClusterView, Decision, KUBELET_SERVING_SIGNER, NODE_USER_PREFIX, PolicyConfig, Reason, Resolver, Submission,
    evaluate,
};
use memory::CsrKey;
use step::{Note, Step};

const ERROR_BACKOFF: Duration = Duration::from_secs(5);
const CONFLICT_REQUEUE: Duration = Duration::from_millis(200);
const SYNC_POLL: Duration = Duration::from_millis(100);
/// Machine and Node changes re-trigger waiting CSRs at most this often.
const RETRIGGER_PERIOD: Duration = Duration::from_secs(1);

/// A reconcile step that could not finish; the CSR is tried again later.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControllerError {
    /// The approval write failed for a reason other than a conflict.
    #[error("writing the decision on {name}: {source}")]
    Write {
        /// The CSR.
        name: String,
        /// The API error.
        source: kube::Error,
    },
}

/// Everything a reconcile needs, shared by all of them.
pub(crate) struct Context<R, C> {
    pub api: Api<CertificateSigningRequest>,
    pub policy: PolicyConfig,
    pub resolver: R,
    pub cluster: C,
    /// Whether this replica may write.
    pub leadership: Leadership,
    pub events: Events,
    pub metrics: Metrics,
    /// Evaluate and record, but write nothing.
    pub dry_run: bool,
    /// Per-CSR memory: retry attempts and the decisions already announced.
    pub memory: Memory,
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first. In machine mode
/// `machines` re-triggers the CSRs waiting on a Machine or Node whenever one changes.
pub(crate) async fn run<R, C>(
    ctx: Arc<Context<R, C>>,
    concurrency: u16,
    machines: Option<MachineCache>,
    leader_gained: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    on_synced: impl FnOnce() + Send + 'static,
) where
    R: Resolver + 'static,
    C: ClusterView + 'static,
{
    let client_csrs = ctx.policy.machine.as_ref().is_some_and(|m| m.client_approval);
    // A streaming list (WatchList, on by default since Kubernetes 1.34) sends what exists one
    // object at a time, where a paged list holds up to 500 objects at once: a few hostile CSRs at
    // the apiserver's maximum object size would be hundreds of MiB in one page.
    let config = watcher::Config::default().streaming_lists();
    let config = if client_csrs { config } else { config.fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}")) };
    // The cache keeps only what decisions and the write need (trim::trim): no labels, annotations
    // or managedFields, no PKCS#10 request once a CSR is decided. Every watch event carries the
    // whole object, so nothing is lost.
    let (store, writer) = reflector::store();
    let csrs = reflector::reflector(writer, watcher(ctx.api.clone(), config).modify(trim::trim));
    let controller = Controller::for_stream(csrs.applied_objects(), store);
    let ready = controller.store();
    let cache = machines.clone();
    tokio::spawn(async move {
        // The store wakes only one of the tasks waiting for it (the controller's own runner), so
        // ask again on a short period rather than wait for a wake-up that may never come.
        loop {
            match tokio::time::timeout(SYNC_POLL, ready.wait_until_ready()).await {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return,
                Err(_) => continue,
            }
        }
        if let Some(cache) = cache {
            cache.synced().await;
        }
        on_synced();
    });
    let waiting = match &machines {
        Some(cache) => {
            cache.attach_csrs(controller.store());
            waiting_on_cluster(cache.changes(), ctx.clone()).boxed()
        }
        None => futures::stream::empty().boxed(),
    };
    let forget = ctx.clone();
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_all_on(futures::stream::select(leader_gained, waiting))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(object)) = &result {
                forget.forget(&object.name);
            }
            futures::future::ready(())
        })
        .await;
}

/// Yields after a Machine or Node changed while some CSR waits on the cluster, at most once per
/// [`RETRIGGER_PERIOD`] (changes in between are coalesced).
fn waiting_on_cluster<R, C>(
    changes: tokio::sync::watch::Receiver<u64>,
    ctx: Arc<Context<R, C>>,
) -> impl Stream<Item = ()> + Send
where
    R: Send + Sync + 'static,
    C: Send + Sync + 'static,
{
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        tokio::time::sleep(RETRIGGER_PERIOD).await;
        changes.borrow_and_update();
        Some(((), changes))
    })
    .filter(move |()| futures::future::ready(ctx.memory.anyone_waiting_on_cluster()))
}

/// Evaluates one CSR (only while leading, or under `--dry-run`) and carries out its [`Step`].
async fn reconcile<R: Resolver, C: ClusterView>(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context<R, C>>,
) -> Result<Action, ControllerError> {
    let name = csr.name_any();
    if !step::evaluates(ctx.leadership.is_leader(), ctx.dry_run) {
        tracing::debug!(csr = %name, "not the leader: not evaluated");
        return Ok(Action::await_change());
    }
    let sub = Submission::from(csr.as_ref());
    let started = Instant::now();
    let evaluation = evaluate(&sub, &ctx.policy, &ctx.resolver, &ctx.cluster, Timestamp::now()).await;
    ctx.metrics.observe_evaluation(started.elapsed());
    let decision = evaluation.decision;
    let node = sub.username.strip_prefix(NODE_USER_PREFIX).unwrap_or_default();
    let key = CsrKey { name: &name, uid: csr.meta().uid.as_deref().unwrap_or_default() };
    let announced = ctx.memory.announced(key, decision.kind, decision.reason);
    match step::step(decision.kind, ctx.leadership.is_leader(), ctx.dry_run, announced) {
        Step::Forget => {
            tracing::debug!(csr = %name, reason = %decision.reason, "ignored");
            ctx.forget(&name);
            Ok(Action::await_change())
        }
        Step::Standby => {
            tracing::debug!(csr = %name, decision = decision.kind.as_str(), "not the leader: waiting");
            Ok(Action::await_change())
        }
        Step::Write => ctx.write(&csr, &decision, node).await,
        Step::Wait(note) => {
            if let Some(note) = note {
                ctx.metrics.record_decision(decision.kind, decision.reason);
                ctx.announce(&csr, key, &decision, node, note).await;
            }
            Ok(Action::await_change())
        }
        Step::Retry(note) => {
            let delay = ctx.memory.next_retry(key, waits_on_cluster(decision.reason));
            ctx.metrics.set_waiting_retry(ctx.memory.waiting());
            if let Some(note) = note {
                ctx.announce(&csr, key, &decision, node, note).await;
            }
            ctx.metrics.record_decision(decision.kind, decision.reason);
            Ok(Action::requeue(delay))
        }
    }
}

fn error_policy<R, C>(
    _csr: Arc<CertificateSigningRequest>,
    error: &ControllerError,
    _ctx: Arc<Context<R, C>>,
) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(ERROR_BACKOFF)
}

/// Reasons a Machine or Node change can resolve.
fn waits_on_cluster(reason: Reason) -> bool {
    matches!(reason, Reason::MachineNotFound | Reason::NodeNotFound | Reason::TooManyPending)
}

/// One log line per decision: `message` says what was done (`note`), `detail` why.
fn log_decision(name: &str, node: &str, decision: &Decision, note: &str) {
    tracing::info!(
        csr = %name,
        node = %node,
        decision = decision.kind.as_str(),
        reason = %decision.reason,
        detail = %decision.message,
        "{note}"
    );
}

impl<R, C> Context<R, C> {
    /// Writes the condition through the approval subresource, preconditioned on the cached
    /// resourceVersion.
    async fn write(
        &self,
        csr: &CertificateSigningRequest,
        decision: &Decision,
        node: &str,
    ) -> Result<Action, ControllerError> {
        let name = csr.name_any();
        match write_condition(&self.api, csr, decision).await {
            Ok(_) => {
                self.metrics.record_write(WriteResult::Success);
                self.metrics.record_decision(decision.kind, decision.reason);
                log_decision(&name, node, decision, "written");
                self.events.publish(csr.object_ref(&()), decision, "").await;
                self.forget(&name);
                Ok(Action::await_change())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.metrics.record_write(WriteResult::Conflict);
                tracing::debug!(csr = %name, "conflict: re-reading and deciding again");
                Ok(Action::requeue(CONFLICT_REQUEUE))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.metrics.record_write(WriteResult::NotFound);
                tracing::debug!(csr = %name, "gone before the decision was written: forgotten");
                self.forget(&name);
                Ok(Action::await_change())
            }
            Err(source) => {
                self.metrics.record_write(WriteResult::Error);
                Err(ControllerError::Write { name, source })
            }
        }
    }

    /// Logs and publishes a decision that is not written, and remembers that it was told.
    async fn announce(
        &self,
        csr: &CertificateSigningRequest,
        key: CsrKey<'_>,
        decision: &Decision,
        node: &str,
        note: Note,
    ) {
        self.memory.mark_announced(key, decision.kind, decision.reason);
        log_decision(key.name, node, decision, note.log);
        self.events.publish(csr.object_ref(&()), decision, note.event_prefix).await;
    }

    /// Drops what was remembered about a CSR that is decided or gone.
    fn forget(&self, name: &str) {
        if self.memory.forget(name) {
            self.metrics.set_waiting_retry(self.memory.waiting());
        }
    }
}
