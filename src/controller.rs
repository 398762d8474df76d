//! The controller, the application: watch CSRs -> evaluate -> write the approval condition ->
//! record. It reaches the apiserver through `kubernetes` (the watch and cache, the read by name,
//! the approval write, the Lease) and tells every decision through `events`.
//!
//! One CSR's path:
//!
//! ```text
//! watch event ─▶ triggers.rs    the cache applies it (kubernetes/csr_cache.rs); a Trigger (name,
//!                               requester); passes and Machine changes make them too
//!             ─▶ work_queue.rs  dispatch: queued once per CSR, taken round-robin by requester,
//!                               run as a task ───────────────────────────────────────────────┐
//!             ─▶ reconcile.rs   Reconciler::reconcile: read from the cache (a pending serving  │
//!                               CSR whose request the cache left out read by name, read.rs),   │
//!                               evaluated, its Step carried out: the approval write            │
//!                               (kubernetes/write.rs), every way it ended settled in memory.rs │
//!             ◀─ work_queue.rs  the answer, Option<Duration> (when to run again), ends the run ◀┘
//! ```
//!
//! Writes go through the `approval` subresource with the cached resourceVersion as a precondition,
//! so a replica working from a stale view gets a conflict, never a second decision. Only the leader
//! evaluates and writes. Reconciliation is level-triggered ([`triggers`]): besides live watch
//! events, every undecided CSR is reconciled after each list of the watch, whenever this replica
//! becomes able to write, and every resync period.

mod context;
mod csr_api;
mod memory;
mod oldest;
mod phase;
mod read;
mod reconcile;
mod room;
mod triggers;
mod work_queue;

pub(crate) use context::Context;
pub(crate) use memory::Memory;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio_util::task::AbortOnDropHandle;

use crate::kubernetes::csr_cache::CacheWriter;
use crate::kubernetes::csr_object::{CsrObject, RequestRoom};
use crate::kubernetes::machines::MachineCache;
use crate::policy::{ClusterView, Resolver};
use reconcile::Reconciler;
use triggers::Sources;

/// How the controller is run: concurrency, the pass triggers it does not make itself, and when to
/// stop.
pub(crate) struct Schedule {
    /// Bound on concurrent reconciles, taken round-robin between requesters.
    pub concurrency: u16,
    /// Every undecided CSR is reconciled again at this interval.
    pub resync_period: Duration,
    /// The CSR cache's room for requests: past it, a pending CSR's request is read from the
    /// apiserver when it is decided.
    pub request_room: RequestRoom,
    /// Yields whenever this replica becomes able to write.
    pub writable: BoxStream<'static, ()>,
    /// Resolves when the controller should stop taking work.
    pub shutdown: BoxFuture<'static, ()>,
}

/// Runs the controller until `schedule.shutdown` resolves; in-flight reconciles finish first. The
/// CSR watch fills `csrs`, the cache whose reader the runner also gave the cluster view. In machine
/// mode `machines` re-triggers the CSRs waiting on a Machine or Node whenever one changes.
/// `on_synced` runs once the first list of the CSR watch (and the machine caches) are complete.
/// `memory` is what the controller knows of each CSR (the runner hands its written approvals to
/// the ledger too).
pub(crate) async fn run<R, C>(
    ctx: Arc<Context<R, C>>,
    memory: Arc<Memory>,
    schedule: Schedule,
    csrs: CacheWriter<CsrObject>,
    machines: Option<MachineCache>,
    on_synced: impl FnOnce() + Send + 'static,
) where
    R: Resolver + 'static,
    C: ClusterView + 'static,
{
    let client_csrs = ctx.policy.machine.as_ref().is_some_and(|m| m.client_approval);
    let store = csrs.reader();
    let (synced, first_list) = tokio::sync::oneshot::channel();
    let cache = machines.clone();
    let shutdown = schedule.shutdown.shared();
    let _synced = AbortOnDropHandle::new(tokio::spawn(async move {
        if first_list.await.is_err() {
            return;
        }
        if let Some(cache) = cache {
            cache.synced().await;
        }
        on_synced();
    }));
    // These tasks hold the context, and with it a handle on the event queue: they end with the
    // controller.
    let _prune = AbortOnDropHandle::new(tokio::spawn(memory.clone().keep_pruned(store.clone())));
    let excused = memory.clone();
    let excused = move |csr: &CsrObject| excused.is_excused(csr);
    let _report =
        AbortOnDropHandle::new(tokio::spawn(oldest::report(ctx.clone(), store.clone(), client_csrs, excused)));
    let waiting = memory.clone();
    let triggers = triggers::triggers(Sources {
        api: ctx.api.clone(),
        client_csrs,
        cache: csrs,
        request_room: schedule.request_room,
        synced,
        writable: schedule.writable,
        resync_period: schedule.resync_period,
        metrics: ctx.metrics.clone(),
        skipped: ctx.skipped.clone(),
        machines,
        waiting_on_cluster: Box::new(move || waiting.anyone_waiting_on_cluster()),
    });
    let reconciler =
        Arc::new(Reconciler { api: ctx.api.clone().into_client(), ctx, memory: memory.clone(), csrs: store });
    work_queue::dispatch(triggers, reconciler, &memory, usize::from(schedule.concurrency), shutdown).await;
}
