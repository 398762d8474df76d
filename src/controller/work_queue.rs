//! The workers that run the queued CSRs ([`dispatch`]).
//!
//! Each CSR is in the queue at most once, by name: ready, delayed until its retry is due, or
//! running (and perhaps triggered again meanwhile, to run once more when it finishes): that is
//! its entry's in the controller's table ([`Memory`]), moved only by this dispatch loop. Ready CSRs
//! are taken round-robin between requesters (a CSR's `spec.username`: the node, or the bootstrap
//! token, that created it), first in, first out within one requester, so a node that creates
//! thousands of CSRs delays another node's CSR by about one reconcile per worker, not by its whole
//! backlog. The queue holds names only; the CSRs stay in the watch cache. Up to `--concurrency`
//! reconciles run at once, each a task of its own, while the triggers keep feeding the queue.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::memory::Memory;
use super::triggers::Trigger;

/// A reconcile that panicked is tried again after this long.
const PANIC_RETRY: Duration = Duration::from_secs(8);

/// What the workers run: the reconcile of one CSR by name, which answers when to run it again,
/// if ever.
pub(super) trait Reconcile: Send + Sync + 'static {
    /// Reconciles the CSR named `name`; `Some(delay)` queues it again after `delay`.
    fn reconcile(self: Arc<Self>, name: Arc<str>) -> impl Future<Output = Option<Duration>> + Send + 'static;
}

/// Feeds `triggers` into the work queue of `memory` and runs `reconciler` on its CSRs, at most `concurrency`
/// (at least one) at once, until `shutdown` resolves; then takes no more work, waits for the
/// reconciles that run, and returns. A decided CSR's trigger runs nothing unless the CSR is queued
/// (its reconcile then ends at once).
pub(super) async fn dispatch(
    triggers: impl Stream<Item = Trigger>,
    reconciler: Arc<impl Reconcile>,
    memory: &Memory,
    concurrency: usize,
    shutdown: impl Future<Output = ()>,
) {
    let concurrency = concurrency.max(1);
    let mut running = FuturesUnordered::new();
    let mut triggers = pin!(triggers);
    let mut shutdown = pin!(shutdown);
    loop {
        while running.len() < concurrency {
            let Some(name) = memory.next() else { break };
            let task = tokio::spawn(reconciler.clone().reconcile(name.clone()));
            running.push(async move { (name, task.await) });
        }
        let due = memory.next_due();
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some((name, outcome)) = running.next() => {
                let retry_after = outcome.unwrap_or_else(|error| {
                    tracing::error!(csr = %crate::display::short_name(&name), %error, retry_in = ?PANIC_RETRY, "reconcile failed");
                    Some(PANIC_RETRY)
                });
                memory.finish(name, retry_after, Instant::now());
            }
            Some(trigger) = triggers.next() => {
                if !trigger.decided || memory.is_queued(&trigger.name) {
                    memory.trigger(trigger.name, trigger.requester);
                }
            }
            () = sleep_until(due), if due.is_some() => memory.promote_due(Instant::now()),
        }
    }
    tracing::debug!(running = running.len(), queued = memory.queued(), "taking no more work; finishing what runs");
    while running.next().await.is_some() {}
}

/// Sleeps until `due`; forever when there is none.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, mpsc};

    fn trigger(name: &str, requester: &str) -> Trigger {
        Trigger { name: name.into(), requester: requester.into(), decided: false }
    }

    /// A reconcile that runs a closure.
    struct Closure<F>(F);

    impl<F, Fut> Reconcile for Closure<F>
    where
        F: Fn(Arc<str>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Duration>> + Send + 'static,
    {
        fn reconcile(self: Arc<Self>, name: Arc<str>) -> impl Future<Output = Option<Duration>> + Send + 'static {
            (self.0)(name)
        }
    }

    #[tokio::test]
    async fn runs_at_most_concurrency_reconciles_and_finishes_them_at_shutdown() {
        let (sender, receiver) = mpsc::unbounded_channel();
        let started = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let finished = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let reconciler = Arc::new(Closure({
            let (started, release, finished) = (started.clone(), release.clone(), finished.clone());
            move |_name: Arc<str>| {
                let (started, release, finished) = (started.clone(), release.clone(), finished.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    None
                }
            }
        }));
        let memory = Memory::new(Metrics::new());
        let dispatcher = tokio::spawn(async move {
            dispatch(tokio_stream_of(receiver), reconciler, &memory, 2, async move {
                let _ = stopped.await;
            })
            .await;
        });
        for i in 0..5 {
            sender.send(trigger(&format!("csr-{i}"), "n")).ok();
        }
        wait_for(|| started.load(Ordering::SeqCst) == 2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(started.load(Ordering::SeqCst), 2, "two at most");
        stop.send(()).ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!dispatcher.is_finished(), "the running reconciles finish first");
        release.notify_waiters();
        dispatcher.await.ok();
        assert_eq!(finished.load(Ordering::SeqCst), 2);
        assert_eq!(started.load(Ordering::SeqCst), 2, "nothing new after shutdown");
    }

    /// Time is paused and advances only while every task waits: a dispatcher that spun instead of
    /// sleeping until the retry is due would hold it still.
    #[tokio::test(start_paused = true)]
    async fn a_retry_runs_again_when_due_and_a_decided_csr_out_of_the_queue_runs_nothing() {
        let (sender, receiver) = mpsc::unbounded_channel();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let reconciler = Arc::new(Closure({
            let runs = runs.clone();
            move |name: Arc<str>| {
                let first = {
                    let mut runs = runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    runs.push(name.to_string());
                    runs.len() == 1
                };
                async move { first.then_some(Duration::from_secs(2)) }
            }
        }));
        let memory = Memory::new(Metrics::new());
        let dispatcher = tokio::spawn(async move {
            dispatch(tokio_stream_of(receiver), reconciler, &memory, 1, std::future::pending()).await;
        });
        sender.send(trigger("retried", "n")).ok();
        sender.send(Trigger { decided: true, ..trigger("decided", "n") }).ok();
        let started = Instant::now();
        wait_for(|| runs.lock().map(|runs| runs.len() == 1).unwrap_or(false)).await;
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert_eq!(runs.lock().map(|runs| runs.len()).unwrap_or(0), 1, "not again before the retry is due");
        wait_for(|| runs.lock().map(|runs| runs.len() == 2).unwrap_or(false)).await;
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert_eq!(*runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner), ["retried", "retried"]);
        sender.send(Trigger { decided: true, ..trigger("retried", "n") }).ok();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(runs.lock().map(|runs| runs.len()).unwrap_or(0), 2, "decided, and not queued: not run");
        dispatcher.abort();
    }

    /// The receiver as a stream.
    fn tokio_stream_of(mut receiver: mpsc::UnboundedReceiver<Trigger>) -> impl Stream<Item = Trigger> {
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }

    /// Polls `done` until it holds (at most 5 s).
    async fn wait_for(done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached within 5 s");
    }
}
