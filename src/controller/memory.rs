//! What the controller knows of each CSR, in one table ([`Memory`]): where it is in the work
//! queue (and the [`Order`] in which the queued ones run), the [`Phase`] its last reconcile left
//! it in (`phase.rs`: when to reconcile the CSR again), the decisions told, the read kept, the
//! client approval written; and each node's turn.
//!
//! One `std` mutex guards the table, taken for one step and never across an await. Each part has
//! one writer: the queue's moves ([`Queued::after`]) come from the dispatch loop, a CSR's phase and
//! what goes with it ([`Phase::after`]) from [`Memory::settle`], once per reconcile. Entries are
//! forgotten in one place, [`Memory::prune`]: what was learned of a CSR once the cache shows it
//! decided or gone, the entry once nothing is left of it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::phase::{Announced, Done, Outcome, Phase};
use super::room::sparse;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_ledger::WrittenApprovals;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::csr_uid::Uid;
use crate::metrics::{Metrics, WriteResult};
use crate::policy::{client_node, serving_node};

/// How often the table forgets the CSRs that are decided or gone.
const PRUNE_PERIOD: Duration = Duration::from_secs(5);

/// Where a CSR is in the work queue (none: not queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queued {
    /// Waiting for its requester's turn.
    Ready,
    /// Waiting until its retry is due.
    Delayed(Instant),
    /// Taken by a worker; `again` when it was triggered since.
    Running { again: bool },
}

/// What moves a CSR in the work queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// A trigger.
    Triggered,
    /// Taken by a worker ([`Memory::next`]).
    Taken,
    /// Its retry came due.
    Due,
    /// Its run ended, to run again at the instant given, if any.
    Finished(Option<Instant>),
}

impl Queued {
    /// Where a CSR queued as `before` is after `event`: the queue's transitions, all of them.
    fn after(before: Option<Queued>, event: Move) -> Option<Queued> {
        match (before, event) {
            (None | Some(Queued::Delayed(_)), Move::Triggered)
            | (Some(Queued::Delayed(_)), Move::Due)
            | (Some(Queued::Running { again: true }), Move::Finished(_)) => Some(Queued::Ready),
            (Some(Queued::Running { .. }), Move::Triggered) => Some(Queued::Running { again: true }),
            (Some(Queued::Ready), Move::Taken) => Some(Queued::Running { again: false }),
            (Some(Queued::Running { again: false }), Move::Finished(due)) => due.map(Queued::Delayed),
            (before, _) => before,
        }
    }
}

/// Everything the table holds of one CSR name.
#[derive(Debug)]
struct Entry {
    /// spec.username: whose turn in the queue's ring it takes.
    requester: Arc<str>,
    /// Where it is in the work queue; none when not queued.
    queued: Option<Queued>,
    /// What its reconciles learned; none before one settled, and once forgotten. Boxed: every
    /// queued CSR has an entry (156,000 at a storm's peak, in a table sized in powers of two),
    /// and most are queued before anything is learned, so the entry stays 40 bytes, not 128.
    known: Option<Box<Known>>,
}

/// What the reconciles of one CSR learned of it, kept from one to the next.
#[derive(Debug)]
struct Known {
    /// metadata.uid: a CSR re-created under the same name starts afresh.
    uid: Uid,
    phase: Phase,
    /// The decisions told for it, each told once (at most a few): forgotten once a decision is
    /// written. A list, not a hash set: 24 bytes, not 48.
    announced: Vec<Announced>,
    /// The CSR as read from the apiserver by the reconcile that retried it last: its next
    /// reconcile decides on it while the cached version is the one read. Forgotten at the next
    /// settle.
    read: Option<Box<CsrObject>>,
    /// The node name of the client certificate whose approval was written on it (or perhaps
    /// written: no answer), counted by the ledger ([`WrittenApprovals`]) until the cache shows it.
    approved_for: Option<Box<str>>,
}

/// The table behind the one lock.
#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<Arc<str>, Entry>,
    /// The order in which the queued CSRs run.
    order: Order,
    /// How many entries' phases wait on a retry.
    waiting: usize,
    /// One lock per node whose client CSR or serving CSR is being decided.
    turns: HashMap<Box<str>, Arc<tokio::sync::Mutex<()>>>,
}

/// What the controller knows of each CSR, shared by the dispatch loop and every reconcile.
#[derive(Debug)]
pub(crate) struct Memory {
    table: Mutex<Table>,
    metrics: Metrics,
}

/// The turn of one node's CSR decision: while it is held, no other client CSR for the same node
/// name, and no other serving CSR of the same node, is decided.
pub(super) struct NodeTurn {
    memory: Arc<Memory>,
    node: Box<str>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for NodeTurn {
    fn drop(&mut self) {
        drop(self.guard.take());
        let turns = &mut self.memory.lock().turns;
        // Only the table holds the lock now: no one waits for it.
        if turns.get(&self.node).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            turns.remove(&self.node);
        }
    }
}

impl Memory {
    /// An empty table that reports to `metrics`.
    pub(crate) fn new(metrics: Metrics) -> Memory {
        Memory { table: Mutex::default(), metrics }
    }

    /// Queues `name` (created by `requester`) to run as soon as its turn comes: a delayed CSR is
    /// made ready, a running one runs again when it finishes, a ready one keeps its place.
    pub(super) fn trigger(&self, name: Arc<str>, requester: Arc<str>) {
        self.lock().queue(name, Some(requester), Move::Triggered);
    }

    /// The next ready CSR, the next requester's first, now running; `None` when none is ready.
    pub(super) fn next(&self) -> Option<Arc<str>> {
        let mut table = self.lock();
        while let Some(name) = table.order.pop_ready() {
            if table.queue(name.clone(), None, Move::Taken) == Some(Queued::Running { again: false }) {
                return Some(name);
            }
        }
        None
    }

