//! What the controller remembers of each CSR from one reconcile to the next: a state machine of
//! [`Phase`]s per CSR, changed only by [`Memory::settle`] with what a reconcile did (one
//! [`Outcome`]), and the one place of the controller's backoffs of a CSR: it answers when to
//! reconcile the CSR again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::room::sparse;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::csr_uid::Uid;
use crate::kubernetes::kube_watch::Doubling;
use crate::metrics::{Metrics, WriteResult};
use crate::policy::{DecisionKind, Reason};

/// The backoff of a CSR evaluated to retry: 2 s, 4 s, 8 s, … at most 60 s.
const RETRY: Doubling = Doubling { first: Duration::from_secs(2), cap: Duration::from_secs(60) };
/// The backoff after a failed write: short, so CSRs whose writes failed during an apiserver outage
/// are written within seconds of its return.
const WRITE_RETRY: Doubling = Doubling { first: Duration::from_millis(500), cap: Duration::from_secs(8) };
/// The backoff after a conflict, so a CSR that keeps conflicting is never written in a tight loop.
const CONFLICT_RETRY: Doubling = Doubling { first: Duration::from_millis(200), cap: Duration::from_secs(30) };
/// How often the memory drops the CSRs that are decided or gone.
const PRUNE_PERIOD: Duration = Duration::from_secs(5);

/// A decision as told (logged and published): its kind and reason.
type Announced = (DecisionKind, Reason);

/// What one reconcile did, as the [`Memory`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Evaluated to retry; `on_cluster` when a Machine or Node change can resolve it,
    /// `announced` the decision when it was told this time.
    Retried { on_cluster: bool, announced: Option<Announced> },
    /// Held for a human, not the approver's, or a dry run's decision: nothing of ours is
    /// outstanding; `announced` as for a retry.
    Excused { announced: Option<Announced> },
    /// Its name fits into no request: no decision can be written.
    Unaddressable,
    /// Reading it from the apiserver before deciding it failed (no answer, or an error other than
    /// not found): retried as a failed write is.
    ReadFailed,
    /// The decision's write ended so.
    Write(WriteResult),
}

/// Where a CSR is between two reconciles (no entry at all: nothing to remember). Every
/// [`Outcome`] but a CSR found gone moves it, whatever the phase before:
///
/// ```text
/// Retried           → Retrying { attempts: n + 1 if it was Retrying (n), else 1 }   after 2 s … 60 s
/// Write(Error), ReadFailed → WriteFailing { failures: n + 1, or 1 }               after 0.5 s … 8 s
/// Write(Conflict)   → Conflicting { conflicts: n + 1, or 1 }                      after 0.2 s … 30 s
/// Excused           → Excused                                                     on a change or a pass
/// Unaddressable, Write(Unaddressable) → Unaddressable                             never evaluated again
/// Write(Success)    → Written { resource_version }                                 on the watch's event
/// Write(NotFound)  → as it was (the CSR is gone)
/// ```
///
/// A CSR of another uid under the same name starts afresh; decided and gone CSRs are dropped by
/// [`Memory::prune`]. The three retrying phases are `csrs_waiting_retry`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Evaluated to retry `attempts` times in a row; `on_cluster` when the last one waits on a
    /// Machine, a Node or the pending brake.
    Retrying { attempts: u32, on_cluster: bool },
    /// Its write, or the read before it, failed `failures` times in a row without an answer, or
    /// with an error other than a conflict (or, for the read, not found).
    WriteFailing { failures: u32 },
    /// Its write conflicted `conflicts` times in a row: it changed since it was read.
    Conflicting { conflicts: u32 },
    /// Held for a human, not the approver's, or a dry run's: no decision of ours is outstanding,
    /// so it is not the oldest undecided CSR.
    Excused,
    /// No request can name it: told once, never evaluated again.
    Unaddressable,
    /// Our decision was written on this version; a reconcile of it waits for the watch.
    Written { resource_version: Box<str> },
}

