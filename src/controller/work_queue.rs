//! Which CSRs to reconcile, when, and in which order, and the workers that run them
//! ([`dispatch`]).
//!
//! Each CSR is in the queue at most once, by name: ready, delayed until its retry is due, or
//! running (and perhaps triggered again meanwhile, to run once more when it finishes). Ready CSRs
//! are taken round-robin between requesters (a CSR's `spec.username`: the node, or the bootstrap
//! token, that created it), first in, first out within one requester, so a node that creates
//! thousands of CSRs delays another node's CSR by about one reconcile per worker, not by its whole
//! backlog. The queue holds names only; the CSRs stay in the watch cache. Up to `--concurrency`
//! reconciles run at once, each a task of its own, while the triggers keep feeding the queue.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::room::sparse;
use super::triggers::Trigger;

/// The queued CSRs and their order.
#[derive(Debug, Default)]
pub(super) struct WorkQueue {
    entries: HashMap<Arc<str>, Entry>,
    /// Each requester with ready CSRs, and its ready CSRs after the one its place in the ring
    /// holds, in arrival order: none for most requesters (one CSR each), held as a null pointer,
    /// so a slot of the table is 24 bytes.
    ready: HashMap<Arc<str>, ReadyAfter>,
    /// The requesters with ready CSRs and each one's first, in the order their turn comes.
    ring: VecDeque<(Arc<str>, Arc<str>)>,
    /// The delayed CSRs by when they are due.
    delayed: BTreeSet<(Instant, Arc<str>)>,
}

/// A requester's ready CSRs after its first: none (most requesters) held as a null pointer.
type ReadyAfter = Option<Box<VecDeque<Arc<str>>>>;

/// One queued CSR.
#[derive(Debug)]
struct Entry {
    requester: Arc<str>,
    state: State,
}

/// Where a queued CSR is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Delayed(Instant),
    /// Taken by [`WorkQueue::next`]; `again` when it was triggered since.
    Running {
        again: bool,
    },
}

impl WorkQueue {
    /// Queues `name` (created by `requester`) to run as soon as its turn comes: a delayed CSR is
    /// made ready, a running one runs again when it finishes, a ready one keeps its place.
    pub(super) fn trigger(&mut self, name: Arc<str>, requester: Arc<str>) {
        match self.entries.get_mut(&name) {
            None => {
                self.entries.insert(name.clone(), Entry { requester: requester.clone(), state: State::Ready });
                self.push_ready(requester, name);
            }
            Some(entry) => match entry.state {
                State::Ready => {}
                State::Running { .. } => entry.state = State::Running { again: true },
                State::Delayed(due) => {
                    entry.state = State::Ready;
                    let requester = entry.requester.clone();
                    if let Some((_, name)) = self.delayed.take(&(due, name)) {
                        self.push_ready(requester, name);
                    }
                }
            },
        }
    }

    /// Whether `name` is queued in any state.
    pub(super) fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The next ready CSR, the next requester's first, now running; `None` when none is ready.
    pub(super) fn next(&mut self) -> Option<Arc<str>> {
        while let Some((requester, name)) = self.ring.pop_front() {
            match self.ready.get_mut(&requester).map(|rest| rest.as_mut().and_then(|rest| rest.pop_front())) {
                Some(Some(after)) => self.ring.push_back((requester, after)),
                Some(None) | None => {
                    self.ready.remove(&requester);
                }
            }
            if let Some(entry) = self.entries.get_mut(&name) {
                entry.state = State::Running { again: false };
                return Some(name);
            }
        }
        None
    }

    /// Ends the run of `name`: ready again if it was triggered while it ran, else delayed by
    /// `retry_after` from `now`, else gone from the queue.
    pub(super) fn finish(&mut self, name: Arc<str>, retry_after: Option<Duration>, now: Instant) {
        let Some(entry) = self.entries.get_mut(&name) else { return };
        let again = match entry.state {
            State::Running { again } => again,
            State::Ready | State::Delayed(_) => return,
        };
        if again {
            entry.state = State::Ready;
            let requester = entry.requester.clone();
            self.push_ready(requester, name);
        } else if let Some(delay) = retry_after {
            let due = now + delay;
            entry.state = State::Delayed(due);
            self.delayed.insert((due, name));
        } else {
            self.entries.remove(&name);
            self.give_back_room();
        }
    }