    /// Ends the run of `name`: ready again if it was triggered while it ran, else delayed by
    /// `retry_after` from `now`, else out of the queue.
    pub(super) fn finish(&self, name: Arc<str>, retry_after: Option<Duration>, now: Instant) {
        self.lock().queue(name, None, Move::Finished(retry_after.map(|delay| now + delay)));
    }

    /// Makes every delayed CSR due by `now` ready.
    pub(super) fn promote_due(&self, now: Instant) {
        let mut table = self.lock();
        while let Some(name) = table.order.pop_due(now) {
            table.queue(name, None, Move::Due);
        }
    }

    /// When the first delayed CSR is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.lock().order.next_due()
    }

    /// Whether `name` is queued in any state.
    pub(super) fn is_queued(&self, name: &str) -> bool {
        self.lock().by_name.get(name).is_some_and(|entry| entry.queued.is_some())
    }

    /// How many CSRs are queued, in any state.
    pub(super) fn queued(&self) -> usize {
        self.lock().by_name.values().filter(|entry| entry.queued.is_some()).count()
    }

    /// Records what a reconcile of `csr` did, and answers when to reconcile it again by itself
    /// ([`Phase::retry_after`]); `None` also for a CSR found gone. The one writer of a CSR's phase,
    /// its decisions told, the read kept for its next reconcile and its client approval written.
    pub(super) fn settle(&self, csr: &CsrObject, outcome: Outcome) -> Option<Duration> {
        let read = matches!(outcome, Outcome::Retried { read: true, .. }).then(|| Box::new(csr.clone()));
        let approved_for = match outcome {
            Outcome::Write { result: WriteResult::Success | WriteResult::Error, approval: true } => {
                client_node(&csr.submission()).map(Box::from)
            }
            _ => None,
        };
        let mut table = self.lock();
        let Table { by_name, waiting, .. } = &mut *table;
        let before = by_name.get(&csr.name).and_then(|entry| entry.known.as_ref());
        let was_waiting = before.is_some_and(|known| known.phase.waits());
        let before = before.filter(|known| known.uid == csr.uid).map(|known| &known.phase);
        let now = Instant::now();
        let phase = Phase::after(before, outcome, csr, now)?;
        let retry_after = phase.retry_after(now);
        *waiting = (*waiting + usize::from(phase.waits())).saturating_sub(usize::from(was_waiting));
        let entry = by_name.entry(csr.name.clone()).or_insert_with(|| Entry {
            requester: csr.username.clone(),
            queued: None,
            known: None,
        });
        entry.known.take_if(|known| known.uid != csr.uid);
        let known = entry.known.get_or_insert_with(|| {
            Box::new(Known {
                uid: csr.uid.clone(),
                phase: Phase::Excused,
                announced: Vec::new(),
                read: None,
                approved_for: None,
            })
        });
        match outcome {
            Outcome::Retried { announced: Some(told), .. } | Outcome::Excused { announced: Some(told) } => {
                known.announced.push(told);
            }
            Outcome::Write { result: WriteResult::Success, .. } => known.announced = Vec::new(),
            _ => {}
        }
        if approved_for.is_some() {
            known.approved_for = approved_for;
        }
        known.phase = phase;
        known.read = read;
        self.metrics.set_waiting_retry(*waiting);
        retry_after
    }

    /// The CSR kept as read for `cached` (settled as retried on what was read), when it is the
    /// same CSR at the same version: its request and everything else as the apiserver holds it.
    pub(super) fn kept_read(&self, cached: &CsrObject) -> Option<CsrObject> {
        let table = self.lock();
        let known = table.known(cached)?;
        let read = known.read.as_deref().filter(|read| read.resource_version == cached.resource_version)?;
        Some(read.clone())
    }

    /// Forgets what was learned of every CSR that `csrs` does not hold undecided (under the same
    /// uid), once `csrs` holds a complete list, and every entry with nothing left: not queued,
    /// nothing learned. Then gives back the room a drained burst took.
    pub(super) fn prune(&self, csrs: &Cache<CsrObject>) {
        if !csrs.is_ready() {
            return;
        }
        let mut table = self.lock();
        let Table { by_name, order, waiting, .. } = &mut *table;
        by_name.retain(|name, entry| {
            let undecided = |known: &Known| csrs.get(name).is_some_and(|csr| csr.uid == known.uid && !csr.is_decided());
            if let Some(known) = entry.known.take_if(|known| !undecided(known))
                && known.phase.waits()
            {
                *waiting = waiting.saturating_sub(1);
            }
            entry.queued.is_some() || entry.known.is_some()
        });
        if sparse(by_name.len(), by_name.capacity()) {
            by_name.shrink_to(by_name.len() * 2);
        }
        order.give_back_room();
        self.metrics.set_waiting_retry(*waiting);
    }

    /// Prunes the table against `csrs` every [`PRUNE_PERIOD`], for as long as it runs.
    pub(super) async fn keep_pruned(self: Arc<Self>, csrs: Cache<CsrObject>) {
        loop {
            tokio::time::sleep(PRUNE_PERIOD).await;
            self.prune(&csrs);
        }
    }

    /// Waits for the turn to decide `csr` when it is a client CSR for a node name
    /// ([`client_node`]) or a serving CSR of a node ([`serving_node`]): one such CSR per node
    /// at a time, so the one client certificate per Machine cannot be given twice, nor two
    /// serving CSRs of one node be judged against each other, by reconciles running at once.
    /// `None` (no wait) for any other CSR. The table's lock is not held while waiting.
    pub(super) async fn node_turn(self: &Arc<Self>, csr: &CsrObject) -> Option<NodeTurn> {
        let node: Box<str> = {
            let sub = csr.submission();
            serving_node(&sub).map(Box::from).or_else(|| client_node(&sub).map(Box::from))?
        };
        let turn = self.lock().turns.entry(node.clone()).or_default().clone();
        let guard = turn.lock_owned().await;
        Some(NodeTurn { memory: self.clone(), node, guard: Some(guard) })
    }

    /// Whether the decision `told` was already announced for `csr`.
    pub(super) fn announced(&self, csr: &CsrObject, told: Announced) -> bool {
        self.read(csr, |known| known.announced.contains(&told))
    }

    /// Why a reconcile of `csr` has nothing to do, if it has not: no request can name it (and
    /// that was told), or our decision was written on exactly this version, so a cache still
    /// holding it is behind (evaluating it again could only conflict).
    pub(super) fn done_with(&self, csr: &CsrObject) -> Option<Done> {
        match &self.lock().known(csr)?.phase {
            Phase::Unaddressable => Some(Done::Unaddressable),
            Phase::Written { resource_version } if csr.resource_version.as_ref() == Some(resource_version) => {
                Some(Done::Written)
            }
            _ => None,
        }
    }

    /// How long `csr` is still held back at `now`, when the apiserver asked to wait
    /// ([`Outcome::Throttled`]): a reconcile triggered meanwhile sends nothing and runs again then.
    pub(super) fn held_back(&self, csr: &CsrObject, now: Instant) -> Option<Duration> {
        match self.lock().known(csr)?.phase {
            Phase::Throttled { until, .. } if until > now => Some(until - now),
            _ => None,
        }
    }

    /// Whether no decision of ours is outstanding for `csr`: held for a human, not the
    /// approver's, a dry run's, or unaddressable.
    pub(super) fn is_excused(&self, csr: &CsrObject) -> bool {
        self.read(csr, |known| matches!(known.phase, Phase::Excused | Phase::Unaddressable))
    }

    /// True when some CSR's last evaluation waits on a Machine, a Node or the pending brake.
    pub(super) fn anyone_waiting_on_cluster(&self) -> bool {
        let table = self.lock();
        let mut phases = table.by_name.values().filter_map(|entry| entry.known.as_ref().map(|known| &known.phase));
        phases.any(|phase| matches!(phase, Phase::Retrying { on_cluster: true, .. }))
    }

    /// `read` of what was learned of `csr`; false when nothing was.
    fn read(&self, csr: &CsrObject, read: impl FnOnce(&Known) -> bool) -> bool {
        self.lock().known(csr).is_some_and(read)
    }

    /// The table, also after a reconcile panicked while holding it: each change is made whole
    /// before anything can panic, so it stays consistent.
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    /// What was learned of `csr`, under its uid.
    fn known(&self, csr: &CsrObject) -> Option<&Known> {
        self.by_name.get(&csr.name)?.known.as_deref().filter(|known| known.uid == csr.uid)
    }

    /// Moves `name` in the queue by `event` ([`Queued::after`]) and keeps the order in step; an
    /// entry is made for it only by a trigger, which gives its `requester`. Answers where it is now.
    fn queue(&mut self, name: Arc<str>, requester: Option<Arc<str>>, event: Move) -> Option<Queued> {
        let entry = match requester {
            Some(requester) => {
                self.by_name.entry(name.clone()).or_insert_with(|| Entry { requester, queued: None, known: None })
            }
            None => self.by_name.get_mut(&name)?,
        };
        let (before, after) = (entry.queued, Queued::after(entry.queued, event));
        entry.queued = after;
        if before == after {
            return after;
        }
        if let Some(Queued::Delayed(due)) = before {
            self.order.undelay(due, &name);
        }
        match after {
            Some(Queued::Ready) => self.order.push_ready(entry.requester.clone(), name),
            Some(Queued::Delayed(due)) => self.order.delay(due, name),
            Some(Queued::Running { .. }) | None => {}
        }
        after
    }
}