impl Phase {
    /// The phase after `outcome` when the CSR was in `before`; `None` when nothing changes.
    fn after(before: Option<&Phase>, outcome: Outcome, csr: &CsrObject) -> Option<Phase> {
        let phase = match (outcome, before) {
            (Outcome::Write(WriteResult::NotFound), _) => return None,
            (Outcome::Retried { on_cluster, .. }, Some(Phase::Retrying { attempts, .. })) => {
                Phase::Retrying { attempts: attempts.saturating_add(1), on_cluster }
            }
            (Outcome::Retried { on_cluster, .. }, _) => Phase::Retrying { attempts: 1, on_cluster },
            (Outcome::Write(WriteResult::Error) | Outcome::ReadFailed, Some(Phase::WriteFailing { failures })) => {
                Phase::WriteFailing { failures: failures.saturating_add(1) }
            }
            (Outcome::Write(WriteResult::Error) | Outcome::ReadFailed, _) => Phase::WriteFailing { failures: 1 },
            (Outcome::Write(WriteResult::Conflict), Some(Phase::Conflicting { conflicts })) => {
                Phase::Conflicting { conflicts: conflicts.saturating_add(1) }
            }
            (Outcome::Write(WriteResult::Conflict), _) => Phase::Conflicting { conflicts: 1 },
            (Outcome::Excused { .. }, _) => Phase::Excused,
            (Outcome::Unaddressable | Outcome::Write(WriteResult::Unaddressable), _) => Phase::Unaddressable,
            (Outcome::Write(WriteResult::Success), _) => {
                Phase::Written { resource_version: csr.resource_version.clone().unwrap_or_default() }
            }
        };
        Some(phase)
    }

    /// When a CSR in this phase is reconciled again by itself: the one place of the backoffs of a
    /// reconcile.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Phase::Retrying { attempts, .. } => Some(RETRY.delay(*attempts)),
            Phase::WriteFailing { failures } => Some(WRITE_RETRY.delay(*failures)),
            Phase::Conflicting { conflicts } => Some(CONFLICT_RETRY.delay(*conflicts)),
            Phase::Excused | Phase::Unaddressable | Phase::Written { .. } => None,
        }
    }

    /// Whether a CSR in this phase waits on a retry (`csrs_waiting_retry`).
    fn waits(&self) -> bool {
        self.retry_after().is_some()
    }
}

/// What is remembered of one CSR.
#[derive(Debug)]
struct Entry {
    /// metadata.uid: a CSR re-created under the same name starts afresh.
    uid: Uid,
    phase: Phase,
    /// The decisions told for it, each told once (at most a few): forgotten once a decision is
    /// written. A list, not a hash set: 24 bytes in the entry, not 48.
    announced: Vec<Announced>,
    /// The CSR as read from the apiserver by the reconcile that retried it last
    /// ([`Memory::keep_read`]): its next reconcile decides on it while the cached version is the
    /// one read. Forgotten at the next settle.
    read: Option<Box<CsrObject>>,
}

/// The entries by CSR name, and how many of them wait on a retry.
#[derive(Debug, Default)]
struct Entries {
    by_name: HashMap<Arc<str>, Entry>,
    waiting: usize,
}

/// What the controller remembers of each CSR it has not finished with, shared by every reconcile:
/// its [`Phase`] and the decisions announced. It is changed only by [`Memory::settle`], once per
/// reconcile, and [`Memory::prune`]; both keep `csrs_waiting_retry` up to date.
#[derive(Debug)]
pub(super) struct Memory {
    entries: Mutex<Entries>,
    metrics: Metrics,
}

impl Memory {
    /// An empty memory that reports to `metrics`.
    pub(super) fn new(metrics: Metrics) -> Memory {
        Memory { entries: Mutex::default(), metrics }
    }

