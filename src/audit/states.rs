//! What the periodic audit remembers of each Node between scans: its last state, so that a Node
//! is told about (an Event) when its state changes, not on every scan. The memory holds one entry
//! per Node of the last scan: a Node no longer listed is forgotten. The Event's note quotes and
//! escapes what it takes from a certificate as the text logs do ([`Quoted`], [`Escaped`]).

use std::collections::HashMap;

use super::{Finding, NodeAudit};
use crate::display::{Escaped, Quoted};

/// A Node's state: `None` is `compliant`, else its most severe finding.
type State = Option<Finding>;

/// The last state of each Node the last scan listed.
#[derive(Debug, Default)]
pub struct StateMemory {
    last: HashMap<String, State>,
}

/// A Node whose state changed: what to tell about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The Node's name.
    pub node: String,
    /// A problem (a Warning), or back to `compliant` (Normal).
    pub problem: bool,
    /// The Event's reason: the new state, e.g. `ServingCertificateSelfSigned`.
    pub reason: &'static str,
    /// What changed and why: text from the certificate quoted and escaped, every other message
    /// escaped.
    pub note: String,
}

/// One scan's pass over the memory, fed one report at a time as the scan makes them: the states
/// it has seen so far, which replace the memory when the scan completes. It holds one entry per
/// Node seen (its name and state), nothing of a report.
#[derive(Debug)]
pub struct ScanPass<'a> {
    memory: &'a mut StateMemory,
    seen: HashMap<String, State>,
}

impl ScanPass<'_> {
    /// Remembers the state of `report`'s Node and returns its change, if it changed. A Node seen
    /// for the first time is a change unless it is compliant. `undetermined` (the policy gave no
    /// verdict this time) is no change: the Node keeps the state it had.
    pub fn observe(&mut self, report: &NodeAudit) -> Option<StateChange> {
        let before = self.memory.last.remove(&report.node);
        let now = report.findings.first().copied();
        if now == Some(Finding::Undetermined) {
            if let Some(before) = before {
                self.seen.insert(report.node.clone(), before);
            }
            return None;
        }
        self.seen.insert(report.node.clone(), now);
        (before != Some(now) && (before.is_some() || now.is_some())).then(|| change(report, before))
    }

    /// The scan listed every Node: a Node it did not see is forgotten.
    pub fn complete(self) {
        self.memory.last = self.seen;
    }

    /// The scan stopped before it listed every Node: what it saw is remembered, and every Node it
    /// did not see keeps the state it had.
    pub fn interrupt(self) {
        self.memory.last.extend(self.seen);
    }
}

impl StateMemory {
    /// Starts a scan's pass: [`ScanPass::observe`] each report, then [`ScanPass::complete`] (or
    /// [`ScanPass::interrupt`]).
    pub fn pass(&mut self) -> ScanPass<'_> {
        ScanPass { memory: self, seen: HashMap::new() }
    }

    /// Observes `reports` (every Node listed by one scan) in one completed pass; returns the
    /// Nodes whose state changed.
    #[cfg(test)]
    pub fn update(&mut self, reports: &[NodeAudit]) -> Vec<StateChange> {
        let mut pass = self.pass();
        let changes = reports.iter().filter_map(|report| pass.observe(report)).collect();
        pass.complete();
        changes
    }

    /// Forgets every Node: the next scan tells each Node with a finding again (this replica lost
    /// the Lease, and another one may have told since).
    pub fn forget(&mut self) {
        self.last = HashMap::new();
    }

    /// How many Nodes are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no Node is remembered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// The name of a state, as reports show it.
fn state_name(state: State) -> &'static str {
    state.map_or("compliant", Finding::as_str)
}

/// The Event reason of a Node's new state.
pub fn event_reason(state: Option<Finding>) -> &'static str {
    match state {
        None => "ServingCertificateCompliant",
        Some(Finding::Unreachable) => "KubeletUnreachable",
        Some(Finding::NotDialled) => "KubeletNotDialled",
        Some(Finding::Malformed) => "ServingCertificateMalformed",
        Some(Finding::SelfSigned) => "ServingCertificateSelfSigned",
        Some(Finding::Untrusted) => "ServingCertificateUntrusted",
        Some(Finding::NonCompliant) => "ServingCertificateNonCompliant",
        Some(Finding::Undetermined) => "ServingCertificateUndetermined",
        Some(Finding::Expired) => "ServingCertificateExpired",
        Some(Finding::Expiring) => "ServingCertificateExpiring",
    }
}

