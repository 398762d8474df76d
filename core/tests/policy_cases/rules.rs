//! The rules of `--rules`: each variable read, a rule that errors, a label that is missing, and
//! that rules only narrow (they run after every built-in check passed).

use std::sync::Arc;

use node_csr_approver_core::policy::{
    CheckId, ClusterError, DecisionKind, Lookup, NodeInfo, Outcome, Reason, UserRule, UserRules,
};

use super::{addrs, case, good_csr};
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::{Approve, Deny, Hold, Retry};

/// Compiled `(name, expression)` rules, each with the message `message of <name>`.
pub fn rules(rules: &[(&str, &str)]) -> UserRules {
    let compiled =
        rules.iter().map(|(name, expression)| UserRule::compile(name, expression, &format!("message of {name}")));
    UserRules::new(compiled.collect::<Result<_, _>>().unwrap()).unwrap()
}

/// Node `n1` as the apiserver returns it, labelled `pool: <pool>` (no label for `None`).
pub fn labelled_n1(pool: Option<&str>) -> NodeInfo {
    let labels = pool.map_or(serde_json::json!({}), |pool| serde_json::json!({ "pool": pool }));
    node_n1(labels)
}

/// Node `n1` as the apiserver returns it, with these labels (and what the rules are not given:
/// its managed fields, images and capacity).
fn node_n1(labels: serde_json::Value) -> NodeInfo {
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "n1", "labels": labels, "managedFields": [{ "manager": "kubelet" }] },
        "status": {
            "addresses": [{ "type": "InternalIP", "address": "10.0.0.11" }],
            "images": [{ "names": ["registry.example.com/app:1"], "sizeBytes": 1000 }],
            "capacity": { "cpu": "4" },
        },
    });
    NodeInfo { name: "n1".into(), addresses: Vec::new(), object: Some(Arc::new(object)) }
}

/// Node `n1` whose labels take `bytes` bytes.
fn inflated_n1(bytes: usize) -> NodeInfo {
    node_n1(serde_json::json!({ "big": "x".repeat(bytes) }))
}

/// A case of `good_csr()` under these rules.
fn ruled(name: &'static str, expect: (DecisionKind, Reason), with: &[(&str, &str)]) -> Case {
    let with = rules(with);
    case(name, good_csr(), expect).cfg(move |c| c.user_rules = with)
}

const REQUEST: &str = "request.nodeName == 'n1' && request.username == 'system:node:n1' && \
    request.groups == ['system:nodes', 'system:authenticated'] && request.dnsNames == ['n1.nodes.example.com'] && \
    request.ipAddresses == ['10.0.0.11'] && request.usages == ['digital signature', 'key encipherment', 'server auth'] && \
    request.expirationSeconds == null && request.signerName == 'kubernetes.io/kubelet-serving'";

/// A pool's domain, chosen by a label the node may write, guarded so that a Node without it passes.
const GPU_DOMAIN: &str = "!('pool' in node.metadata.labels) || node.metadata.labels['pool'] != 'gpu' || \
    request.dnsNames.all(n, n.endsWith('.gpu.example.com'))";

/// The GPU pool's domain by a label nodes cannot set, failing closed (the README's first example).
const RESTRICTED_GPU_DOMAIN: &str = "node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu' ? \
    request.dnsNames.all(n, n.endsWith('.gpu.example.com')) : true";

/// The same written with `||`, which an error on its left does not fail when its right is true.
const RESTRICTED_GPU_DOMAIN_OR: &str = "node.metadata.labels['node-restriction.kubernetes.io/pool'] != 'gpu' || \
    request.dnsNames.all(n, n.endsWith('.gpu.example.com'))";

/// What the rules see of the Node: its projection only.
const PROJECTION: &str = "node.metadata.name == 'n1' && node.metadata.labels == {'pool': 'cpu'} && \
    node.metadata.annotations == {} && !has(node.metadata.managedFields) && !has(node.status.images) && \
    !has(node.status.capacity) && node.status.addresses == [{'type': 'InternalIP', 'address': '10.0.0.11'}]";