/// The order in which the queued CSRs run: the ready ones in a ring of requesters, the delayed
/// ones by when they are due. It holds names only; where each CSR is in the queue is its entry's,
/// and [`Table::queue`] keeps the order in step.
#[derive(Debug, Default)]
struct Order {
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

impl Order {
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

    /// Takes the next ready CSR: the first of the requester whose turn it is, which goes last in
    /// the ring if it has more.
    fn pop_ready(&mut self) -> Option<Arc<str>> {
        let (requester, name) = self.ring.pop_front()?;
        match self.ready.get_mut(&requester).map(|rest| rest.as_mut().and_then(|rest| rest.pop_front())) {
            Some(Some(after)) => self.ring.push_back((requester, after)),
            Some(None) | None => {
                self.ready.remove(&requester);
            }
        }
        Some(name)
    }

    /// Delays `name` until `due`.
    fn delay(&mut self, due: Instant, name: Arc<str>) {
        self.delayed.insert((due, name));
    }

    /// Takes `name` out of the CSRs delayed until `due`.
    fn undelay(&mut self, due: Instant, name: &Arc<str>) {
        self.delayed.remove(&(due, name.clone()));
    }

    /// Takes the first delayed CSR due by `now`, if any.
    fn pop_due(&mut self, now: Instant) -> Option<Arc<str>> {
        if self.delayed.first().is_some_and(|(due, _)| *due <= now) {
            self.delayed.pop_first().map(|(_, name)| name)
        } else {
            None
        }
    }

    /// When the first delayed CSR is due.
    fn next_due(&self) -> Option<Instant> {
        self.delayed.first().map(|(due, _)| *due)
    }

