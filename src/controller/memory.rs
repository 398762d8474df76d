//! What the controller remembers about the CSRs it has not finished with: retry attempts (and so
//! the backoff), whether a CSR waits on a Machine or Node, and which decisions were announced.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::policy::{DecisionKind, Reason};

/// The first retry delay; each further retry doubles it...
const RETRY_BASE: Duration = Duration::from_secs(2);
/// ... up to this.
const RETRY_CAP: Duration = Duration::from_secs(60);

/// A CSR as the memory knows it: its name and uid (a CSR re-created under the same name starts
/// afresh).
#[derive(Debug, Clone, Copy)]
pub(super) struct CsrKey<'a> {
    /// metadata.name.
    pub name: &'a str,
    /// metadata.uid.
    pub uid: &'a str,
}

/// What is remembered about one CSR.
#[derive(Debug, Default)]
struct Entry {
    uid: String,
    attempts: u32,
    waiting_on_cluster: bool,
    announced: HashSet<(DecisionKind, Reason)>,
}

/// Per-CSR memory, shared by every reconcile.
#[derive(Debug, Default)]
pub struct Memory(Mutex<HashMap<String, Entry>>);

impl Memory {
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
            entry.attempts = entry.attempts.saturating_add(1);
            backoff(entry.attempts)
        })
    }

    /// How many CSRs wait on a retry.
    pub(super) fn waiting(&self) -> usize {
        self.lock().values().filter(|entry| entry.attempts > 0).count()
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
    RETRY_BASE.saturating_mul(1 << attempt.min(16).saturating_sub(1)).min(RETRY_CAP)
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
        let memory = Memory::default();
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
    fn announcements_are_remembered_per_kind_and_reason() {
        let memory = Memory::default();
        assert!(!memory.announced(A, DecisionKind::Retry, Reason::DNSUnavailable));
        memory.mark_announced(A, DecisionKind::Retry, Reason::DNSUnavailable);
        assert!(memory.announced(A, DecisionKind::Retry, Reason::DNSUnavailable));
        assert!(!memory.announced(A, DecisionKind::Retry, Reason::NodeNotFound));
        assert!(!memory.announced(A, DecisionKind::Hold, Reason::DNSUnavailable));
        assert!(!memory.announced(CsrKey { name: "csr-a", uid: "2" }, DecisionKind::Retry, Reason::DNSUnavailable));
    }
}
