//! What the controller remembers about the CSRs it has not finished with: retry attempts (and so
//! the backoffs), whether a CSR waits on a Machine or Node, which decisions were announced, and
//! which CSRs are left alone on purpose (held for a human, or not the approver's).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::kubernetes::csr_object::CsrObject;
use crate::policy::{DecisionKind, Reason};

/// The first retry delay; each further retry doubles it...
const RETRY_BASE: Duration = Duration::from_secs(2);
/// ... up to this.
const RETRY_CAP: Duration = Duration::from_secs(60);
/// The first delay after a failed write; each further failure doubles it...
const WRITE_RETRY_BASE: Duration = Duration::from_millis(500);
/// ... up to this: short, so CSRs whose writes failed during an apiserver outage are written
/// within seconds of its return.
const WRITE_RETRY_CAP: Duration = Duration::from_secs(8);
/// The first delay after a conflict; each further conflict on the same CSR doubles it...
const CONFLICT_RETRY_BASE: Duration = Duration::from_millis(200);
/// ... up to this, so a CSR that keeps conflicting is never written in a tight loop.
const CONFLICT_RETRY_CAP: Duration = Duration::from_secs(30);

/// A CSR as the reconcile state knows it: its name and uid (a CSR re-created under the same name starts
/// afresh).
#[derive(Debug, Clone, Copy)]
pub(super) struct CsrKey<'a> {
    /// metadata.name.
    pub name: &'a str,
    /// metadata.uid.
    pub uid: &'a str,
}

impl CsrKey<'_> {
    /// The key of `csr`.
    pub(super) fn of(csr: &CsrObject) -> CsrKey<'_> {
        CsrKey { name: &csr.name, uid: &csr.uid }
    }
}

/// What is remembered about one CSR.
#[derive(Debug, Default)]
struct Entry {
    uid: String,
    attempts: u32,
    write_failures: u32,
    conflicts: u32,
    waiting_on_cluster: bool,
    /// Held for a human, or not the approver's: no decision of ours is outstanding.
    excused: bool,
    /// The name was found not to fit into a request URL (and that was logged).
    unaddressable: bool,
    /// The resourceVersion our decision was written on, until the watch brings the change.
    written_on: Option<String>,
    announced: HashSet<(DecisionKind, Reason)>,
}

/// What each CSR's reconciles have done (retry attempts, decisions announced, the version a
/// decision was written on), shared by every reconcile.
#[derive(Debug, Default)]
pub struct ReconcileState(Mutex<HashMap<String, Entry>>);

impl ReconcileState {
    /// Whether `kind` and `reason` were already announced for this CSR.
    pub(super) fn announced(&self, csr: CsrKey<'_>, kind: DecisionKind, reason: Reason) -> bool {
        self.entry(csr, |entry| entry.announced.contains(&(kind, reason)))
    }

    /// Records that `kind` and `reason` were announced for this CSR.
    pub(super) fn mark_announced(&self, csr: CsrKey<'_>, kind: DecisionKind, reason: Reason) {
        self.entry(csr, |entry| entry.announced.insert((kind, reason)));
    }

    /// Counts one more retry and returns its delay: capped exponential backoff per CSR.
    /// `on_cluster` says whether the CSR waits on a Machine, a Node or the pending brake.
    pub(super) fn next_retry(&self, csr: CsrKey<'_>, on_cluster: bool) -> Duration {
        self.entry(csr, |entry| {
            entry.waiting_on_cluster = on_cluster;
            entry.excused = false;
            entry.attempts = entry.attempts.saturating_add(1);
            backoff(entry.attempts)
        })
    }

    /// Counts one more failed write of this CSR and returns the delay before the next one.
    pub(super) fn next_write_retry(&self, csr: CsrKey<'_>) -> Duration {
        self.entry(csr, |entry| {
            entry.write_failures = entry.write_failures.saturating_add(1);
            doubling(WRITE_RETRY_BASE, entry.write_failures, WRITE_RETRY_CAP)
        })
    }

    /// Counts one more conflict on this CSR and returns the delay before it is read again.
    pub(super) fn next_conflict_retry(&self, csr: CsrKey<'_>) -> Duration {
        self.entry(csr, |entry| {
            entry.conflicts = entry.conflicts.saturating_add(1);
            doubling(CONFLICT_RETRY_BASE, entry.conflicts, CONFLICT_RETRY_CAP)
        })
    }