    /// Frees most of the room a drained burst left (a storm's tables would otherwise keep the
    /// size of its peak): the ready table or the ring at most a quarter full is cut to twice what
    /// it holds.
    fn give_back_room(&mut self) {
        if sparse(self.ready.len(), self.ready.capacity()) {
            self.ready.shrink_to(self.ready.len() * 2);
        }
        if sparse(self.ring.len(), self.ring.capacity()) {
            self.ring.shrink_to(self.ring.len() * 2);
        }
    }
}

impl WrittenApprovals for Memory {
    fn approvals_for(&self, node: &str) -> Vec<(Uid, String)> {
        let table = self.lock();
        let written = table.by_name.iter().filter_map(|(name, entry)| {
            let known = entry.known.as_ref()?;
            (known.approved_for.as_deref() == Some(node)).then(|| (known.uid.clone(), String::from(&**name)))
        });
        written.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::room::KEPT_ROOM;
    use crate::kubernetes::csr_cache;
    use crate::policy::{DecisionKind, Reason};
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
    use kube::runtime::watcher::Event;
    use testkit::request::Request;

    const TOLD: Announced = (DecisionKind::Retry, Reason::DNSUnavailable);

    /// A pending CSR `name` of uid `uid` at resourceVersion `version`.
    fn csr(name: &str, uid: &str, version: &str) -> CsrObject {
        let mut csr = CsrObject::from(CertificateSigningRequest::default());
        (csr.name, csr.uid, csr.resource_version) = (name.into(), uid.into(), Some(version.into()));
        csr
    }

    /// A client CSR `name` (uid `uid-<name>`) for node name `node`.
    fn client(name: &str, node: &str) -> CsrObject {
        let usages = ["digital signature", "client auth"];
        let pem = Request::node(node).pem();
        let mut csr = testkit::csr::object(name, crate::policy::KUBELET_CLIENT_SIGNER, &usages, &pem);
        csr.metadata.uid = Some(format!("uid-{name}"));
        CsrObject::from(csr)
    }

    fn retried(on_cluster: bool) -> Outcome {
        Outcome::Retried { on_cluster, announced: None, read: false }
    }

    fn write(result: WriteResult) -> Outcome {
        Outcome::Write { result, approval: false }
    }

    fn millis(delay: Option<Duration>) -> u128 {
        delay.map_or(0, |delay| delay.as_millis())
    }

    /// The memory and what its gauge says.
    fn waiting(memory: &Memory) -> String {
        let text = memory.metrics.encode().unwrap_or_default();
        let line = text.lines().find(|line| line.starts_with("node_csr_approver_csrs_waiting_retry "));
        line.unwrap_or_default().to_owned()
    }

    fn gauge(count: usize) -> String {
        format!("node_csr_approver_csrs_waiting_retry {count}")
    }

    /// A cache that has listed exactly `csrs`.
    fn listed(csrs: &[&CsrObject]) -> Cache<CsrObject> {
        let (cache, mut writer) = csr_cache::cache::<CsrObject>();
        writer.apply(Event::<CsrObject>::Init);
        for csr in csrs {
            writer.apply(Event::InitApply((*csr).clone()));
        }
        writer.apply(Event::<CsrObject>::InitDone);
        cache
    }

    fn names(memory: &Memory) -> Vec<String> {
        let mut names: Vec<String> = memory.lock().by_name.keys().map(|name| name.to_string()).collect();
        names.sort();
        names
    }

    fn written_at(memory: &Memory, csr: &CsrObject) -> bool {
        memory.done_with(csr) == Some(Done::Written)
    }

    fn unaddressable(memory: &Memory, csr: &CsrObject) -> bool {
        memory.done_with(csr) == Some(Done::Unaddressable)
    }

    /// Takes every ready CSR, in order, finishing each at once with no retry.
    fn drain(memory: &Memory) -> Vec<String> {
        let mut order = Vec::new();
        while let Some(name) = memory.next() {
            assert!(order.len() < 100, "the queue never drains: {order:?}");
            order.push(name.to_string());
            memory.finish(name, None, Instant::now());
        }
        order
    }

    #[test]
    fn retries_count_per_csr_and_start_afresh_for_a_new_uid() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert_eq!(millis(memory.settle(&a, retried(false))), 2000);
        assert_eq!(millis(memory.settle(&a, retried(true))), 4000);
        assert!(memory.anyone_waiting_on_cluster());
        assert_eq!(millis(memory.settle(&csr("csr-b", "2", "1"), retried(false))), 2000);
        assert_eq!(waiting(&memory), gauge(2));
        assert_eq!(millis(memory.settle(&csr("csr-a", "3", "1"), retried(false))), 2000);
        assert!(!memory.anyone_waiting_on_cluster());
        assert_eq!(waiting(&memory), gauge(2));
        let delays: Vec<u128> = (0..7).map(|_| millis(memory.settle(&a, retried(false)))).collect();
        assert_eq!(delays, [2000, 4000, 8000, 16000, 32000, 60000, 60000]);
    }

