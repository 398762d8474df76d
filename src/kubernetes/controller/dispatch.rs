//! Runs reconciles from the [`WorkQueue`]: at most `concurrency` at once, each a task of its own,
//! and the queue fed by the triggers while they run.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::work_queue::WorkQueue;

/// A reconcile that panicked is tried again after this long.
const PANIC_RETRY: Duration = Duration::from_secs(8);

/// What makes a CSR be reconciled: its name, its requester, and whether the trigger saw it decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trigger {
    /// metadata.name.
    pub name: Arc<str>,
    /// spec.username: whose turn it takes.
    pub requester: Arc<str>,
    /// A decided CSR not in the queue needs no reconcile, only to be forgotten.
    pub decided: bool,
}

/// How the work is carried out: the reconcile of one CSR by name (it answers when to try again,
/// if ever), and what to do with a decided CSR that no reconcile holds.
pub(super) struct Work<F, G> {
    /// At most this many reconciles run at once (at least one).
    pub concurrency: usize,
    /// Reconciles the named CSR; `Some(delay)` queues it again after `delay`.
    pub reconcile: F,
    /// Drops what is remembered about a decided CSR.
    pub forget: G,
}

/// Feeds `triggers` into a work queue and runs `work` on its CSRs until `shutdown` resolves; then
/// takes no more work, waits for the reconciles that run, and returns.
pub(super) async fn dispatch<F, Fut, G>(
    triggers: impl Stream<Item = Trigger>,
    work: Work<F, G>,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(Arc<str>) -> Fut,
    Fut: Future<Output = Option<Duration>> + Send + 'static,
    G: Fn(&str),
{
    let concurrency = work.concurrency.max(1);
    let mut queue = WorkQueue::default();
    let mut running = FuturesUnordered::new();
    let mut triggers = pin!(triggers);
    let mut shutdown = pin!(shutdown);
    loop {
        while running.len() < concurrency {
            let Some(name) = queue.next() else { break };
            let task = tokio::spawn((work.reconcile)(name.clone()));
            running.push(async move { (name, task.await) });
        }
        let due = queue.next_due();
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some((name, outcome)) = running.next() => {
                let retry_after = outcome.unwrap_or_else(|error| {
                    tracing::error!(csr = %crate::display::short_name(&name), %error, retry_in = ?PANIC_RETRY, "reconcile failed");
                    Some(PANIC_RETRY)
                });
                queue.finish(name, retry_after, Instant::now());
            }
            Some(trigger) = triggers.next() => {
                if trigger.decided && !queue.contains(&trigger.name) {
                    (work.forget)(&trigger.name);
                } else {
                    queue.trigger(trigger.name, trigger.requester);
                }
            }
            () = sleep_until(due), if due.is_some() => queue.promote_due(Instant::now()),
        }
    }
    tracing::debug!(running = running.len(), queued = queue.len(), "taking no more work; finishing what runs");
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
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, mpsc};

    fn trigger(name: &str, requester: &str) -> Trigger {
        Trigger { name: name.into(), requester: requester.into(), decided: false }
    }

    #[tokio::test]
    async fn runs_at_most_concurrency_reconciles_and_finishes_them_at_shutdown() {
        let (sender, receiver) = mpsc::unbounded_channel();
        let started = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let finished = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let work = Work {
            concurrency: 2,
            reconcile: {
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
            },
            forget: |_: &str| {},
        };
        let dispatcher = tokio::spawn(dispatch(tokio_stream_of(receiver), work, async move {
            let _ = stopped.await;
        }));
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
    async fn a_retry_runs_again_when_due_and_a_decided_csr_out_of_the_queue_is_forgotten() {
        let (sender, receiver) = mpsc::unbounded_channel();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let forgotten = Arc::new(Mutex::new(Vec::new()));
        let work = Work {
            concurrency: 1,
            reconcile: {
                let runs = runs.clone();
                move |name: Arc<str>| {
                    let first = {
                        let mut runs = runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        runs.push(name.to_string());
                        runs.len() == 1
                    };
                    async move { first.then_some(Duration::from_secs(2)) }
                }
            },
            forget: {
                let forgotten = forgotten.clone();
                move |name: &str| {
                    forgotten.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(name.to_owned())
                }
            },
        };
        let dispatcher = tokio::spawn(dispatch(tokio_stream_of(receiver), work, std::future::pending()));
        sender.send(trigger("retried", "n")).ok();
        sender.send(Trigger { decided: true, ..trigger("decided", "n") }).ok();
        let started = Instant::now();
        wait_for(|| runs.lock().map(|runs| runs.len() == 1).unwrap_or(false)).await;
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert_eq!(runs.lock().map(|runs| runs.len()).unwrap_or(0), 1, "not again before the retry is due");
        wait_for(|| runs.lock().map(|runs| runs.len() == 2).unwrap_or(false)).await;
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert_eq!(*runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner), ["retried", "retried"]);
        assert_eq!(*forgotten.lock().unwrap_or_else(std::sync::PoisonError::into_inner), ["decided"]);
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