    /// Records what a reconcile of `csr` did, and answers when to reconcile it again by itself
    /// ([`Phase::retry_after`]); `None` also for a CSR found gone.
    pub(super) fn settle(&self, csr: &CsrObject, outcome: Outcome) -> Option<Duration> {
        let mut entries = self.lock();
        let Entries { by_name, waiting } = &mut *entries;
        let before = by_name.get(&csr.name);
        let was_waiting = before.is_some_and(|entry| entry.phase.waits());
        let before = before.filter(|entry| entry.uid == csr.uid).map(|entry| &entry.phase);
        let phase = Phase::after(before, outcome, csr)?;
        let retry_after = phase.retry_after();
        *waiting = (*waiting + usize::from(phase.waits())).saturating_sub(usize::from(was_waiting));
        let fresh = || Entry { uid: csr.uid.clone(), phase: Phase::Excused, announced: Vec::new(), read: None };
        let entry = by_name.entry(csr.name.clone()).or_insert_with(fresh);
        if entry.uid != csr.uid {
            *entry = fresh();
        }
        match outcome {
            Outcome::Retried { announced: Some(told), .. } | Outcome::Excused { announced: Some(told) }
                if !entry.announced.contains(&told) =>
            {
                entry.announced.push(told);
            }
            Outcome::Write(WriteResult::Success) => entry.announced = Vec::new(),
            _ => {}
        }
        entry.phase = phase;
        entry.read = None;
        self.metrics.set_waiting_retry(*waiting);
        retry_after
    }

    /// Keeps `read` (a CSR as read from the apiserver, just settled as retried) for its next
    /// reconcile ([`Memory::kept_read`]).
    pub(super) fn keep_read(&self, read: &CsrObject) {
        if let Some(entry) = self.lock().by_name.get_mut(&read.name).filter(|entry| entry.uid == read.uid) {
            entry.read = Some(Box::new(read.clone()));
        }
    }

    /// The CSR kept as read for `cached` ([`Memory::keep_read`]), when it is the same CSR at the
    /// same version: its request and everything else as the apiserver holds it now.
    pub(super) fn kept_read(&self, cached: &CsrObject) -> Option<CsrObject> {
        let entries = self.lock();
        let entry = entries.by_name.get(&cached.name).filter(|entry| entry.uid == cached.uid)?;
        let read = entry.read.as_deref().filter(|read| read.resource_version == cached.resource_version)?;
        Some(read.clone())
    }

    /// Drops every CSR that `csrs` does not hold undecided (under the same uid), once `csrs` holds
    /// a complete list.
    pub(super) fn prune(&self, csrs: &Cache<CsrObject>) {
        if !csrs.is_ready() {
            return;
        }
        let mut entries = self.lock();
        let Entries { by_name, waiting } = &mut *entries;
        by_name.retain(|name, entry| {
            let keep = csrs.get(name).is_some_and(|csr| csr.uid == entry.uid && !csr.is_decided());
            if !keep && entry.phase.waits() {
                *waiting = waiting.saturating_sub(1);
            }
            keep
        });
        if sparse(by_name.len(), by_name.capacity()) {
            by_name.shrink_to(by_name.len() * 2);
        }
        self.metrics.set_waiting_retry(*waiting);
    }

    /// Prunes the memory against `csrs` every [`PRUNE_PERIOD`], for as long as it runs.
    pub(super) async fn keep_pruned(self: Arc<Self>, csrs: Cache<CsrObject>) {
        loop {
            tokio::time::sleep(PRUNE_PERIOD).await;
            self.prune(&csrs);
        }
    }

    /// Whether the decision `told` was already announced for `csr`.
    pub(super) fn announced(&self, csr: &CsrObject, told: Announced) -> bool {
        self.read(csr, |entry| entry.announced.contains(&told))
    }

    /// True when our decision was written on exactly this version of `csr`, so a cache still
    /// holding it is behind: evaluating it again could only conflict.
    pub(super) fn written_at(&self, csr: &CsrObject) -> bool {
        self.read(csr, |entry| match &entry.phase {
            Phase::Written { resource_version } => csr.resource_version.as_ref() == Some(resource_version),
            _ => false,
        })
    }

    /// Whether no request can name `csr` (and that was told).
    pub(super) fn is_unaddressable(&self, csr: &CsrObject) -> bool {
        self.read(csr, |entry| entry.phase == Phase::Unaddressable)
    }