    #[test]
    fn failed_writes_and_conflicts_back_off_on_their_own_short_scales() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        let writes: Vec<u128> = (0..7).map(|_| millis(memory.settle(&a, write(WriteResult::Error)))).collect();
        assert_eq!(writes, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        let conflicts: Vec<u128> = (0..10).map(|_| millis(memory.settle(&a, write(WriteResult::Conflict)))).collect();
        assert_eq!(conflicts, [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(waiting(&memory), gauge(1));
        assert_eq!(millis(memory.settle(&a, retried(false))), 2000, "evaluation retries count apart");
        assert_eq!(memory.settle(&a, write(WriteResult::NotFound)), None, "gone");
        assert_eq!(waiting(&memory), gauge(1), "as it was");
    }

    #[test]
    fn a_failed_read_is_retried_as_a_failed_write_is_and_decides_nothing() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        let reads: Vec<u128> = (0..6).map(|_| millis(memory.settle(&a, Outcome::ReadFailed))).collect();
        assert_eq!(reads, [500, 1000, 2000, 4000, 8000, 8000]);
        assert_eq!(waiting(&memory), gauge(1));
        assert!(!written_at(&memory, &a) && !memory.is_excused(&a), "nothing is decided or excused");
        assert_eq!(millis(memory.settle(&a, write(WriteResult::Error))), 8000, "one count of failures");
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_csr_waits_the_longer_of_its_backoff_and_the_wait_asked_and_is_held_back() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        let throttled = |seconds| Outcome::Throttled { wait: Duration::from_secs(seconds) };
        let waits: Vec<u128> = [3, 1, 1, 0, 120].map(|seconds| millis(memory.settle(&a, throttled(seconds)))).into();
        assert_eq!(waits, [3000, 1000, 2000, 4000, 120_000], "one count of failures, the backoff's floor");
        assert_eq!(waiting(&memory), gauge(1));
        let now = Instant::now();
        assert_eq!(memory.held_back(&a, now), Some(Duration::from_secs(120)));
        assert_eq!(memory.held_back(&a, now + Duration::from_secs(119)), Some(Duration::from_secs(1)));
        assert_eq!(memory.held_back(&a, now + Duration::from_secs(120)), None, "the wait is over");
        assert_eq!(memory.held_back(&csr("csr-a", "2", "1"), now), None, "another CSR of the name");
        assert_eq!(millis(memory.settle(&a, write(WriteResult::Error))), 8000, "counted with failed writes");
        assert_eq!(memory.held_back(&a, now), None, "a failure without a wait holds nothing back");
        memory.settle(&a, throttled(2));
        assert_eq!(millis(memory.settle(&a, write(WriteResult::Success))), 0);
        assert_eq!(memory.held_back(&a, now), None, "written");
        assert_eq!(waiting(&memory), gauge(0));
    }

    #[test]
    fn a_read_is_kept_for_the_next_reconcile_of_the_same_version_only() {
        let memory = Memory::new(Metrics::new());
        let mut read = csr("csr-a", "1", "7");
        read.certificate_issued = true;
        let kept = Outcome::Retried { on_cluster: false, announced: None, read: true };
        assert_eq!(memory.kept_read(&read), None, "nothing kept before a reconcile settled");
        memory.settle(&read, retried(false));
        assert_eq!(memory.kept_read(&read), None, "a retry on the cached CSR keeps nothing");
        memory.settle(&read, kept);
        assert_eq!(memory.kept_read(&csr("csr-a", "1", "7")), Some(read.clone()), "the read, not the cached one");
        assert_eq!(memory.kept_read(&csr("csr-a", "1", "8")), None, "another version is read again");
        assert_eq!(memory.kept_read(&csr("csr-a", "2", "7")), None, "another CSR of the name is read again");
        memory.settle(&read, Outcome::Excused { announced: None });
        assert_eq!(memory.kept_read(&read), None, "each settle forgets the read");
        memory.settle(&read, kept);
        memory.settle(&read, write(WriteResult::Conflict));
        assert_eq!(memory.kept_read(&read), None, "kept only after a retry");
    }

    #[test]
    fn a_csr_that_retried_and_is_now_held_does_not_wait() {
        let memory = Memory::new(Metrics::new());
        let (a, b) = (csr("csr-a", "1", "1"), csr("csr-b", "2", "1"));
        memory.settle(&a, retried(false));
        memory.settle(&b, write(WriteResult::Conflict));
        assert_eq!(waiting(&memory), gauge(2));
        assert_eq!(memory.settle(&a, Outcome::Excused { announced: None }), None);
        assert_eq!(waiting(&memory), gauge(1), "held: no retry is outstanding");
        assert!(memory.is_excused(&a));
        memory.settle(&b, Outcome::Unaddressable);
        assert_eq!(waiting(&memory), gauge(0));
        memory.settle(&csr("csr-c", "3", "1"), Outcome::Excused { announced: None });
        assert_eq!(waiting(&memory), gauge(0));
    }

    #[test]
    fn a_written_decision_holds_for_its_version_until_the_csr_is_pruned() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "7");
        memory.settle(&a, write(WriteResult::Error));
        memory.settle(&a, Outcome::Retried { on_cluster: false, announced: Some(TOLD), read: false });
        assert!(memory.announced(&a, TOLD));
        assert!(!written_at(&memory, &a));
        assert_eq!(memory.settle(&a, write(WriteResult::Success)), None);
        assert!(written_at(&memory, &a));
        assert!(!written_at(&memory, &csr("csr-a", "1", "8")), "a newer version is evaluated");
        assert!(!written_at(&memory, &CsrObject { resource_version: None, ..a.clone() }));
        assert!(!written_at(&memory, &csr("csr-a", "2", "7")), "another CSR of the name");
        assert_eq!(waiting(&memory), gauge(0), "the retries are done with");
        assert!(!memory.announced(&a, TOLD));
        assert!(!memory.is_excused(&a), "a written CSR is not excused");
        memory.prune(&listed(&[&a]));
        assert!(written_at(&memory, &a), "undecided in the cache: kept");
        memory.prune(&listed(&[]));
        assert!(!written_at(&memory, &a), "gone: forgotten");
    }