/// The rules' cases.
pub fn cases() -> Vec<Case> {
    let found =
        |pool| move |e: &mut node_csr_approver_core::policy::Evidence| e.node = Some(Lookup::Found(labelled_n1(pool)));
    vec![
        // `request`: every field.
        ruled("rule reads every request field", (Approve, Reason::AutoApproved), &[("request", REQUEST)]),
        ruled("rule on the node name fails", (Deny, Reason::RuleFailed), &[("name", "request.nodeName == 'n2'")]),
        ruled("rule on expiration", (Approve, Reason::AutoApproved), &[("ttl", "request.expirationSeconds == 3600")])
            .sub(|s| s.expiration_seconds = Some(3600)),
        ruled("rule on expiration fails", (Deny, Reason::RuleFailed), &[("ttl", "request.expirationSeconds == 3600")])
            .sub(|s| s.expiration_seconds = Some(7200)),
        ruled(
            "ipv6 sans refused for a pool",
            (Deny, Reason::RuleFailed),
            &[("v4", "request.ipAddresses.all(a, !a.contains(':'))")],
        )
        .sub(|s| s.request = Request::node("n1").dns("n1.nodes.example.com").ip("fd00:0:0::11").pem().into_bytes()),
        ruled(
            "ip sans are canonical",
            (Approve, Reason::AutoApproved),
            &[("v6", "request.ipAddresses == ['fd00::11']")],
        )
        .sub(|s| s.request = Request::node("n1").dns("n1.nodes.example.com").ip("fd00:0:0::11").pem().into_bytes()),
        ruled(
            "dns names are lowercase",
            (Approve, Reason::AutoApproved),
            &[("lower", "request.dnsNames == ['n1.nodes.example.com']")],
        )
        .sub(|s| s.request = Request::node("n1").dns("N1.Nodes.Example.com").ip("10.0.0.11").pem().into_bytes()),
        ruled(
            "the standard functions hold",
            (Approve, Reason::AutoApproved),
            &[(
                "std",
                "request.dnsNames.all(n, n.endsWith('.example.com')) && size(request.groups) == 2 && request.nodeName.matches('^n[0-9]$') && string(request.ipAddresses.size()) == '1'",
            )],
        ),
        // `resolved`.
        ruled("resolved is empty when dns is bypassed", (Approve, Reason::AutoApproved), &[("dns", "resolved == {}")]),
        ruled(
            "rule reads resolved",
            (Approve, Reason::AutoApproved),
            &[("dns", "resolved['n1.nodes.example.com'] == ['10.0.0.11', 'fd00::11']")],
        )
        .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11", "fd00::11"]))]),
        ruled(
            "resolved addresses are canonical",
            (Approve, Reason::AutoApproved),
            &[("dns", "resolved['n1.nodes.example.com'] == ['10.0.0.11']")],
        )
        .dns(&[("n1.nodes.example.com", addrs(&["::ffff:10.0.0.11"]))]),
        ruled(
            "rule on resolved fails",
            (Deny, Reason::RuleFailed),
            &[("dns", "resolved['n1.nodes.example.com'].all(a, !a.contains(':'))")],
        )
        .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11", "fd00::11"]))]),
        // `node`.
        ruled("gpu node under the gpu domain fails", (Deny, Reason::RuleFailed), &[("gpu", GPU_DOMAIN)])
            .evidence(found(Some("gpu"))),
        ruled("node of another pool passes", (Approve, Reason::AutoApproved), &[("gpu", GPU_DOMAIN)])
            .evidence(found(Some("cpu"))),
        ruled("unlabelled node passes a guarded rule", (Approve, Reason::AutoApproved), &[("gpu", GPU_DOMAIN)])
            .evidence(found(None)),
        ruled(
            "a missing label is a failure",
            (Deny, Reason::RuleFailed),
            &[("pool", "node.metadata.labels['pool'] == 'cpu'")],
        )
        .evidence(found(None)),
        ruled("a missing node is null", (Approve, Reason::AutoApproved), &[("absent", "node == null")])
            .evidence(|e| e.node = Some(Lookup::Missing)),
        ruled("reading a missing node errors", (Deny, Reason::RuleFailed), &[("absent", "node.metadata.name == 'n1'")])
            .evidence(|e| e.node = Some(Lookup::Missing)),
        ruled("an unreadable node is retried", (Retry, Reason::ClusterUnavailable), &[("pool", GPU_DOMAIN)])
            .evidence(|e| e.node = Some(Lookup::Failed(ClusterError::Request("connection reset".into())))),
        ruled("a node not looked up is retried", (Retry, Reason::ClusterUnavailable), &[("pool", GPU_DOMAIN)]),
        ruled(
            "node is not read when no rule names it",
            (Approve, Reason::AutoApproved),
            &[("name", "request.nodeName == 'n1'")],
        )
        .evidence(|e| e.node = Some(Lookup::Failed(ClusterError::Request("connection reset".into())))),
        ruled("the rules see the node's projection", (Approve, Reason::AutoApproved), &[("projection", PROJECTION)])
            .evidence(found(Some("cpu"))),
        ruled("a node just under the bound is read", (Approve, Reason::AutoApproved), &[("name", "node != null")])
            .evidence(|e| e.node = Some(Lookup::Found(inflated_n1(60_000)))),
        ruled("a node too large for the rules fails closed", (Deny, Reason::RuleFailed), &[("name", "node != null")])
            .evidence(|e| e.node = Some(Lookup::Found(inflated_n1(70_000)))),
        ruled(
            "a node without the restricted label fails closed",
            (Deny, Reason::RuleFailed),
            &[("gpu", RESTRICTED_GPU_DOMAIN)],
        )
        .evidence(found(Some("cpu"))),
        ruled(
            "a node without the restricted label fails closed also under the pool's domain",
            (Deny, Reason::RuleFailed),
            &[("gpu", RESTRICTED_GPU_DOMAIN)],
        )
        .sub(|s| s.request = Request::node("n1").dns("n1.gpu.example.com").ip("10.0.0.11").pem().into_bytes())
        .cfg(|c| c.provider_regex = regex::Regex::new(r"^n1\.(gpu|nodes)\.example\.com$").unwrap())
        .evidence(found(Some("cpu"))),
        ruled(
            "a node of the restricted pool under its domain passes",
            (Approve, Reason::AutoApproved),
            &[("gpu", RESTRICTED_GPU_DOMAIN)],
        )
        .sub(|s| s.request = Request::node("n1").dns("n1.gpu.example.com").ip("10.0.0.11").pem().into_bytes())
        .cfg(|c| c.provider_regex = regex::Regex::new(r"^n1\.(gpu|nodes)\.example\.com$").unwrap())
        .evidence(|e| {
            let labels = serde_json::json!({ "node-restriction.kubernetes.io/pool": "gpu" });
            e.node = Some(Lookup::Found(node_n1(labels)));
        }),
        ruled(
            "a node without the label passes || when the request meets its other side",
            (Approve, Reason::AutoApproved),
            &[("gpu", RESTRICTED_GPU_DOMAIN_OR)],
        )
        .sub(|s| s.request = Request::node("n1").dns("n1.gpu.example.com").ip("10.0.0.11").pem().into_bytes())
        .cfg(|c| c.provider_regex = regex::Regex::new(r"^n1\.(gpu|nodes)\.example\.com$").unwrap())
        .evidence(found(Some("cpu"))),
        ruled("a node of another restricted pool passes", (Approve, Reason::AutoApproved), &[("gpu", RESTRICTED_GPU_DOMAIN)])
            .evidence(|e| {
                let labels = serde_json::json!({ "node-restriction.kubernetes.io/pool": "cpu" });
                e.node = Some(Lookup::Found(node_n1(labels)));
            }),
        // Numbers are ints.
        ruled(
            "numbers are ints",
            (Approve, Reason::AutoApproved),
            &[("ttl", "type(request.expirationSeconds) == int && request.expirationSeconds - 3600 == 0 && request.expirationSeconds / 60 == 60")],
        )
        .sub(|s| s.expiration_seconds = Some(3600)),
        // Addresses by prefix, with the functions of Kubernetes.
        ruled(
            "addresses inside a prefix pass",
            (Approve, Reason::AutoApproved),
            &[("prefix", "request.ipAddresses.all(a, cidr('10.0.0.0/24').containsIP(a) && ip(a).family() == 4)")],
        ),
        ruled(
            "an address outside a prefix fails",
            (Deny, Reason::RuleFailed),
            &[("prefix", "request.ipAddresses.all(a, cidr('10.20.0.0/16').containsIP(a))")],
        ),
        // `machine`, outside machine mode.
        ruled(
            "machine is null outside machine mode",
            (Approve, Reason::AutoApproved),
            &[("machine", "machine == null")],
        ),
        // Errors and results of the wrong type fail the rule.
        ruled("an erroring rule fails", (Deny, Reason::RuleFailed), &[("error", "request.nodeName + 1 == 2")]),
        // `||` and `&&` absorb an error where the other side decides; the conditional does not.
        ruled("error || true holds", (Approve, Reason::AutoApproved), &[("or", "request.nodeName + 1 == 2 || true")]),
        ruled("true || error holds", (Approve, Reason::AutoApproved), &[("or", "true || request.nodeName + 1 == 2")]),
        ruled("error || false fails", (Deny, Reason::RuleFailed), &[("or", "request.nodeName + 1 == 2 || false")]),
        ruled("!(error && false) holds", (Approve, Reason::AutoApproved), &[("and", "!(request.nodeName + 1 == 2 && false)")]),
        ruled("all() absorbs an error beside false", (Approve, Reason::AutoApproved), &[("all", "![0, 'a'].all(x, x > 0)")]),
        ruled("exists() absorbs an error beside true", (Approve, Reason::AutoApproved), &[("any", "[1, 'a'].exists(x, x > 0)")]),
        ruled("all() fails on an error beside true", (Deny, Reason::RuleFailed), &[("all", "[1, 'a'].all(x, x > 0)")]),
        ruled(
            "an error in a condition fails",
            (Deny, Reason::RuleFailed),
            &[("if", "request.nodeName + 1 == 2 ? true : true")],
        ),
        ruled(
            "a division by zero fails",
            (Deny, Reason::RuleFailed),
            &[("zero", "1 / (size(request.groups) - 2) == 1")],
        ),
        ruled("a non-bool result fails", (Deny, Reason::RuleFailed), &[("text", "request.nodeName")]),
        // Every rule must hold; --skip-deny-step holds.
        ruled("the second rule fails", (Deny, Reason::RuleFailed), &[("first", "true"), ("second", "false")]),
        ruled("a failing rule is held under skip deny", (Hold, Reason::RuleFailed), &[("no", "false")])
            .cfg(|c| c.skip_deny_step = true),
        // Rules only narrow: a built-in failure decides, whatever the rules say.
        ruled("rules never widen", (Deny, Reason::RegexMismatch), &[("yes", "true")])
            .sub(|s| *s = serving("n1", &Request::node("n1").dns("n1.evil.io").pem())),
        ruled("built-in failure before a failing rule", (Deny, Reason::RegexMismatch), &[("no", "false")])
            .sub(|s| *s = serving("n1", &Request::node("n1").dns("n1.evil.io").pem())),
        ruled("a retry before the rules", (Retry, Reason::ClusterUnavailable), &[("no", "false")])
            .evidence(|e| e.apiserver = None),
    ]
}

