//! How the controller tells a decision: one log line and one Event ([`tell`]), each worded by its
//! [`Note`].

use super::Context;
use crate::display::short_name;
use crate::kubernetes::csr_object::CsrObject;
use crate::policy::Decision;

/// How a decision is told: the log line's `message` and the prefix of the event's note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Note {
    /// The decision log line's `message`.
    pub log: &'static str,
    /// Put before the decision's message in the event's note.
    pub event_prefix: &'static str,
}

/// A decision written.
pub(super) const WRITTEN: Note = Note { log: "written", event_prefix: "" };

/// Tells a decision on `csr` (of `node`): one log line, whose `message` says what was done and
/// `detail` why, and an event carrying the decision's message after the note's prefix.
pub(super) async fn tell<R, C>(ctx: &Context<R, C>, csr: &CsrObject, decision: &Decision, node: &str, note: Note) {
    tracing::info!(
        csr = %short_name(&csr.name),
        node = %node,
        decision = decision.kind.as_str(),
        reason = %decision.reason,
        detail = %decision.message,
        "{}", note.log
    );
    ctx.events.publish(csr.object_ref(), decision, note.event_prefix).await;
}
