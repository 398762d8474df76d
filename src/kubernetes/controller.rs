//! The controller: watch CSRs -> evaluate -> write the approval condition -> record.
//!
//! Writes go through the `approval` subresource with the cached resourceVersion as a precondition,
//! so a replica working from a stale view gets a conflict, never a second decision. Only the leader
//! evaluates and writes. Reconciliation is level-triggered ([`triggers`]): besides live watch
//! events, every undecided CSR is reconciled after each list of the watch, whenever this replica
//! becomes able to write, and every resync period. [`step`] decides what a reconcile does; this
//! module carries it out.

mod approval;
mod dispatch;
mod events;
mod oldest;
mod reconcile_state;
mod step;
mod triggers;
mod work_queue;

pub use approval::{WRITE_TIMEOUT, WriteError, write_condition};
pub(crate) use events::Events;
pub(crate) use reconcile_state::ReconcileState;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use crate::display::short_name;
use crate::kubernetes::csr_cache::{Cache, CacheWriter};
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::kube_watch;
use crate::kubernetes::leader::Leadership;
use crate::kubernetes::machines::MachineCache;
use crate::metrics::{Metrics, WriteResult};
use crate::policy::{
    ClusterView, Decision, DecisionKind, KUBELET_SERVING_SIGNER, NODE_USER_PREFIX, PolicyConfig, Resolver, evaluate,
};
use dispatch::{Trigger, Work, dispatch};
use reconcile_state::CsrKey;
use step::{Announcement, Step};

/// Machine and Node changes re-trigger waiting CSRs at most this often.
const RETRIGGER_PERIOD: Duration = Duration::from_secs(1);

/// A reconcile step that could not finish; the CSR is tried again after a backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControllerError {
    /// The approval write failed for a reason other than a conflict or a missing CSR.
    #[error("writing the decision on {name}: {source}")]
    Write {
        /// The CSR's name as logged: escaped, and cut when long.
        name: String,
        /// Why.
        source: WriteError,
    },
}

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Nothing until the CSR changes or a pass comes.
    AwaitChange,
    /// Reconcile it again after this long.
    RetryAfter(Duration),
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
    /// What each CSR's reconciles have done: retry attempts, the decisions already announced.
    pub reconciles: ReconcileState,
    /// Machine mode's CSR ledger: client CSRs of one node name are decided one at a time, and an
    /// approval counts there as soon as it is written.
    pub ledger: Option<CsrLedger>,
}

/// How the controller is run: concurrency, the pass triggers it does not make itself, and when to
/// stop.
pub(crate) struct Schedule<W, S> {
    /// Bound on concurrent reconciles, taken round-robin between requesters.
    pub concurrency: u16,
    /// Every undecided CSR is reconciled again at this interval.
    pub resync_period: Duration,
    /// Yields whenever this replica becomes able to write.
    pub writable: W,
    /// Resolves when the controller should stop taking work.
    pub shutdown: S,
}