#[test]
fn a_failing_rule_names_itself_and_says_why() {
    let decide = |with: &[(&str, &str)]| {
        let evaluation = ruled("message", (Deny, Reason::RuleFailed), with).evaluate();
        assert_eq!((evaluation.decision.kind, evaluation.decision.reason), (Deny, Reason::RuleFailed));
        evaluation.decision.message
    };
    assert_eq!(decide(&[("ok", "true"), ("pool", "false")]), "rule \"pool\" failed: message of pool");
    let missing = decide(&[("pool", "request.labels == 1")]);
    assert_eq!(missing, "rule \"pool\" could not be evaluated: No such key: labels (message of pool)");
    let text = decide(&[("text", "request.nodeName")]);
    assert!(text.starts_with("rule \"text\" evaluated to String, not a bool"), "{text}");
}

#[test]
fn a_node_too_large_for_the_rules_fails_every_rule_naming_the_bound() {
    let evaluation = ruled("inflated", (Deny, Reason::RuleFailed), &[("name", "node != null"), ("other", "true")])
        .evidence(|e| e.node = Some(Lookup::Found(inflated_n1(1 << 20))))
        .evaluate();
    assert_eq!(
        evaluation.decision.message,
        "rule \"name\": Node \"n1\" is too large for the rules: its projection takes more than 65536 bytes"
    );
    let rows = evaluation.checks.iter().filter(|row| row.check == CheckId::Rule);
    assert!(rows.clone().count() == 2 && rows.clone().all(|row| matches!(row.outcome, Outcome::Fail(_))));
}