    /// Records that a decision was written on `resource_version` of this CSR: everything else
    /// remembered of it is done with, and [`ReconcileState::written_at`] holds until the CSR is forgotten.
    pub(super) fn mark_written(&self, csr: CsrKey<'_>, resource_version: &str) {
        self.entry(csr, |entry| {
            *entry =
                Entry { uid: csr.uid.to_owned(), written_on: Some(resource_version.to_owned()), ..Entry::default() }
        });
    }

    /// True when our decision was written on exactly this version of this CSR, so a cache still
    /// holding it is behind: evaluating it again could only conflict.
    pub(super) fn written_at(&self, csr: CsrKey<'_>, resource_version: Option<&str>) -> bool {
        self.lock().get(csr.name).is_some_and(|entry| {
            entry.uid == csr.uid && entry.written_on.is_some() && entry.written_on.as_deref() == resource_version
        })
    }

    /// Records that this CSR's name does not fit into a URL; true the first time.
    pub(super) fn mark_unaddressable(&self, csr: CsrKey<'_>) -> bool {
        self.entry(csr, |entry| !std::mem::replace(&mut entry.unaddressable, true))
    }

    /// Records that no decision of ours is outstanding for this CSR: it is held for a human, or
    /// not the approver's to decide. Cleared by the next retry.
    pub(super) fn excuse(&self, csr: CsrKey<'_>) {
        self.entry(csr, |entry| entry.excused = true);
    }

    /// Whether this CSR is held for a human or not the approver's (see [`ReconcileState::excuse`]).
    pub(super) fn is_excused(&self, csr: CsrKey<'_>) -> bool {
        self.lock().get(csr.name).is_some_and(|entry| entry.uid == csr.uid && entry.excused)
    }

    /// How many CSRs wait on a retry (of their evaluation or of their write).
    pub(super) fn waiting(&self) -> usize {
        self.lock()
            .values()
            .filter(|entry| entry.attempts > 0 || entry.write_failures > 0 || entry.conflicts > 0)
            .count()
    }

