//! Where a CSR is between two reconciles: the [`Phase`] the last one left it in, moved by what a
//! reconcile did ([`Outcome`]), and when it is reconciled again by itself: every backoff of a
//! reconcile. The controller's table ([`super::memory::Memory`]) keeps one phase per CSR and moves
//! it only through [`Phase::after`].

use std::time::Duration;

use tokio::time::Instant;

use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::kube_watch::Doubling;
use crate::metrics::WriteResult;
use crate::policy::{DecisionKind, Reason};

/// The backoff of a CSR evaluated to retry: 2 s, 4 s, 8 s, … at most 60 s.
const RETRY: Doubling = Doubling { first: Duration::from_secs(2), cap: Duration::from_secs(60) };
/// The backoff after a failed write: short, so CSRs whose writes failed during an apiserver outage
/// are written within seconds of its return.
const WRITE_RETRY: Doubling = Doubling { first: Duration::from_millis(500), cap: Duration::from_secs(8) };
/// The backoff after a conflict, so a CSR that keeps conflicting is never written in a tight loop.
const CONFLICT_RETRY: Doubling = Doubling { first: Duration::from_millis(200), cap: Duration::from_secs(30) };

/// A decision as told (logged and published): its kind and reason.
pub(super) type Announced = (DecisionKind, Reason);

/// What one reconcile did, as the [`Memory`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Evaluated to retry; `on_cluster` when a Machine or Node change can resolve it,
    /// `announced` the decision when it was told this time, `read` when the CSR settled is as
    /// read from the apiserver (kept for its next reconcile).
    Retried { on_cluster: bool, announced: Option<Announced>, read: bool },
    /// Held for a human, not the approver's, or a dry run's decision: nothing of ours is
    /// outstanding; `announced` as for a retry.
    Excused { announced: Option<Announced> },
    /// Its name fits into no request: no decision can be written.
    Unaddressable,
    /// Reading it from the apiserver before deciding it failed (no answer, or an error other than
    /// not found): retried as a failed write is.
    ReadFailed,
    /// The decision's write ended so; `approval` when the decision was an approval.
    Write { result: WriteResult, approval: bool },
    /// The apiserver answered the read or the write asking to wait `wait` (a 429's
    /// `Retry-After`): retried as a failed write is, and not before the wait is over.
    Throttled { wait: Duration },
}

/// Why a reconcile has nothing to do ([`Memory::done_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    /// No request can name the CSR: told once, never evaluated again.
    Unaddressable,
    /// Our decision was written on this version: the watch brings it.
    Written,
}

/// Where a CSR is between two reconciles (nothing learned of it: no phase). Every [`Outcome`]
/// but a CSR found gone moves it, whatever the phase before:
///
/// ```text
/// Retried           → Retrying { attempts: n + 1 if it was Retrying (n), else 1 }   after 2 s … 60 s
/// Write(Error), ReadFailed → WriteFailing { failures: n + 1, or 1 }               after 0.5 s … 8 s
/// Throttled { wait }  → Throttled { failures: n + 1, or 1 }       after the longer of 0.5 s … 8 s and the wait
/// Write(Conflict)   → Conflicting { conflicts: n + 1, or 1 }                      after 0.2 s … 30 s
/// Excused           → Excused                                                     on a change or a pass
/// Unaddressable     → Unaddressable                                               never evaluated again
/// Write(Success)    → Written { resource_version }                                 on the watch's event
/// Write(NotFound)  → as it was (the CSR is gone)
/// ```
///
/// A CSR of another uid under the same name starts afresh; decided and gone CSRs are forgotten by
/// [`Memory::prune`]. The four retrying phases are `csrs_waiting_retry`; a throttled CSR is not
/// reconciled before its wait is over, even when triggered ([`Memory::held_back`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// Evaluated to retry `attempts` times in a row; `on_cluster` when the last one waits on a
    /// Machine, a Node or the pending brake.
    Retrying { attempts: u32, on_cluster: bool },
    /// Its write, or the read before it, failed `failures` times in a row without an answer, or
    /// with an error other than a conflict (or, for the read, not found).
    WriteFailing { failures: u32 },
    /// As `WriteFailing`, its last failure an answer asking to wait, until `until`.
    Throttled { failures: u32, until: Instant },
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
    /// The phase after `outcome`, settled at `now`, when the CSR was in `before`; `None` when
    /// nothing changes.
    pub(super) fn after(before: Option<&Phase>, outcome: Outcome, csr: &CsrObject, now: Instant) -> Option<Phase> {
        let failures = match before {
            Some(Phase::WriteFailing { failures } | Phase::Throttled { failures, .. }) => failures.saturating_add(1),
            _ => 1,
        };
        let phase = match (outcome, before) {
            (Outcome::Write { result: WriteResult::NotFound, .. }, _) => return None,
            (Outcome::Retried { on_cluster, .. }, Some(Phase::Retrying { attempts, .. })) => {
                Phase::Retrying { attempts: attempts.saturating_add(1), on_cluster }
            }
            (Outcome::Retried { on_cluster, .. }, _) => Phase::Retrying { attempts: 1, on_cluster },
            (Outcome::Write { result: WriteResult::Error, .. } | Outcome::ReadFailed, _) => {
                Phase::WriteFailing { failures }
            }
            (Outcome::Throttled { wait }, _) => {
                Phase::Throttled { failures, until: now + wait.max(WRITE_RETRY.delay(failures)) }
            }
            (Outcome::Write { result: WriteResult::Conflict, .. }, Some(Phase::Conflicting { conflicts })) => {
                Phase::Conflicting { conflicts: conflicts.saturating_add(1) }
            }
            (Outcome::Write { result: WriteResult::Conflict, .. }, _) => Phase::Conflicting { conflicts: 1 },
            (Outcome::Excused { .. }, _) => Phase::Excused,
            (Outcome::Unaddressable, _) => Phase::Unaddressable,
            (Outcome::Write { result: WriteResult::Success, .. }, _) => {
                Phase::Written { resource_version: csr.resource_version.clone().unwrap_or_default() }
            }
        };
        Some(phase)
    }

    /// When a CSR in this phase is reconciled again by itself, from `now`: the one place of the
    /// backoffs of a reconcile.
    pub(super) fn retry_after(&self, now: Instant) -> Option<Duration> {
        match self {
            Phase::Throttled { until, .. } => Some(until.saturating_duration_since(now)),
            Phase::Retrying { attempts, .. } => Some(RETRY.delay(*attempts)),
            Phase::WriteFailing { failures } => Some(WRITE_RETRY.delay(*failures)),
            Phase::Conflicting { conflicts } => Some(CONFLICT_RETRY.delay(*conflicts)),
            Phase::Excused | Phase::Unaddressable | Phase::Written { .. } => None,
        }
    }

    /// Whether a CSR in this phase waits on a retry (`csrs_waiting_retry`).
    pub(super) fn waits(&self) -> bool {
        !matches!(self, Phase::Excused | Phase::Unaddressable | Phase::Written { .. })
    }
}