    /// Frees most of the room a drained burst left (a storm's tables would otherwise keep the
    /// size of its peak): a table or the ring at most a quarter full is cut to twice what it holds.
    fn give_back_room(&mut self) {
        if sparse(self.entries.len(), self.entries.capacity()) {
            self.entries.shrink_to(self.entries.len() * 2);
        }
        if sparse(self.ready.len(), self.ready.capacity()) {
            self.ready.shrink_to(self.ready.len() * 2);
        }
        if sparse(self.ring.len(), self.ring.capacity()) {
            self.ring.shrink_to(self.ring.len() * 2);
        }
    }

    /// When the first delayed CSR is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.delayed.first().map(|(due, _)| *due)
    }

    /// Makes every delayed CSR due by `now` ready.
    pub(super) fn promote_due(&mut self, now: Instant) {
        while self.delayed.first().is_some_and(|(due, _)| *due <= now) {
            let Some((_, name)) = self.delayed.pop_first() else { break };
            if let Some(entry) = self.entries.get_mut(&name) {
                entry.state = State::Ready;
                let requester = entry.requester.clone();
                self.push_ready(requester, name);
            }
        }
    }

    /// How many CSRs are queued, in any state.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Puts `name` last in `requester`'s ready CSRs, and the requester last in the ring when it
    /// had none.
    fn push_ready(&mut self, requester: Arc<str>, name: Arc<str>) {
        match self.ready.get_mut(&requester) {
            Some(rest) => rest.get_or_insert_default().push_back(name),
            None => {
                self.ready.insert(requester.clone(), None);
                self.ring.push_back((requester, name));
            }
        }
    }
}

/// A reconcile that panicked is tried again after this long.
const PANIC_RETRY: Duration = Duration::from_secs(8);

/// What the workers run: the reconcile of one CSR by name, which answers when to run it again,
/// if ever.
pub(super) trait Reconcile: Send + Sync + 'static {
    /// Reconciles the CSR named `name`; `Some(delay)` queues it again after `delay`.
    fn reconcile(self: Arc<Self>, name: Arc<str>) -> impl Future<Output = Option<Duration>> + Send + 'static;
}

