//! What makes the controller look at a CSR. Live watch events name the CSR they changed; besides
//! them, a *pass* reconciles every undecided CSR in the cache, after each completed list or relist
//! of the watch (its objects reach the cache only when the list completes), whenever this replica
//! becomes able to write, and every resync period. So the controller is level-triggered: a CSR
//! whose event was missed, skipped or forgotten is found by the next pass.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, oneshot};

use super::dispatch::Trigger;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_object::CsrObject;
use crate::metrics::{Metrics, PassTrigger};

/// The trigger of `csr`: its name and requester shared with the cache, not copied.
fn trigger_of(csr: &CsrObject) -> Trigger {
    Trigger { name: csr.name.clone(), requester: csr.username.clone(), decided: csr.is_decided() }
}

/// The triggers of live watch events, from `events` as the cache applied them. A completed list
/// or relist signals `relisted` (and `synced`, the first time) instead of yielding its objects:
/// they are in the cache only from then on, so a pass after it finds every one. Watch errors
/// are logged (a warning when the watch starts failing, one line when it recovers) and dropped:
/// the watch recovers by itself after its backoff.
pub(super) fn live_triggers(
    events: impl Stream<Item = Result<Event<Arc<CsrObject>>, watcher::Error>> + Send,
    relisted: Arc<Notify>,
    synced: oneshot::Sender<()>,
) -> impl Stream<Item = Trigger> + Send {
    let mut synced = Some(synced);
    let mut failing = false;
    events.filter_map(move |event| {
        let object = match event {
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(%error, "watching CSRs failed; retrying");
                } else {
                    tracing::debug!(%error, "watching CSRs failed again; retrying");
                }
                None
            }
            Ok(event) => {
                if std::mem::replace(&mut failing, false) {
                    tracing::info!("watching CSRs again");
                }
                match event {
                    Event::Apply(csr) => Some(trigger_of(&csr)),
                    Event::InitDone => {
                        tracing::debug!("CSR list complete: every undecided CSR is evaluated");
                        relisted.notify_one();
                        if let Some(synced) = synced.take() {
                            let _ = synced.send(());
                        }
                        None
                    }
                    Event::Init | Event::InitApply(_) | Event::Delete(_) => None,
                }
            }
        };
        futures::future::ready(object)
    })
}

/// The pass triggers: `relisted`, `writable` and every `resync` period.
pub(super) fn passes(
    relisted: Arc<Notify>,
    writable: impl Stream<Item = ()> + Send + 'static,
    resync: Duration,
) -> impl Stream<Item = PassTrigger> + Send {
    let relists = futures::stream::unfold(relisted, |relisted| async move {
        relisted.notified().await;
        Some((PassTrigger::Relist, relisted))
    });
    let periodic = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some((PassTrigger::Periodic, ()))
    });
    futures::stream::select(relists, futures::stream::select(writable.map(|()| PassTrigger::Writable), periodic))
}

/// For each pass of `triggers`, a trigger of every undecided CSR in `store` (counted in
/// `metrics`). Decided CSRs stay in the cache until they are deleted, and are not looked at.
pub(super) fn undecided_in_each_pass(
    triggers: impl Stream<Item = PassTrigger> + Send + 'static,
    store: Cache<CsrObject>,
    metrics: Metrics,
) -> impl Stream<Item = Trigger> + Send {
    triggers.flat_map(move |trigger| {
        metrics.record_pass(trigger);
        let undecided = undecided(&store);
        tracing::debug!(trigger = trigger.as_str(), undecided = undecided.len(), "reconciling every undecided CSR");
        futures::stream::iter(undecided)
    })
}

/// A trigger of every undecided CSR in `store`.
pub(super) fn undecided(store: &Cache<CsrObject>) -> Vec<Trigger> {
    store.state().iter().filter(|csr| !csr.is_decided()).map(|csr| trigger_of(csr)).collect()
}