/// The change of `report`'s Node from `before` (`None`: first seen) to its state now.
fn change(report: &NodeAudit, before: Option<State>) -> StateChange {
    let now = report.findings.first().copied();
    let was = before.map_or_else(|| "first audit".to_owned(), |state| format!("was {}", state_name(state)));
    let mut parts = vec![format!("serving certificate audit: {} ({was})", state_name(now))];
    if report.findings.len() > 1 {
        let findings: Vec<&str> = report.findings.iter().map(|finding| finding.as_str()).collect();
        parts.push(format!("findings: {}", findings.join(", ")));
    }
    if let Some(certificate) = &report.certificate {
        let left = report.seconds_left.unwrap_or_default();
        let days = left.div_euclid(86_400);
        let (subject, issuer) = (Quoted(&certificate.subject), Quoted(&certificate.issuer));
        parts.push(format!("subject {subject}, issuer {issuer}, notAfter {} ({days}d left)", certificate.not_after));
    }
    if let Some(policy) = report.policy.as_ref().filter(|policy| policy.decision != "approve") {
        let message = Escaped(&policy.message);
        parts.push(format!("today's policy: {} ({}): {message}", policy.decision, policy.reason));
    }
    parts.extend(report.verify_error.iter().map(|error| format!("--kubelet-serving-ca-file: {}", Escaped(error))));
    parts.extend(report.detail.iter().map(|detail| Escaped(detail).to_string()));
    StateChange { node: report.node.clone(), problem: now.is_some(), reason: event_reason(now), note: parts.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::state_name as report_state;

    fn report(node: &str, findings: &[Finding]) -> NodeAudit {
        let mut report = NodeAudit::without_certificate(node, None, Finding::Unreachable, "why".into());
        report.findings = findings.iter().copied().collect();
        report.state = report_state(&report.findings);
        report
    }

    fn told(changes: &[StateChange]) -> Vec<(&str, &str, bool)> {
        changes.iter().map(|change| (change.node.as_str(), change.reason, change.problem)).collect()
    }

    #[test]
    fn a_node_is_told_about_once_per_change_of_state() {
        let mut memory = StateMemory::default();
        let first = memory.update(&[report("a", &[]), report("b", &[Finding::SelfSigned, Finding::NonCompliant])]);
        assert_eq!(told(&first), [("b", "ServingCertificateSelfSigned", true)], "a compliant Node is not told");
        assert!(first[0].note.starts_with("serving certificate audit: self-signed (first audit)"), "{first:?}");
        assert!(first[0].note.contains("findings: self-signed, non-compliant; why"), "{first:?}");
        let same = memory.update(&[report("a", &[]), report("b", &[Finding::SelfSigned, Finding::NonCompliant])]);
        assert_eq!(told(&same), [], "nothing changed");
        let later = memory.update(&[report("a", &[Finding::Expiring]), report("b", &[])]);
        assert_eq!(
            told(&later),
            [("a", "ServingCertificateExpiring", true), ("b", "ServingCertificateCompliant", false)]
        );
        assert!(later[1].note.starts_with("serving certificate audit: compliant (was self-signed)"), "{later:?}");
        let worse = memory.update(&[report("a", &[Finding::Expired]), report("b", &[])]);
        assert_eq!(told(&worse), [("a", "ServingCertificateExpired", true)]);
    }

    #[test]
    fn undetermined_keeps_the_state_a_node_had() {
        let mut memory = StateMemory::default();
        memory.update(&[report("a", &[Finding::NonCompliant])]);
        assert_eq!(told(&memory.update(&[report("a", &[Finding::Undetermined])])), []);
        assert_eq!(told(&memory.update(&[report("a", &[Finding::NonCompliant])])), [], "still non-compliant");
        assert_eq!(told(&memory.update(&[report("n", &[Finding::Undetermined])])), [], "no state yet");
        assert!(memory.is_empty(), "`a` is gone, `n` has no state");
    }

    #[test]
    fn nodes_gone_are_forgotten_and_forgetting_tells_again() {
        let mut memory = StateMemory::default();
        let nodes: Vec<NodeAudit> = (0..100).map(|i| report(&format!("n{i}"), &[Finding::Unreachable])).collect();
        assert_eq!(memory.update(&nodes).len(), 100);
        assert_eq!(memory.len(), 100);
        assert_eq!(memory.update(&nodes[..3]).len(), 0);
        assert_eq!(memory.len(), 3, "bounded by the Nodes listed");
        assert_eq!(told(&memory.update(&nodes[..4])), [("n3", "KubeletUnreachable", true)], "n3 came back");
        memory.forget();
        assert!(memory.is_empty());
        assert_eq!(memory.update(&nodes[..4]).len(), 4);
    }

    #[test]
    fn an_interrupted_scan_keeps_the_nodes_it_did_not_see() {
        let mut memory = StateMemory::default();
        memory.update(&[report("a", &[Finding::Unreachable]), report("b", &[Finding::SelfSigned])]);
        let mut pass = memory.pass();
        assert_eq!(
            pass.observe(&report("a", &[Finding::Expired])).map(|change| change.reason),
            Some("ServingCertificateExpired")
        );
        pass.interrupt();
        assert_eq!(memory.len(), 2, "b kept");
        let next = memory.update(&[report("a", &[Finding::Expired]), report("b", &[Finding::SelfSigned])]);
        assert_eq!(told(&next), [], "neither is told again");
    }
}