#[test]
fn every_rule_is_a_check_row_after_the_built_in_checks() {
    let evaluation =
        ruled("rows", (Approve, Reason::AutoApproved), &[("first", "true"), ("second", "true")]).evaluate();
    let mut rows: Vec<(CheckId, Outcome)> =
        evaluation.checks.iter().map(|row| (row.check, row.outcome.clone())).collect();
    // Only whether a newer CSR of the node supersedes this one comes after them.
    assert_eq!(rows.pop().map(|(check, _)| check), Some(CheckId::Superseded));
    let last_two = &rows[rows.len() - 2..];
    assert_eq!(
        last_two,
        [(CheckId::Rule, Outcome::Pass("first: holds".into())), (CheckId::Rule, Outcome::Pass("second: holds".into()))]
    );
    assert!(rows[..rows.len() - 2].iter().all(|(check, _)| *check != CheckId::Rule));
    let message = &evaluation.decision.message;
    assert!(message.ends_with("expiration, rule, rule, superseded"), "{message}");
}

#[test]
fn a_node_that_cannot_be_read_retries_every_rule_that_needs_it_naming_it() {
    let failed = Lookup::Failed(ClusterError::Request("connection reset".into()));
    let evaluation = ruled("retry", (Retry, Reason::ClusterUnavailable), &[("pool", GPU_DOMAIN)])
        .evidence(|e| e.node = Some(failed))
        .evaluate();
    assert_eq!(evaluation.decision.kind, Retry);
    assert_eq!(
        evaluation.decision.message,
        "rule \"pool\": cannot read Node \"n1\": cluster read failed: connection reset"
    );
}

#[test]
fn no_rule_runs_after_a_built_in_check_failed() {
    let evaluation = ruled("no rows", (Deny, Reason::RegexMismatch), &[("no", "false")])
        .sub(|s| *s = serving("n1", &Request::node("n1").dns("n1.evil.io").pem()))
        .evaluate();
    assert_eq!(evaluation.decision.reason, Reason::RegexMismatch);
    assert!(evaluation.checks.iter().all(|row| row.check != CheckId::Rule), "{:?}", evaluation.checks);
}