    /// Drops what is remembered about CSRs that no longer exist (`exists` says which do).
    pub(super) fn retain(&self, exists: impl Fn(CsrKey<'_>) -> bool) {
        self.lock().retain(|name, entry| exists(CsrKey { name, uid: &entry.uid }));
    }

    /// True when some CSR's last evaluation waited on a Machine, a Node or the pending brake.
    pub(super) fn anyone_waiting_on_cluster(&self) -> bool {
        self.lock().values().any(|entry| entry.waiting_on_cluster)
    }

    /// Drops what was remembered about a CSR that is decided or gone; true if there was anything.
    pub(super) fn forget(&self, name: &str) -> bool {
        self.lock().remove(name).is_some()
    }

    fn entry<T>(&self, csr: CsrKey<'_>, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut memory = self.lock();
        let entry = memory.entry(csr.name.to_owned()).or_default();
        if entry.uid != csr.uid {
            *entry = Entry { uid: csr.uid.to_owned(), ..Entry::default() };
        }
        f(entry)
    }

    /// The map, also after a reconcile panicked while holding it: every entry stays consistent on
    /// its own (each update is one assignment), so the worst case is a retry counted twice.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The delay before retry number `attempt` (from 1): 2 s, 4 s, 8 s, … at most 60 s.
fn backoff(attempt: u32) -> Duration {
    doubling(RETRY_BASE, attempt, RETRY_CAP)
}

/// `base` doubled for each attempt after the first (from 1), at most `cap`.
fn doubling(base: Duration, attempt: u32, cap: Duration) -> Duration {
    base.saturating_mul(1 << attempt.min(16).saturating_sub(1)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: CsrKey<'static> = CsrKey { name: "csr-a", uid: "1" };

    #[test]
    fn the_backoff_doubles_from_two_seconds_up_to_a_minute() {
        let delays: Vec<u64> = (1..=8).map(|attempt| backoff(attempt).as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }

    #[test]
    fn retries_count_per_csr_and_start_afresh_for_a_new_uid() {
        let memory = ReconcileState::default();
        assert_eq!(memory.next_retry(A, false), Duration::from_secs(2));
        assert_eq!(memory.next_retry(A, true), Duration::from_secs(4));
        assert!(memory.anyone_waiting_on_cluster());
        assert_eq!(memory.next_retry(CsrKey { name: "csr-b", uid: "2" }, false), Duration::from_secs(2));
        assert_eq!(memory.waiting(), 2);
        assert_eq!(memory.next_retry(CsrKey { name: "csr-a", uid: "3" }, false), Duration::from_secs(2));
        assert!(!memory.anyone_waiting_on_cluster());
        assert!(memory.forget("csr-a"));
        assert!(!memory.forget("csr-a"));
        assert_eq!(memory.waiting(), 1);
    }

    #[test]
    fn failed_writes_and_conflicts_back_off_on_their_own_short_scales() {
        let memory = ReconcileState::default();
        let writes: Vec<u64> = (0..7).map(|_| memory.next_write_retry(A).as_millis() as u64).collect();
        assert_eq!(writes, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        let conflicts: Vec<u64> = (0..10).map(|_| memory.next_conflict_retry(A).as_millis() as u64).collect();
        assert_eq!(conflicts, [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(memory.waiting(), 1);
        assert_eq!(memory.next_retry(A, false), Duration::from_secs(2), "evaluation retries count apart");
        assert_eq!(doubling(WRITE_RETRY_BASE, u32::MAX, WRITE_RETRY_CAP), WRITE_RETRY_CAP);
    }

    #[test]
    fn a_conflict_or_a_failed_write_alone_counts_as_waiting() {
        let memory = ReconcileState::default();
        memory.next_conflict_retry(A);
        memory.next_write_retry(CsrKey { name: "csr-b", uid: "2" });
        memory.excuse(CsrKey { name: "csr-c", uid: "3" });
        assert_eq!(memory.waiting(), 2);
    }

    #[test]
    fn a_written_decision_holds_for_its_version_until_the_csr_is_forgotten() {
        let memory = ReconcileState::default();
        memory.next_write_retry(A);
        memory.mark_announced(A, DecisionKind::Retry, Reason::DNSUnavailable);
        assert!(!memory.written_at(A, Some("7")));
        memory.mark_written(A, "7");
        assert!(memory.written_at(A, Some("7")));
        assert!(!memory.written_at(A, Some("8")), "a newer version is evaluated");
        assert!(!memory.written_at(A, None));
        assert!(!memory.written_at(CsrKey { name: "csr-a", uid: "2" }, Some("7")), "another CSR of the name");
        assert_eq!(memory.waiting(), 0, "the retries are done with");
        assert!(!memory.announced(A, DecisionKind::Retry, Reason::DNSUnavailable));
        assert!(memory.forget("csr-a"));
        assert!(!memory.written_at(A, Some("7")));
    }

    #[test]
    fn an_unaddressable_name_is_told_once_per_csr() {
        let memory = ReconcileState::default();
        assert!(memory.mark_unaddressable(A));
        assert!(!memory.mark_unaddressable(A));
        assert!(memory.mark_unaddressable(CsrKey { name: "csr-a", uid: "2" }));
    }

    #[test]
    fn an_excuse_holds_for_its_uid_until_the_next_retry() {
        let memory = ReconcileState::default();
        assert!(!memory.is_excused(A));
        memory.excuse(A);
        assert!(memory.is_excused(A));
        assert!(!memory.is_excused(CsrKey { name: "csr-a", uid: "2" }));
        memory.next_retry(A, false);
        assert!(!memory.is_excused(A));
    }

    #[test]
    fn entries_of_csrs_that_are_gone_are_dropped() {
        let memory = ReconcileState::default();
        memory.excuse(A);
        memory.excuse(CsrKey { name: "csr-b", uid: "2" });
        memory.next_retry(CsrKey { name: "csr-c", uid: "3" }, false);
        memory.retain(|csr| csr.name == "csr-b" || (csr.name == "csr-c" && csr.uid == "other"));
        assert!(memory.is_excused(CsrKey { name: "csr-b", uid: "2" }));
        assert!(!memory.is_excused(A));
        assert_eq!(memory.waiting(), 0);
    }

    #[test]
    fn announcements_are_remembered_per_kind_and_reason() {
        let memory = ReconcileState::default();
        assert!(!memory.announced(A, DecisionKind::Retry, Reason::DNSUnavailable));
        memory.mark_announced(A, DecisionKind::Retry, Reason::DNSUnavailable);
        assert!(memory.announced(A, DecisionKind::Retry, Reason::DNSUnavailable));
        assert!(!memory.announced(A, DecisionKind::Retry, Reason::NodeNotFound));
        assert!(!memory.announced(A, DecisionKind::Hold, Reason::DNSUnavailable));
        assert!(!memory.announced(CsrKey { name: "csr-a", uid: "2" }, DecisionKind::Retry, Reason::DNSUnavailable));
    }
}