    /// Whether no decision of ours is outstanding for `csr`: held for a human, not the
    /// approver's, a dry run's, or unaddressable.
    pub(super) fn is_excused(&self, csr: &CsrObject) -> bool {
        self.read(csr, |entry| matches!(entry.phase, Phase::Excused | Phase::Unaddressable))
    }

    /// True when some CSR's last evaluation waits on a Machine, a Node or the pending brake.
    pub(super) fn anyone_waiting_on_cluster(&self) -> bool {
        self.lock().by_name.values().any(|entry| matches!(entry.phase, Phase::Retrying { on_cluster: true, .. }))
    }

    /// `read` of `csr`'s entry; false when there is none.
    fn read(&self, csr: &CsrObject, read: impl FnOnce(&Entry) -> bool) -> bool {
        self.lock().by_name.get(&csr.name).filter(|entry| entry.uid == csr.uid).is_some_and(read)
    }

    /// The entries, also after a reconcile panicked while holding them: each change is made whole
    /// before anything can panic, so they stay consistent.
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::csr_cache;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
    use kube::runtime::watcher::Event;

    const TOLD: Announced = (DecisionKind::Retry, Reason::DNSUnavailable);

    /// A pending CSR `name` of uid `uid` at resourceVersion `version`.
    fn csr(name: &str, uid: &str, version: &str) -> CsrObject {
        let mut csr = CsrObject::from(CertificateSigningRequest::default());
        (csr.name, csr.uid, csr.resource_version) = (name.into(), uid.into(), Some(version.into()));
        csr
    }

