//! The rules of `--rules` in machine mode: `machine` is the Machine matched for the CSR, a
//! node-client CSR failing a rule is held, and `node` is null for a bootstrap.

use std::sync::Arc;

use node_csr_approver_core::policy::{DecisionKind, MachineInfo, Reason, UserRule, UserRules};

use super::{case, client, evidence, n1_machine, serving_n1};
use crate::support::Request;
use crate::support::table::Case;

use DecisionKind::{Approve, Deny, Hold};

fn rules(expression: &str) -> UserRules {
    UserRules::new(vec![UserRule::compile("pool", expression, "pool rule").unwrap()]).unwrap()
}

/// Machine `m1` for node `n1` (as [`n1_machine`]), its object labelled `pool: gpu`.
fn gpu_machine(node_ref: Option<&str>) -> Arc<MachineInfo> {
    let object = serde_json::json!({ "metadata": { "name": "m1", "labels": { "pool": "gpu" } } });
    Arc::new(MachineInfo { object: Some(Arc::new(object)), ..(*n1_machine(node_ref)).clone() })
}

fn ruled(name: &'static str, sub: node_csr_approver_core::policy::Submission, claimed: bool, expression: &str) -> Case {
    let with = rules(expression);
    let machines = vec![gpu_machine(claimed.then_some("n1"))];
    let expect = (Approve, Reason::AutoApproved);
    case(name, sub, evidence(machines), expect).cfg(move |c| c.user_rules = with)
}

fn serving() -> node_csr_approver_core::policy::Submission {
    serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11"))
}

/// The machine-mode rule cases.
pub fn cases() -> Vec<Case> {
    let gpu = "machine.metadata.labels['pool'] == 'gpu'";
    let cpu = "machine.metadata.labels['pool'] == 'cpu'";
    let failed = |case: Case, kind| Case { expect: (kind, Reason::RuleFailed), ..case };
    vec![
        ruled("client rule reads the matched machine", client("n1", 60), false, gpu),
        failed(ruled("client failing a rule is held", client("n1", 60), false, cpu), Hold),
        ruled("serving rule reads the machine of its nodeRef", serving(), true, gpu),
        failed(ruled("serving failing a rule is denied", serving(), true, cpu), Deny),
        ruled("a bootstrap has no node", client("n1", 60), false, "node == null && request.nodeName == 'n1'"),
        ruled("a client request has no sans", client("n1", 60), false, "request.dnsNames == [] && resolved == {}"),
    ]
}
