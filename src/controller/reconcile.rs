//! One reconcile of a CSR.
//!
//! A reconcile ([`Reconciler`]) reads the CSR from the cache (the queue holds names only), and a
//! pending serving CSR, whose request the cache does not keep, from the apiserver too ([`read`]),
//! evaluates it while this replica may write (every replica under `--dry-run`), picks its
//! [`Step`] and carries it out. What it did is one [`Outcome`], which it settles in the per-CSR
//! [`Memory`] (its only change there), and the memory answers when to reconcile the CSR again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::Context;
use super::memory::{Memory, Outcome};
use super::read::{self, Read};
use super::tell::{Note, WRITTEN, tell};
use super::work_queue::Reconcile;
use crate::display::short_name;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::request::RequestError;
use crate::kubernetes::write::{WRITE_TIMEOUT, write_condition};
use crate::metrics::WriteResult;
use crate::policy::{ClusterView, Decision, DecisionKind, NODE_USER_PREFIX, Resolver, evaluate};

/// A decision `--dry-run` would have written.
const DRY_RUN: Note = Note { log: "dry run: not written", event_prefix: "dry run, nothing written: " };
/// A failing rule that a human decides on (`--skip-deny-step`, or a node-client CSR).
const HELD: Note = Note { log: "held for a human", event_prefix: "held for a human: " };
/// A transient condition.
const RETRYING: Note = Note { log: "retrying", event_prefix: "retrying: " };

/// What to do with one evaluated CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Not the approver's: leave it alone (excused) until it changes.
    Ignore,
    /// Another replica writes: wait; every CSR is reconciled again when this one takes over.
    Standby,
    /// Write the condition; once written, log, count and publish it.
    Write,
    /// Write nothing and leave it alone (excused) until it changes; log, count and publish it
    /// when there is a note (the first time).
    Wait(Option<Note>),
    /// Evaluate again after the backoff; count it every time, log and publish it when there is a
    /// note (the first time).
    Retry(Option<Note>),
}

/// Whether a CSR is evaluated at all: by the leader, and by every replica under `--dry-run`
/// (which writes nothing). Standbys do no work until they take over.
fn evaluates(leading: bool, dry_run: bool) -> bool {
    leading || dry_run
}

/// The step for a decision of `kind`, taken while `leading` (checked again after the
/// evaluation: a leader that lost the Lease meanwhile must not write), under `dry_run`, with
/// `announced` true when this decision was already told for this CSR.
fn step_for(kind: DecisionKind, leading: bool, dry_run: bool, announced: bool) -> Step {
    let first = |note: Note| (!announced).then_some(note);
    match kind {
        DecisionKind::Ignore => Step::Ignore,
        DecisionKind::Approve | DecisionKind::Deny if dry_run => Step::Wait(first(DRY_RUN)),
        DecisionKind::Approve | DecisionKind::Deny if !leading => Step::Standby,
        DecisionKind::Approve | DecisionKind::Deny => Step::Write,
        DecisionKind::Hold => Step::Wait(first(HELD)),
        DecisionKind::Retry => Step::Retry(first(RETRYING)),
    }
}

/// Reconciles CSRs by name, as the work queue hands them out.
pub(super) struct Reconciler<R, C> {
    /// What every reconcile shares.
    pub ctx: Arc<Context<R, C>>,
    /// What is remembered of each CSR.
    pub memory: Arc<Memory>,
    /// The CSR cache the watch fills.
    pub csrs: Cache<CsrObject>,
}

impl<R: Resolver + 'static, C: ClusterView + 'static> Reconcile for Reconciler<R, C> {
    /// Reconciles the CSR named `name` as the cache holds it now; answers when to reconcile it
    /// again by itself, if ever. A CSR gone from the cache, or decided (the watch event of every
    /// decision written), needs nothing: [`Memory::prune`] drops what was remembered of it.
    async fn reconcile(self: Arc<Self>, name: Arc<str>) -> Option<Duration> {
        let csr = self.csrs.get(&name)?;
        if csr.is_decided() {
            tracing::debug!(csr = %short_name(&csr.name), "decided: nothing to do");
            return None;
        }
        Box::pin(self.carry_out(&csr)).await
    }
}