    #[test]
    fn an_unaddressable_csr_is_remembered_per_uid_and_excused() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert!(!unaddressable(&memory, &a));
        memory.settle(&a, Outcome::Unaddressable);
        assert!(unaddressable(&memory, &a) && memory.is_excused(&a));
        assert!(!unaddressable(&memory, &csr("csr-a", "2", "1")));
    }

    #[test]
    fn an_excuse_holds_for_its_uid_until_the_next_retry() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert!(!memory.is_excused(&a));
        memory.settle(&a, Outcome::Excused { announced: Some((DecisionKind::Hold, Reason::DNSUnavailable)) });
        assert!(memory.is_excused(&a));
        assert!(!memory.is_excused(&csr("csr-a", "2", "1")));
        memory.settle(&a, retried(false));
        assert!(!memory.is_excused(&a));
        assert!(memory.announced(&a, (DecisionKind::Hold, Reason::DNSUnavailable)), "told once per CSR");
    }

    #[test]
    fn announcements_are_remembered_per_kind_and_reason() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert!(!memory.announced(&a, TOLD));
        memory.settle(&a, Outcome::Retried { on_cluster: false, announced: Some(TOLD), read: false });
        assert!(memory.announced(&a, TOLD));
        assert!(!memory.announced(&a, (DecisionKind::Retry, Reason::NodeNotFound)));
        assert!(!memory.announced(&a, (DecisionKind::Hold, Reason::DNSUnavailable)));
        assert!(!memory.announced(&csr("csr-a", "2", "1"), TOLD));
    }

    #[test]
    fn pruning_forgets_what_was_learned_of_csrs_decided_or_gone_once_the_cache_is_complete() {
        let memory = Memory::new(Metrics::new());
        let (cache, mut writer) = csr_cache::cache::<CsrObject>();
        let kept = csr("kept", "1", "1");
        let mut decided = csr("decided", "2", "1");
        let approved = CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        };
        decided.pending.get_or_insert_default().conditions = [approved.into()].into();
        for object in [&kept, &decided, &csr("gone", "3", "1"), &csr("recreated", "4", "1")] {
            memory.settle(object, retried(false));
        }
        memory.settle(&csr("excused", "6", "1"), Outcome::Excused { announced: None });
        assert_eq!(waiting(&memory), gauge(4));
        memory.prune(&cache);
        assert_eq!(waiting(&memory), gauge(4), "an incomplete cache prunes nothing");
        assert_eq!(names(&memory).len(), 5);
        writer.apply(Event::<CsrObject>::Init);
        for object in [&kept, &decided, &csr("recreated", "5", "1")] {
            writer.apply(Event::InitApply(object.clone()));
        }
        writer.apply(Event::<CsrObject>::InitDone);
        memory.prune(&cache);
        assert_eq!(waiting(&memory), gauge(1));
        assert_eq!(names(&memory), ["kept"], "an excused CSR gone too");
    }

    #[test]
    fn a_queued_csr_keeps_its_place_while_what_was_learned_of_it_is_forgotten() {
        let memory = Memory::new(Metrics::new());
        let (a, b) = (csr("a", "1", "1"), csr("b", "2", "1"));
        for csr in [&a, &b] {
            memory.trigger(csr.name.clone(), "n".into());
        }
        memory.settle(&a, retried(false));
        assert_eq!(waiting(&memory), gauge(1));
        memory.prune(&listed(&[]));
        assert_eq!(waiting(&memory), gauge(0), "gone: its retry is not waited for");
        assert!(!memory.anyone_waiting_on_cluster());
        assert!(memory.is_queued("a") && memory.is_queued("b"), "each runs, and finds it gone");
        assert_eq!(drain(&memory), ["a", "b"]);
        assert_eq!(names(&memory), ["a", "b"], "out of the queue, forgotten at the next pruning");
        assert_eq!(memory.queued(), 0);
        memory.settle(&b, Outcome::Excused { announced: None });
        memory.prune(&listed(&[&b]));
        assert_eq!(names(&memory), ["b"], "an undecided CSR's excuse is kept");
        assert!(memory.is_excused(&b));
    }

    /// A burst pruned down to `left` CSRs: the table is cut to twice what is left, not to what is
    /// left or less, so the next arrivals do not grow it again at once.
    #[test]
    fn pruning_a_drained_burst_gives_back_the_room_it_took_but_twice_what_is_left() {
        let left = 600;
        let memory = Memory::new(Metrics::new());
        let csrs: Vec<CsrObject> = (0..5_000).map(|i| csr(&format!("csr-{i}"), &i.to_string(), "1")).collect();
        for csr in &csrs {
            memory.settle(csr, retried(false));
        }
        let full = memory.lock().by_name.capacity();
        memory.prune(&listed(&csrs[..left].iter().collect::<Vec<_>>()));
        let pruned = memory.lock().by_name.capacity();
        assert!(full >= 5_000 && pruned < full / 2, "{full} then {pruned}");
        assert!(pruned >= 2 * left, "{pruned} for {left}");
        memory.prune(&listed(&[]));
        assert!(memory.lock().by_name.capacity() <= 2 * KEPT_ROOM);
    }

    /// Time is paused: it advances only while every task waits.
    #[tokio::test(start_paused = true)]
    async fn the_table_is_pruned_every_five_seconds() {
        let memory = Arc::new(Memory::new(Metrics::new()));
        memory.settle(&csr("gone", "1", "1"), retried(false));
        let pruning = tokio::spawn(memory.clone().keep_pruned(listed(&[])));
        tokio::time::sleep(PRUNE_PERIOD - Duration::from_millis(10)).await;
        assert_eq!(names(&memory), ["gone"], "not before the period");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(names(&memory).is_empty(), "pruned");
        memory.settle(&csr("gone", "1", "1"), retried(false));
        tokio::time::sleep(PRUNE_PERIOD).await;
        assert!(names(&memory).is_empty(), "and again");
        pruning.abort();
    }

    #[test]
    fn requesters_take_turns_and_each_keeps_its_arrival_order() {
        let memory = Memory::new(Metrics::new());
        for i in 0..4 {
            memory.trigger(format!("flood-{i}").into(), "system:node:flood".into());
        }
        memory.trigger("other-0".into(), "system:node:other".into());
        memory.trigger("third-0".into(), "system:node:third".into());
        memory.trigger("other-1".into(), "system:node:other".into());
        assert_eq!(memory.queued(), 7);
        assert_eq!(drain(&memory), ["flood-0", "other-0", "third-0", "flood-1", "other-1", "flood-2", "flood-3"]);
        assert_eq!(memory.queued(), 0);
    }

    #[test]
    fn a_csr_triggered_twice_while_ready_runs_once() {
        let memory = Memory::new(Metrics::new());
        memory.trigger("a".into(), "n".into());
        memory.trigger("a".into(), "n".into());
        assert_eq!(drain(&memory), ["a"]);
    }

    #[test]
    fn a_csr_triggered_while_running_runs_again_after_it_finishes() {
        let memory = Memory::new(Metrics::new());
        memory.trigger("a".into(), "n".into());
        assert_eq!(memory.next().as_deref(), Some("a"));
        memory.trigger("a".into(), "n".into());
        assert_eq!(memory.next(), None, "not twice at once");
        memory.finish("a".into(), Some(Duration::from_secs(60)), Instant::now());
        assert_eq!(memory.next_due(), None, "the trigger wins over the later retry");
        assert_eq!(drain(&memory), ["a"]);
    }

    #[test]
    fn a_retry_waits_until_it_is_due_unless_triggered() {
        let memory = Memory::new(Metrics::new());
        let start = Instant::now();
        memory.trigger("a".into(), "n".into());
        memory.trigger("b".into(), "n".into());
        for name in ["a", "b"] {
            assert_eq!(memory.next().as_deref(), Some(name));
            memory.finish(name.into(), Some(Duration::from_secs(2)), start);
        }
        assert_eq!(memory.next(), None);
        assert_eq!(memory.next_due(), Some(start + Duration::from_secs(2)));
        memory.promote_due(start + Duration::from_secs(1));
        assert_eq!(memory.next(), None, "not due yet");
        memory.trigger("b".into(), "n".into());
        assert_eq!(drain(&memory), ["b"], "a trigger makes a delayed CSR ready at once");
        assert_eq!(memory.next_due(), Some(start + Duration::from_secs(2)));
        memory.promote_due(start + Duration::from_secs(2));
        assert_eq!(memory.next_due(), None);
        assert_eq!(drain(&memory), ["a"]);
        assert!(!memory.is_queued("a"));
    }

    #[test]
    fn a_finished_csr_leaves_the_queue_and_a_retried_one_stays() {
        let memory = Memory::new(Metrics::new());
        memory.trigger("done".into(), "n".into());
        memory.trigger("retried".into(), "n".into());
        for name in ["done", "retried"] {
            assert_eq!(memory.next().as_deref(), Some(name));
        }
        assert!(memory.is_queued("done"), "running");
        memory.finish("done".into(), None, Instant::now());
        memory.finish("retried".into(), Some(Duration::from_secs(1)), Instant::now());
        assert!(!memory.is_queued("done"));
        assert!(memory.is_queued("retried"));
        assert_eq!(memory.queued(), 1);
    }

    #[test]
    fn finishing_what_does_not_run_changes_nothing() {
        let memory = Memory::new(Metrics::new());
        memory.trigger("ready".into(), "n".into());
        memory.finish("ready".into(), None, Instant::now());
        memory.finish("unknown".into(), Some(Duration::from_secs(1)), Instant::now());
        memory.settle(&csr("settled", "1", "1"), retried(false));
        memory.finish("settled".into(), Some(Duration::from_secs(1)), Instant::now());
        assert_eq!(memory.next_due(), None);
        assert!(!memory.is_queued("settled"), "settled, never triggered: not queued");
        assert_eq!(drain(&memory), ["ready"]);
    }

    #[test]
    fn a_client_approval_written_or_perhaps_written_is_listed_until_forgotten() {
        let memory = Memory::new(Metrics::new());
        let (a, b, c) = (client("a", "n1"), client("b", "n1"), client("c", "n2"));
        let approved = |result| Outcome::Write { result, approval: true };
        memory.settle(&a, approved(WriteResult::Success));
        memory.settle(&b, approved(WriteResult::Error));
        memory.settle(&c, approved(WriteResult::Conflict));
        memory.settle(&c, Outcome::Write { result: WriteResult::Success, approval: false });
        let listed_for = |node| {
            let mut names: Vec<String> = memory.approvals_for(node).into_iter().map(|(_, name)| name).collect();
            names.sort();
            names
        };
        assert_eq!(listed_for("n1"), ["a", "b"]);
        assert!(listed_for("n2").is_empty(), "refused, or not an approval");
        assert!(memory.approvals_for("n1").contains(&(Uid::from("uid-a"), "a".to_owned())), "each with its uid");
        memory.settle(&b, write(WriteResult::Conflict));
        assert_eq!(listed_for("n1"), ["a", "b"], "kept across the next settles");
        memory.settle(&csr("a", "other", "1"), retried(false));
        assert_eq!(listed_for("n1"), ["b"], "another CSR of the name");
        let mut serving = csr("s", "s", "1");
        serving.signer_name = crate::policy::KUBELET_SERVING_SIGNER.into();
        memory.settle(&serving, approved(WriteResult::Success));
        assert!(memory.lock().known(&serving).is_some_and(|known| known.approved_for.is_none()), "not a client CSR");
        memory.prune(&listed(&[]));
        assert!(listed_for("n1").is_empty(), "gone: forgotten");
    }

    #[tokio::test]
    async fn client_csrs_of_one_node_name_take_turns_and_others_do_not_wait() {
        let memory = Arc::new(Memory::new(Metrics::new()));
        let first = memory.node_turn(&client("a", "n1")).await;
        assert!(first.is_some());
        let second = client("b", "n1");
        let waited = tokio::time::timeout(Duration::from_millis(50), memory.node_turn(&second)).await;
        assert!(waited.is_err(), "the same node name waits");
        let at_once = Duration::from_secs(5);
        let other = tokio::time::timeout(at_once, memory.node_turn(&client("c", "n2"))).await;
        assert!(other.as_ref().is_ok_and(Option::is_some), "another node name does not wait");
        let pem = Request::node("n1").pem();
        let serving = CsrObject::from(testkit::csr::object("d", crate::policy::KUBELET_SERVING_SIGNER, &[], &pem));
        let no_turn = tokio::time::timeout(at_once, memory.node_turn(&serving)).await;
        assert!(no_turn.is_ok_and(|turn| turn.is_none()), "neither a client CSR nor a node's serving CSR: no turn");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), memory.node_turn(&second)).await;
        assert!(second.is_ok_and(|turn| turn.is_some()), "the next one's turn");
        drop(other);
        assert!(memory.lock().turns.is_empty(), "no lock is kept");
    }

    #[tokio::test]
    async fn serving_csrs_of_one_node_take_turns_with_each_other_and_its_client_csrs() {
        use testkit::csr::node_serving as serving;
        let memory = Arc::new(Memory::new(Metrics::new()));
        let first = memory.node_turn(&CsrObject::from(serving("a", "n1", 1, None))).await;
        assert!(first.is_some());
        let wait = Duration::from_millis(50);
        let second = CsrObject::from(serving("b", "n1", 2, None));
        assert!(tokio::time::timeout(wait, memory.node_turn(&second)).await.is_err(), "the same node waits");
        let client = client("c", "n1");
        assert!(tokio::time::timeout(wait, memory.node_turn(&client)).await.is_err(), "its client CSR waits too");
        let other = CsrObject::from(serving("d", "n2", 1, None));
        let other = tokio::time::timeout(Duration::from_secs(5), memory.node_turn(&other)).await;
        assert!(other.is_ok_and(|turn| turn.is_some()), "another node does not wait");
        let waiting = tokio::spawn({
            let memory = memory.clone();
            async move { memory.node_turn(&second).await.is_some() }
        });
        tokio::time::sleep(wait).await;
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(second.is_ok_and(|turn| turn.is_ok_and(|turn| turn)), "the next one's turn");
        assert!(memory.lock().turns.is_empty(), "released: no lock is kept");
    }

    #[test]
    fn the_ring_takes_requesters_in_turn_and_each_one_s_csrs_in_arrival_order() {
        let mut order = Order::default();
        for (requester, name) in [("flood", "f0"), ("flood", "f1"), ("other", "o0"), ("flood", "f2"), ("other", "o1")] {
            order.push_ready(requester.into(), name.into());
        }
        let taken: Vec<String> =
            std::iter::from_fn(|| order.pop_ready()).take(10).map(|name| name.to_string()).collect();
        assert_eq!(taken, ["f0", "o0", "f1", "o1", "f2"]);
        assert!(order.ready.is_empty() && order.ring.is_empty());
    }

    #[test]
    fn delayed_csrs_come_due_in_time_order_and_one_taken_out_never_does() {
        let mut order = Order::default();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        order.delay(at(3), "c".into());
        order.delay(at(1), "a".into());
        order.delay(at(2), "b".into());
        order.undelay(at(2), &"b".into());
        assert_eq!(order.next_due(), Some(at(1)));
        assert_eq!(order.pop_due(at(0)), None, "not due yet");
        assert_eq!(order.pop_due(at(1)).as_deref(), Some("a"), "due at the instant");
        assert_eq!(order.pop_due(at(2)), None, "taken out");
        assert_eq!(order.pop_due(at(5)).as_deref(), Some("c"));
        assert_eq!(order.pop_due(at(5)), None);
        assert_eq!(order.next_due(), None);
    }

    /// A burst drained to `left` ready CSRs (of as many requesters): the room is cut to twice what
    /// is left, not to what is left or less, so the next arrivals do not grow it again at once.
    #[test]
    fn a_drained_burst_gives_back_the_room_it_took_but_twice_what_is_left() {
        let left = 600;
        let mut order = Order::default();
        for i in 0..20_000 {
            order.push_ready(format!("node-{i}").into(), format!("csr-{i}").into());
        }
        let full = (order.ready.capacity(), order.ring.capacity());
        assert!(full.0 >= 20_000 && full.1 >= 20_000);
        for _ in 0..20_000 - left {
            order.pop_ready();
        }
        order.give_back_room();
        let cut = (order.ready.capacity(), order.ring.capacity());
        assert!(cut.0 < full.0 / 4 && cut.1 < full.1 / 4, "{full:?} then {cut:?}");
        assert!(cut.0 >= 2 * left && cut.1 >= 2 * left, "{cut:?}");
        for _ in 0..left {
            order.pop_ready();
        }
        order.give_back_room();
        let drained = (order.ready.capacity(), order.ring.capacity());
        assert!(drained.0 <= 2 * KEPT_ROOM && drained.1 <= 2 * KEPT_ROOM, "{drained:?}");
    }
}