/// Runs the controller until `schedule.shutdown` resolves; in-flight reconciles finish first. The
/// CSR watch fills `csrs`, the cache whose reader the runner also gave the cluster view. In machine
/// mode `machines` re-triggers the CSRs waiting on a Machine or Node whenever one changes.
/// `on_synced` runs once the first list of the CSR watch (and the machine caches) are complete.
pub(crate) async fn run<R, C, W, S>(
    ctx: Arc<Context<R, C>>,
    schedule: Schedule<W, S>,
    mut csrs: CacheWriter<CsrObject>,
    machines: Option<MachineCache>,
    on_synced: impl FnOnce() + Send + 'static,
) where
    R: Resolver + 'static,
    C: ClusterView + 'static,
    W: Stream<Item = ()> + Send + 'static,
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let client_csrs = ctx.policy.machine.as_ref().is_some_and(|m| m.client_approval);
    // A streaming list (WatchList, on by default since Kubernetes 1.34) sends what exists one
    // object at a time, where a paged list holds up to 500 objects at once: a few hostile CSRs at
    // the apiserver's maximum object size would be hundreds of MiB in one page.
    let config = watcher::Config::default().streaming_lists();
    let config = if client_csrs { config } else { config.fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}")) };
    // The cache keeps only what decisions and the write need (`CsrObject`): no labels,
    // annotations or managedFields, no PKCS#10 request once a CSR is decided. Every watch event
    // carries the whole object, so nothing is lost.
    let store = csrs.reader();
    let watch = kube_watch::stream(ctx.api.clone(), config).map_ok(move |event| csrs.apply(event));
    let relisted = Arc::new(Notify::new());
    let (synced, first_list) = tokio::sync::oneshot::channel();
    let live = triggers::live_triggers(watch, relisted.clone(), synced);
    let cache = machines.clone();
    tokio::spawn(async move {
        if first_list.await.is_err() {
            return;
        }
        if let Some(cache) = cache {
            cache.synced().await;
        }
        on_synced();
    });
    // It holds the context, and with it a handle on the event queue: it ends with the controller.
    let _report = AbortOnDropHandle::new(tokio::spawn(oldest::report(ctx.clone(), store.clone(), client_csrs)));
    let passes = triggers::passes(relisted, schedule.writable, schedule.resync_period);
    let undecided = triggers::undecided_in_each_pass(passes, store.clone(), ctx.metrics.clone());
    let waiting = match &machines {
        Some(cache) => waiting_on_cluster(cache.changes(), ctx.clone(), store.clone()).boxed(),
        None => futures::stream::empty().boxed(),
    };
    let forget = ctx.clone();
    let work = Work {
        concurrency: usize::from(schedule.concurrency),
        reconcile: move |name: Arc<str>| reconcile_named(name, ctx.clone(), store.clone()),
        forget: move |name: &str| forget.forget(name),
    };
    let triggers = futures::stream::select(live, futures::stream::select(undecided, waiting));
    dispatch(triggers, work, schedule.shutdown).await;
}

/// Yields after a Machine or Node changed while some CSR waits on the cluster, at most once per
/// [`RETRIGGER_PERIOD`] (changes in between are coalesced).
fn waiting_on_cluster<R, C>(
    changes: tokio::sync::watch::Receiver<u64>,
    ctx: Arc<Context<R, C>>,
    store: Cache<CsrObject>,
) -> impl Stream<Item = Trigger> + Send
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
    .filter(move |()| futures::future::ready(ctx.reconciles.anyone_waiting_on_cluster()))
    .flat_map(move |()| futures::stream::iter(triggers::undecided(&store)))
}

/// Reconciles the CSR named `name` as the cache holds it now; answers when to try again, if ever.
/// A CSR gone from the cache, or decided (the watch event of every decision written), is only
/// forgotten.
async fn reconcile_named<R: Resolver, C: ClusterView>(
    name: Arc<str>,
    ctx: Arc<Context<R, C>>,
    store: Cache<CsrObject>,
) -> Option<Duration> {
    let latest = store.get(&name).filter(|csr| !csr.is_decided());
    let Some(csr) = latest else {
        ctx.forget(&name);
        return None;
    };
    let next = match Box::pin(reconcile(csr.clone(), ctx.clone())).await {
        Ok(next) => next,
        Err(error) => Next::RetryAfter(error_policy(&csr, &error, &ctx)),
    };
    match next {
        Next::AwaitChange => None,
        Next::RetryAfter(delay) => Some(delay),
    }
}