impl<R: Resolver, C: ClusterView> Reconciler<R, C> {
    /// Evaluates `cached` (only while leading, or under `--dry-run`) and carries out its
    /// [`Step`]; what it did settles in the memory, which answers when to reconcile it again.
    async fn carry_out(&self, cached: &Arc<CsrObject>) -> Option<Duration> {
        let ctx = &*self.ctx;
        let csr: &CsrObject = cached;
        let logged = short_name(&csr.name);
        if !evaluates(ctx.leadership.is_leader(), ctx.dry_run) {
            ctx.leadership.skipped();
            tracing::debug!(csr = %logged, "not the leader: not evaluated");
            return None;
        }
        if self.memory.is_unaddressable(csr) {
            return None;
        }
        if csr.name_cut {
            // No request can name it, so no decision can be written: told once, never evaluated,
            // and not counted as the oldest undecided CSR.
            ctx.metrics.record_unaddressable_csr();
            tracing::warn!(csr = %logged, "cannot decide this CSR: its name is longer than 253 bytes, so only a bounded stand-in of it is kept, which no request can name; left alone");
            return self.memory.settle(csr, Outcome::Unaddressable);
        }
        if self.memory.written_at(csr) {
            // A pass or a retry came before the watch brought our own write back: this is the
            // version the decision was written on, so the cache is behind, not the CSR undecided.
            tracing::debug!(csr = %logged, "decision written on this version: waiting for the watch");
            return None;
        }
        // A pending serving CSR's request is left in the apiserver: the CSR is decided as read
        // from there (the same uid, still undecided), on that request and resourceVersion.
        // A CSR retried on what was read keeps that read while its version stays the same, so a
        // CSR waiting on a newer one of its node is read once, not at every retry.
        let read = csr.request_in_apiserver();
        let whole;
        let csr = if read {
            match self.memory.kept_read(csr) {
                Some(kept) => whole = kept,
                None => match self.read_whole(csr).await {
                    Ok(fetched) => whole = fetched,
                    Err(retry_in) => return retry_in,
                },
            }
            &whole
        } else {
            csr
        };
        // Held until the decision is written: no other client CSR for the same node name, nor serving
        // CSR of the same node, is decided meanwhile, and the ledger counts a client approval
        // before the turn passes on.
        let _turn = ctx.ledger.node_turn(csr).await;
        let sub = csr.submission();
        let started = Instant::now();
        let evaluation = evaluate(&sub, &ctx.policy, &ctx.resolver, &ctx.cluster, Timestamp::now()).await;
        ctx.metrics.observe_evaluation(started.elapsed());
        let decision = evaluation.decision;
        let node = sub.username.strip_prefix(NODE_USER_PREFIX).unwrap_or_default();
        let told = (decision.kind, decision.reason);
        let outcome =
            match step_for(decision.kind, ctx.leadership.is_leader(), ctx.dry_run, self.memory.announced(csr, told)) {
                Step::Ignore => {
                    tracing::debug!(csr = %logged, reason = %decision.reason, "ignored");
                    Outcome::Excused { announced: None }
                }
                Step::Standby => {
                    ctx.leadership.skipped();
                    tracing::debug!(csr = %logged, decision = decision.kind.as_str(), "not the leader: waiting");
                    return None;
                }
                Step::Write => return self.write(csr, &decision, node).await,
                Step::Wait(note) => {
                    if let Some(note) = note {
                        ctx.metrics.record_decision(decision.kind, decision.reason);
                        tell(ctx, csr, &decision, node, note).await;
                    }
                    Outcome::Excused { announced: note.map(|_| told) }
                }
                Step::Retry(note) => {
                    if let Some(note) = note {
                        tell(ctx, csr, &decision, node, note).await;
                    }
                    ctx.metrics.record_decision(decision.kind, decision.reason);
                    let on_cluster = decision.reason.resolved_by_cluster_change();
                    Outcome::Retried { on_cluster, announced: note.map(|_| told) }
                }
            };
        let retry_in = self.memory.settle(csr, outcome);
        if read && matches!(outcome, Outcome::Retried { .. }) {
            self.memory.keep_read(csr);
        }
        if matches!(outcome, Outcome::Excused { .. }) {
            self.leave_request_in_apiserver(cached);
        }
        retry_in
    }