    fn retried(on_cluster: bool) -> Outcome {
        Outcome::Retried { on_cluster, announced: None }
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
        let writes: Vec<u128> = (0..7).map(|_| millis(memory.settle(&a, Outcome::Write(WriteResult::Error)))).collect();
        assert_eq!(writes, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        let conflicts: Vec<u128> =
            (0..10).map(|_| millis(memory.settle(&a, Outcome::Write(WriteResult::Conflict)))).collect();
        assert_eq!(conflicts, [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(waiting(&memory), gauge(1));
        assert_eq!(millis(memory.settle(&a, retried(false))), 2000, "evaluation retries count apart");
        assert_eq!(memory.settle(&a, Outcome::Write(WriteResult::NotFound)), None, "gone");
        assert_eq!(waiting(&memory), gauge(1), "as it was");
    }

    #[test]
    fn a_failed_read_is_retried_as_a_failed_write_is_and_decides_nothing() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        let reads: Vec<u128> = (0..6).map(|_| millis(memory.settle(&a, Outcome::ReadFailed))).collect();
        assert_eq!(reads, [500, 1000, 2000, 4000, 8000, 8000]);
        assert_eq!(waiting(&memory), gauge(1));
        assert!(!memory.written_at(&a) && !memory.is_excused(&a), "nothing is decided or excused");
        assert_eq!(millis(memory.settle(&a, Outcome::Write(WriteResult::Error))), 8000, "one count of failures");
    }

    #[test]
    fn a_read_is_kept_for_the_next_reconcile_of_the_same_version_only() {
        let memory = Memory::new(Metrics::new());
        let mut read = csr("csr-a", "1", "7");
        read.certificate_issued = true;
        assert_eq!(memory.kept_read(&read), None, "nothing kept before a reconcile settled");
        memory.keep_read(&read);
        assert_eq!(memory.kept_read(&read), None, "a CSR never settled keeps nothing");
        memory.settle(&read, retried(false));
        memory.keep_read(&read);
        assert_eq!(memory.kept_read(&csr("csr-a", "1", "7")), Some(read.clone()), "the read, not the cached one");
        assert_eq!(memory.kept_read(&csr("csr-a", "1", "8")), None, "another version is read again");
        assert_eq!(memory.kept_read(&csr("csr-a", "2", "7")), None, "another CSR of the name is read again");
        memory.keep_read(&csr("csr-a", "2", "7"));
        assert_eq!(memory.kept_read(&csr("csr-a", "2", "7")), None, "a read of another uid is not kept");
        assert_eq!(memory.kept_read(&read), Some(read.clone()), "nor does it replace the kept one");
        memory.settle(&read, retried(false));
        assert_eq!(memory.kept_read(&read), None, "each settle forgets the read");
    }

    #[test]
    fn a_csr_that_retried_and_is_now_held_does_not_wait() {
        let memory = Memory::new(Metrics::new());
        let (a, b) = (csr("csr-a", "1", "1"), csr("csr-b", "2", "1"));
        memory.settle(&a, retried(false));
        memory.settle(&b, Outcome::Write(WriteResult::Conflict));
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
        memory.settle(&a, Outcome::Write(WriteResult::Error));
        memory.settle(&a, Outcome::Retried { on_cluster: false, announced: Some(TOLD) });
        assert!(memory.announced(&a, TOLD));
        assert!(!memory.written_at(&a));
        assert_eq!(memory.settle(&a, Outcome::Write(WriteResult::Success)), None);
        assert!(memory.written_at(&a));
        assert!(!memory.written_at(&csr("csr-a", "1", "8")), "a newer version is evaluated");
        assert!(!memory.written_at(&CsrObject { resource_version: None, ..a.clone() }));
        assert!(!memory.written_at(&csr("csr-a", "2", "7")), "another CSR of the name");
        assert_eq!(waiting(&memory), gauge(0), "the retries are done with");
        assert!(!memory.announced(&a, TOLD));
        assert!(!memory.is_excused(&a), "a written CSR is not excused");
    }

    #[test]
    fn an_unaddressable_csr_is_remembered_per_uid_and_excused() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert!(!memory.is_unaddressable(&a));
        memory.settle(&a, Outcome::Unaddressable);
        assert!(memory.is_unaddressable(&a) && memory.is_excused(&a));
        assert!(!memory.is_unaddressable(&csr("csr-a", "2", "1")));
        memory.settle(&csr("csr-b", "2", "1"), Outcome::Write(WriteResult::Unaddressable));
        assert!(memory.is_unaddressable(&csr("csr-b", "2", "1")));
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
    fn pruning_drops_the_csrs_decided_or_gone_once_the_cache_is_complete() {
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
        assert_eq!(waiting(&memory), gauge(4));
        memory.prune(&cache);
        assert_eq!(waiting(&memory), gauge(4), "an incomplete cache prunes nothing");
        writer.apply(Event::<CsrObject>::Init);
        for object in [&kept, &decided, &csr("recreated", "5", "1")] {
            writer.apply(Event::InitApply(object.clone()));
        }
        writer.apply(Event::<CsrObject>::InitDone);
        memory.prune(&cache);
        assert_eq!(waiting(&memory), gauge(1));
        assert_eq!(memory.lock().by_name.keys().map(|name| name.to_string()).collect::<Vec<_>>(), ["kept"]);
    }

    #[test]
    fn pruning_a_drained_burst_gives_back_the_room_it_took() {
        let memory = Memory::new(Metrics::new());
        let (cache, mut writer) = csr_cache::cache::<CsrObject>();
        for i in 0..5_000 {
            memory.settle(&csr(&format!("csr-{i}"), &i.to_string(), "1"), retried(false));
        }
        let full = memory.lock().by_name.capacity();
        writer.apply(Event::<CsrObject>::Init);
        writer.apply(Event::<CsrObject>::InitDone);
        memory.prune(&cache);
        let pruned = memory.lock().by_name.capacity();
        assert!(full >= 5_000 && pruned < full / 2, "{full} then {pruned}");
    }

    #[test]
    fn announcements_are_remembered_per_kind_and_reason() {
        let memory = Memory::new(Metrics::new());
        let a = csr("csr-a", "1", "1");
        assert!(!memory.announced(&a, TOLD));
        memory.settle(&a, Outcome::Retried { on_cluster: false, announced: Some(TOLD) });
        assert!(memory.announced(&a, TOLD));
        assert!(!memory.announced(&a, (DecisionKind::Retry, Reason::NodeNotFound)));
        assert!(!memory.announced(&a, (DecisionKind::Hold, Reason::DNSUnavailable)));
        assert!(!memory.announced(&csr("csr-a", "2", "1"), TOLD));
    }
}