/// Evaluates one CSR (only while leading, or under `--dry-run`) and carries out its [`Step`].
async fn reconcile<R: Resolver, C: ClusterView>(
    csr: Arc<CsrObject>,
    ctx: Arc<Context<R, C>>,
) -> Result<Next, ControllerError> {
    let name = &csr.name;
    let logged = short_name(name);
    if !step::evaluates(ctx.leadership.is_leader(), ctx.dry_run) {
        ctx.leadership.skipped();
        tracing::debug!(csr = %logged, "not the leader: not evaluated");
        return Ok(Next::AwaitChange);
    }
    let key = CsrKey::of(&csr);
    if csr.name_cut {
        // No request can name it, so no decision can be written: told once, never evaluated, and
        // not counted as the oldest undecided CSR.
        if ctx.reconciles.mark_unaddressable(key) {
            ctx.metrics.record_unaddressable_csr();
            tracing::warn!(csr = %logged, "cannot decide this CSR: its name is longer than 253 bytes, so only a bounded stand-in of it is kept, which no request can name; left alone");
        }
        ctx.reconciles.excuse(key);
        return Ok(Next::AwaitChange);
    }
    if ctx.reconciles.written_at(key, csr.resource_version.as_deref()) {
        // A pass or a retry came before the watch brought our own write back: this is the
        // version the decision was written on, so the cache is behind, not the CSR undecided.
        tracing::debug!(csr = %logged, "decision written on this version: waiting for the watch");
        return Ok(Next::AwaitChange);
    }
    // Held until the decision is written: no other client CSR for the same node name is decided
    // meanwhile, and the ledger counts this approval before the turn passes on.
    let _turn = match &ctx.ledger {
        Some(ledger) => ledger.client_turn(&csr).await,
        None => None,
    };
    let sub = csr.submission();
    let started = Instant::now();
    let evaluation = evaluate(&sub, &ctx.policy, &ctx.resolver, &ctx.cluster, Timestamp::now()).await;
    ctx.metrics.observe_evaluation(started.elapsed());
    let decision = evaluation.decision;
    let node = sub.username.strip_prefix(NODE_USER_PREFIX).unwrap_or_default();
    let announced = ctx.reconciles.announced(key, decision.kind, decision.reason);
    match step::step_for(decision.kind, ctx.leadership.is_leader(), ctx.dry_run, announced) {
        Step::Forget => {
            tracing::debug!(csr = %logged, reason = %decision.reason, "ignored");
            if csr.is_decided() {
                ctx.forget(name);
            } else {
                ctx.reconciles.excuse(key);
            }
            Ok(Next::AwaitChange)
        }
        Step::Standby => {
            ctx.leadership.skipped();
            tracing::debug!(csr = %logged, decision = decision.kind.as_str(), "not the leader: waiting");
            Ok(Next::AwaitChange)
        }
        Step::Write => ctx.write(&csr, key, &decision, node).await,
        Step::Wait(note) => {
            ctx.reconciles.excuse(key);
            if let Some(note) = note {
                ctx.metrics.record_decision(decision.kind, decision.reason);
                ctx.announce(&csr, key, &decision, node, note).await;
            }
            Ok(Next::AwaitChange)
        }
        Step::Retry(note) => {
            let delay = ctx.reconciles.next_retry(key, decision.reason.resolved_by_cluster_change());
            ctx.metrics.set_waiting_retry(ctx.reconciles.waiting());
            if let Some(note) = note {
                ctx.announce(&csr, key, &decision, node, note).await;
            }
            ctx.metrics.record_decision(decision.kind, decision.reason);
            Ok(Next::RetryAfter(delay))
        }
    }
}

/// A failed write is tried again after its own backoff (0.5 s doubling to 8 s), until the CSR is
/// decided or gone.
fn error_policy<R, C>(csr: &CsrObject, error: &ControllerError, ctx: &Context<R, C>) -> Duration {
    let delay = ctx.reconciles.next_write_retry(CsrKey::of(csr));
    ctx.metrics.set_waiting_retry(ctx.reconciles.waiting());
    tracing::warn!(%error, retry_in = ?delay, "reconcile failed; retrying");
    delay
}

/// One log line per decision: `message` says what was done (`note`), `detail` why.
fn log_decision(name: &str, node: &str, decision: &Decision, note: &str) {
    tracing::info!(
        csr = %short_name(name),
        node = %node,
        decision = decision.kind.as_str(),
        reason = %decision.reason,
        detail = %decision.message,
        "{note}"
    );
}