    /// Leaves the request of `cached`, just excused (held for a human, not the approver's, or a
    /// dry run's decision told), in the apiserver: nothing reads it before the CSR is evaluated
    /// again, which reads it from there, and the cache's room for requests goes to the CSRs it
    /// decides. Not when the watch brought a newer version meanwhile (its own event evaluates it).
    fn leave_request_in_apiserver(&self, cached: &Arc<CsrObject>) {
        if cached.request().is_some() {
            let mut slim = CsrObject::clone(cached);
            if slim.leave_request_in_apiserver() {
                self.csrs.replace(cached, slim);
            }
        }
    }

    /// Reads `csr` from the apiserver ([`read::read_whole`]): the same CSR, still undecided,
    /// whole, or (`Err`) when to reconcile it again: never when it is decided, gone or replaced by
    /// another CSR of its name (the watch brings what there is now, and triggers it), after the
    /// failed write's backoff when the read failed (a read failing is never a decision).
    async fn read_whole(&self, csr: &CsrObject) -> Result<CsrObject, Option<Duration>> {
        let logged = short_name(&csr.name);
        let error = match read::read_whole(&self.ctx.api, csr, read::READ_TIMEOUT).await {
            Ok(Read::Same(whole)) => return Ok(whole),
            Ok(other) => {
                tracing::debug!(csr = %logged, read = ?other, "read before deciding: nothing to decide now");
                return Err(None);
            }
            Err(error) => error,
        };
        let retry_in = self.memory.settle(csr, Outcome::ReadFailed);
        let error = format!("reading {logged} before deciding it: {error}");
        tracing::warn!(%error, retry_in = ?retry_in, "reconcile failed; retrying");
        Err(retry_in)
    }

    /// Writes `decision` on `csr`, preconditioned on the cached resourceVersion and given up when
    /// the fence would close; once the fence has closed nothing is sent (the CSR waits, as a
    /// standby's does, for the pass that follows when this replica can write again). The one
    /// place every way a write ends is handled: counted, logged, an approval counted in machine
    /// mode's ledger also when it may have been written (no answer), and settled in the memory,
    /// which gives the backoff.
    async fn write(&self, csr: &CsrObject, decision: &Decision, node: &str) -> Option<Duration> {
        let ctx = &*self.ctx;
        let logged = short_name(&csr.name);
        // The write may run only while the fence stays open, so it cannot land after the Lease
        // it is sent under can have expired; with no time left, nothing is sent.
        let Some(timeout) = ctx.leadership.write_timeout(WRITE_TIMEOUT) else {
            ctx.leadership.skipped();
            tracing::debug!(csr = %logged, decision = decision.kind.as_str(), "not the leader: waiting");
            return None;
        };
        let written = write_condition(&ctx.api.clone().into_client(), csr, decision, timeout).await;
        if written.is_ok() {
            ctx.metrics.record_decision(decision.kind, decision.reason);
            tell(ctx, csr, decision, node, WRITTEN).await;
        }
        let result = match &written {
            Ok(()) => WriteResult::Success,
            Err(error) if error.status() == Some(409) => WriteResult::Conflict,
            Err(error) if error.status() == Some(404) => WriteResult::NotFound,
            Err(RequestError::Unaddressable { .. }) => WriteResult::Unaddressable,
            Err(_) => WriteResult::Error,
        };
        ctx.metrics.record_write(result);
        // No answer does not mean not written: count it, so no second one follows.
        if matches!(result, WriteResult::Success | WriteResult::Error) && decision.kind == DecisionKind::Approve {
            ctx.ledger.record_approval(csr);
        }
        let retry_in = self.memory.settle(csr, Outcome::Write(result));
        if let Err(error) = written {
            match result {
                WriteResult::Conflict => {
                    tracing::debug!(csr = %logged, retry_in = ?retry_in, "conflict: re-reading and deciding again");
                }
                WriteResult::NotFound => {
                    tracing::debug!(csr = %logged, "gone before the decision was written: forgotten");
                }
                WriteResult::Unaddressable => {
                    tracing::error!(csr = %logged, %error, "cannot write the decision: no request can name this CSR");
                }
                WriteResult::Success | WriteResult::Error => {
                    let error = format!("writing the decision on {logged}: {error}");
                    tracing::warn!(%error, retry_in = ?retry_in, "reconcile failed; retrying");
                }
            }
        }
        retry_in
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
            assert_eq!(step_for(DecisionKind::Ignore, leading, dry_run, false), Step::Ignore);
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
