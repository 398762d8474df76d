//! The decision-table case both policy tables use: a CSR, a configuration, evidence, the time of
//! evaluation and the expected decision.

use node_csr_approver_core::policy::{DecisionKind, Evaluation, Evidence, Lookup, Reason, Submission, decide};
use node_csr_approver_core::policy::{NodeInfo, PolicyConfig, Resolution};

/// One scenario of a decision table.
pub struct Case {
    pub name: &'static str,
    pub sub: Submission,
    pub cfg: PolicyConfig,
    pub evidence: Evidence,
    pub now: jiff::Timestamp,
    pub expect: (DecisionKind, Reason),
}

impl Case {
    /// A case evaluated with `cfg`, `evidence` and `now`.
    pub fn new(
        name: &'static str,
        sub: Submission,
        cfg: PolicyConfig,
        evidence: Evidence,
        now: jiff::Timestamp,
        expect: (DecisionKind, Reason),
    ) -> Case {
        Case { name, sub, cfg, evidence, now, expect }
    }

    pub fn cfg(mut self, change: impl FnOnce(&mut PolicyConfig)) -> Case {
        change(&mut self.cfg);
        self
    }

    pub fn sub(mut self, change: impl FnOnce(&mut Submission)) -> Case {
        change(&mut self.sub);
        self
    }

    pub fn evidence(mut self, change: impl FnOnce(&mut Evidence)) -> Case {
        change(&mut self.evidence);
        self
    }

    /// Turns DNS resolution on with these answers.
    pub fn dns(mut self, answers: &[(&str, Resolution)]) -> Case {
        self.cfg.bypass_dns_resolution = false;
        self.evidence.dns = answers.iter().map(|(n, r)| ((*n).to_owned(), r.clone())).collect();
        self
    }

    /// Turns node-address verification on with this lookup result.
    pub fn node(mut self, node: Lookup<NodeInfo>) -> Case {
        self.cfg.verify_node_addresses = true;
        self.evidence.node = Some(node);
        self
    }

    /// Evaluates at `now` instead.
    pub fn at(mut self, now: jiff::Timestamp) -> Case {
        self.now = now;
        self
    }

    /// The decision the policy takes.
    pub fn evaluate(&self) -> Evaluation {
        decide(&self.sub, &self.cfg, &self.evidence, self.now)
    }
}

/// Evaluates every case and fails with the list of those that decided otherwise.
pub fn assert_all(cases: &[Case]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let evaluation = case.evaluate();
            let got = (evaluation.decision.kind, evaluation.decision.reason);
            (got != case.expect).then(|| {
                format!("{}: expected {:?}, got {:?}: {}", case.name, case.expect, got, evaluation.decision.message)
            })
        })
        .collect();
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n"));
}