impl<R, C> Context<R, C> {
    /// Writes the condition through the approval subresource, preconditioned on the cached
    /// resourceVersion and given up when the fence would close (once it has, nothing is sent: the
    /// CSR waits, as a standby's does, for the pass that follows when this replica can write
    /// again). A conflict is read again after a backoff; a CSR gone is forgotten; a name that fits
    /// into no URL is told once and tried again after the evaluation backoff; any other failure is
    /// an error, which [`error_policy`] retries.
    async fn write(
        &self,
        csr: &CsrObject,
        key: CsrKey<'_>,
        decision: &Decision,
        node: &str,
    ) -> Result<Next, ControllerError> {
        let logged = short_name(key.name);
        // The write may run only while the fence stays open, so it cannot land after the Lease
        // it is sent under can have expired; with no time left, nothing is sent.
        let Some(timeout) = self.leadership.write_timeout(WRITE_TIMEOUT) else {
            self.leadership.skipped();
            tracing::debug!(csr = %logged, decision = decision.kind.as_str(), "not the leader: waiting");
            return Ok(Next::AwaitChange);
        };
        match write_condition(&self.api, csr, decision, timeout).await {
            Ok(()) => {
                self.count_approval(csr, decision);
                self.metrics.record_write(WriteResult::Success);
                self.metrics.record_decision(decision.kind, decision.reason);
                log_decision(key.name, node, decision, "written");
                self.events.publish(csr.object_ref(), decision, "").await;
                self.reconciles.mark_written(key, csr.resource_version.as_deref().unwrap_or_default());
                self.metrics.set_waiting_retry(self.reconciles.waiting());
                Ok(Next::AwaitChange)
            }
            Err(error) if error.status() == Some(409) => {
                self.metrics.record_write(WriteResult::Conflict);
                let delay = self.reconciles.next_conflict_retry(key);
                tracing::debug!(csr = %logged, retry_in = ?delay, "conflict: re-reading and deciding again");
                Ok(Next::RetryAfter(delay))
            }
            Err(error) if error.status() == Some(404) => {
                self.metrics.record_write(WriteResult::NotFound);
                tracing::debug!(csr = %logged, "gone before the decision was written: forgotten");
                self.forget(key.name);
                Ok(Next::AwaitChange)
            }
            Err(error @ WriteError::Unaddressable { .. }) => {
                self.metrics.record_write(WriteResult::Unaddressable);
                let delay = self.reconciles.next_retry(key, false);
                self.metrics.set_waiting_retry(self.reconciles.waiting());
                if self.reconciles.mark_unaddressable(key) {
                    tracing::error!(csr = %logged, %error, "cannot write the decision: no request can name this CSR");
                }
                Ok(Next::RetryAfter(delay))
            }
            Err(source) => {
                // No answer does not mean not written: count it, so no second one follows.
                self.count_approval(csr, decision);
                self.metrics.record_write(WriteResult::Error);
                Err(ControllerError::Write { name: logged.to_string(), source })
            }
        }
    }

    /// Counts an approval written (or perhaps written) on `csr` in the ledger at once
    /// ([`CsrLedger::record_approval`]).
    fn count_approval(&self, csr: &CsrObject, decision: &Decision) {
        if decision.kind == DecisionKind::Approve
            && let Some(ledger) = &self.ledger
        {
            ledger.record_approval(csr);
        }
    }

    /// Logs and publishes a decision that is not written, and remembers that it was told.
    async fn announce(&self, csr: &CsrObject, key: CsrKey<'_>, decision: &Decision, node: &str, note: Announcement) {
        self.reconciles.mark_announced(key, decision.kind, decision.reason);
        log_decision(key.name, node, decision, note.log);
        self.events.publish(csr.object_ref(), decision, note.event_prefix).await;
    }

    /// Drops what was remembered about a CSR that is decided or gone.
    fn forget(&self, name: &str) {
        if self.reconciles.forget(name) {
            self.metrics.set_waiting_retry(self.reconciles.waiting());
        }
    }
}