/// Feeds `triggers` into a work queue and runs `reconciler` on its CSRs, at most `concurrency`
/// (at least one) at once, until `shutdown` resolves; then takes no more work, waits for the
/// reconciles that run, and returns. A decided CSR's trigger runs nothing unless the CSR is queued
/// (its reconcile then ends at once).
pub(super) async fn dispatch(
    triggers: impl Stream<Item = Trigger>,
    reconciler: Arc<impl Reconcile>,
    concurrency: usize,
    shutdown: impl Future<Output = ()>,
) {
    let concurrency = concurrency.max(1);
    let mut queue = WorkQueue::default();
    let mut running = FuturesUnordered::new();
    let mut triggers = pin!(triggers);
    let mut shutdown = pin!(shutdown);
    loop {
        while running.len() < concurrency {
            let Some(name) = queue.next() else { break };
            let task = tokio::spawn(reconciler.clone().reconcile(name.clone()));
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
                if !trigger.decided || queue.contains(&trigger.name) {
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
    use crate::controller::room::KEPT_ROOM;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, mpsc};

    /// Takes every ready CSR, in order, finishing each at once with no retry.
    fn drain(queue: &mut WorkQueue) -> Vec<String> {
        let mut order = Vec::new();
        while let Some(name) = queue.next() {
            order.push(name.to_string());
            queue.finish(name, None, Instant::now());
        }
        order
    }

    #[test]
    fn requesters_take_turns_and_each_keeps_its_arrival_order() {
        let mut queue = WorkQueue::default();
        for i in 0..4 {
            queue.trigger(format!("flood-{i}").into(), "system:node:flood".into());
        }
        queue.trigger("other-0".into(), "system:node:other".into());
        queue.trigger("third-0".into(), "system:node:third".into());
        queue.trigger("other-1".into(), "system:node:other".into());
        assert_eq!(drain(&mut queue), ["flood-0", "other-0", "third-0", "flood-1", "other-1", "flood-2", "flood-3"]);
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_drained_burst_gives_back_the_room_it_took() {
        let mut queue = WorkQueue::default();
        for i in 0..20_000 {
            queue.trigger(format!("csr-{i}").into(), format!("node-{i}").into());
        }
        let full = (queue.entries.capacity(), queue.ready.capacity(), queue.ring.capacity());
        assert!(full.0 >= 20_000 && full.1 >= 20_000 && full.2 >= 20_000);
        assert_eq!(drain(&mut queue).len(), 20_000);
        let drained = (queue.entries.capacity(), queue.ready.capacity(), queue.ring.capacity());
        assert!(drained.0 <= 2 * KEPT_ROOM && drained.1 <= 2 * KEPT_ROOM && drained.2 <= 2 * KEPT_ROOM, "{drained:?}");
    }

    #[test]
    fn a_csr_triggered_twice_while_ready_runs_once() {
        let mut queue = WorkQueue::default();
        queue.trigger("a".into(), "n".into());
        queue.trigger("a".into(), "n".into());
        assert_eq!(drain(&mut queue), ["a"]);
    }

    #[test]
    fn a_csr_triggered_while_running_runs_again_after_it_finishes() {
        let mut queue = WorkQueue::default();
        queue.trigger("a".into(), "n".into());
        let running = queue.next();
        assert_eq!(running.as_deref(), Some("a"));
        queue.trigger("a".into(), "n".into());
        assert_eq!(queue.next(), None, "not twice at once");
        queue.finish("a".into(), Some(Duration::from_secs(60)), Instant::now());
        assert_eq!(drain(&mut queue), ["a"], "the trigger wins over the later retry");
    }

    #[test]
    fn a_retry_waits_until_it_is_due_unless_triggered() {
        let mut queue = WorkQueue::default();
        let start = Instant::now();
        queue.trigger("a".into(), "n".into());
        queue.trigger("b".into(), "n".into());
        for name in ["a", "b"] {
            assert_eq!(queue.next().as_deref(), Some(name));
            queue.finish(name.into(), Some(Duration::from_secs(2)), start);
        }
        assert_eq!(queue.next(), None);
        assert_eq!(queue.next_due(), Some(start + Duration::from_secs(2)));
        queue.promote_due(start + Duration::from_secs(1));
        assert_eq!(queue.next(), None, "not due yet");
        queue.trigger("b".into(), "n".into());
        assert_eq!(drain(&mut queue), ["b"], "a trigger makes a delayed CSR ready at once");
        assert_eq!(queue.next_due(), Some(start + Duration::from_secs(2)));
        queue.promote_due(start + Duration::from_secs(2));
        assert_eq!(queue.next_due(), None);
        assert_eq!(drain(&mut queue), ["a"]);
        assert!(!queue.contains("a"));
    }

    #[test]
    fn a_finished_csr_leaves_the_queue_and_a_retried_one_stays() {
        let mut queue = WorkQueue::default();
        queue.trigger("done".into(), "n".into());
        queue.trigger("retried".into(), "n".into());
        for name in ["done", "retried"] {
            assert_eq!(queue.next().as_deref(), Some(name));
        }
        assert!(queue.contains("done"), "running");
        queue.finish("done".into(), None, Instant::now());
        queue.finish("retried".into(), Some(Duration::from_secs(1)), Instant::now());
        assert!(!queue.contains("done"));
        assert!(queue.contains("retried"));
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn finishing_what_does_not_run_changes_nothing() {
        let mut queue = WorkQueue::default();
        queue.trigger("ready".into(), "n".into());
        queue.finish("ready".into(), None, Instant::now());
        queue.finish("unknown".into(), Some(Duration::from_secs(1)), Instant::now());
        assert_eq!(queue.next_due(), None);
        assert_eq!(drain(&mut queue), ["ready"]);
    }

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
        let dispatcher = tokio::spawn(dispatch(tokio_stream_of(receiver), reconciler, 2, async move {
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
        let dispatcher = tokio::spawn(dispatch(tokio_stream_of(receiver), reconciler, 1, std::future::pending()));
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
