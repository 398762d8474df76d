//! What one reconcile does: a pure function of the decision, leadership, dry run and whether the
//! decision was announced before. `reconcile` carries the step out.

use crate::policy::DecisionKind;

/// How a decision that is not written is told: the log line's `message` and the event's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Announcement {
    /// The decision log line's `message`.
    pub log: &'static str,
    /// Put before the decision's message in the event's note.
    pub event_prefix: &'static str,
}

/// A decision `--dry-run` would have written.
pub(super) const DRY_RUN: Announcement =
    Announcement { log: "dry run: not written", event_prefix: "dry run, nothing written: " };
/// A failing rule that a human decides on (`--skip-deny-step`, or a node-client CSR).
pub(super) const HELD: Announcement = Announcement { log: "held for a human", event_prefix: "held for a human: " };
/// A transient condition.
pub(super) const RETRYING: Announcement = Announcement { log: "retrying", event_prefix: "retrying: " };

/// What to do with one evaluated CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Not ours, or nothing to do: forget the CSR and wait for it to change.
    Forget,
    /// Another replica writes: wait; every CSR is reconciled again when this one takes over.
    Standby,
    /// Write the condition; once written, log, count and publish it.
    Write,
    /// Write nothing and wait for a change; log, count and publish it when there is a note (the
    /// first time).
    Wait(Option<Announcement>),
    /// Evaluate again after the backoff; count it every time, log and publish it when there is a
    /// note (the first time).
    Retry(Option<Announcement>),
}

/// Whether a CSR is evaluated at all: by the leader, and by every replica under `--dry-run`
/// (which writes nothing). Standbys do no work until they take over.
pub(super) fn evaluates(leading: bool, dry_run: bool) -> bool {
    leading || dry_run
}

/// The step for a decision of `kind`, taken while `leading` (checked again after the
/// evaluation: a leader that lost the Lease meanwhile must not write), under `dry_run`, with
/// `announced` true when this decision was already told for this CSR.
pub(super) fn step_for(kind: DecisionKind, leading: bool, dry_run: bool, announced: bool) -> Step {
    let first = |note: Announcement| (!announced).then_some(note);
    match kind {
        DecisionKind::Ignore => Step::Forget,
        DecisionKind::Approve | DecisionKind::Deny if dry_run => Step::Wait(first(DRY_RUN)),
        DecisionKind::Approve | DecisionKind::Deny if !leading => Step::Standby,
        DecisionKind::Approve | DecisionKind::Deny => Step::Write,
        DecisionKind::Hold => Step::Wait(first(HELD)),
        DecisionKind::Retry => Step::Retry(first(RETRYING)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITES: [DecisionKind; 2] = [DecisionKind::Approve, DecisionKind::Deny];

    #[test]
    fn only_a_leader_outside_dry_run_writes() {
        for kind in WRITES {
            for announced in [false, true] {
                assert_eq!(step_for(kind, true, false, announced), Step::Write);
                assert_eq!(step_for(kind, false, false, announced), Step::Standby);
            }
        }
    }

    #[test]
    fn dry_run_tells_a_would_be_write_once_whoever_leads() {
        for kind in WRITES {
            for leading in [false, true] {
                assert_eq!(step_for(kind, leading, true, false), Step::Wait(Some(DRY_RUN)));
                assert_eq!(step_for(kind, leading, true, true), Step::Wait(None));
            }
        }
    }

    #[test]
    fn holds_and_retries_are_told_once_and_never_written() {
        for (leading, dry_run) in [(true, false), (false, false), (true, true), (false, true)] {
            assert_eq!(step_for(DecisionKind::Hold, leading, dry_run, false), Step::Wait(Some(HELD)));
            assert_eq!(step_for(DecisionKind::Hold, leading, dry_run, true), Step::Wait(None));
            assert_eq!(step_for(DecisionKind::Retry, leading, dry_run, false), Step::Retry(Some(RETRYING)));
            assert_eq!(step_for(DecisionKind::Retry, leading, dry_run, true), Step::Retry(None));
            assert_eq!(step_for(DecisionKind::Ignore, leading, dry_run, false), Step::Forget);
        }
    }

    #[test]
    fn standbys_evaluate_only_under_dry_run() {
        assert!(evaluates(true, false));
        assert!(evaluates(true, true));
        assert!(evaluates(false, true));
        assert!(!evaluates(false, false));
    }
}
