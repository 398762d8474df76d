//! Every rule example of the documents fails closed. The examples are read from the files
//! themselves (the README, `docs/`, the chart's values and CI values, `examples/`), so a new one is
//! held to it too: each keys on a label compared with a literal (`…labels['key'] == 'value'`), and
//! a Node and Machine without that label are denied, also for a request that satisfies the rest of
//! the rule (CEL's `||` turns `error || true` into `true`, so a missing label must not sit beside
//! what the request can satisfy).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use node_csr_approver_core::policy::{
    ApiserverAddresses, BrakeInputs, DecisionKind, Evidence, Lookup, MachineInfo, NodeAddress, NodeInfo, PolicyConfig,
    Reason, UserRule, UserRules, decide,
};
use support::{Request, serving};
use testkit::machine::{machine_config, now};

/// The SANs of the requests each example is tried with; each example must approve one of them
/// for a node of its pool.
const REQUESTS: [(&str, &str); 4] = [
    ("n1.gpu.example.com", "10.20.0.11"),
    ("n1.gpu.example.com", "10.1.0.11"),
    ("n1.nodes.example.com", "10.0.0.11"),
    ("n1.nodes.example.com", "10.20.0.11"),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files that show rules: the README, every document under `docs/`, the chart's values and
/// CI values, and `examples/`.
fn sources() -> Vec<PathBuf> {
    let in_dir = |dir: &str, ext: &str| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == ext))
            .collect();
        files.sort();
        files
    };
    let mut files = vec![repo().join("README.md"), repo().join("charts/node-csr-approver/values.yaml")];
    files.extend(in_dir("docs", "md"));
    files.extend(in_dir("charts/node-csr-approver/ci", "yaml"));
    files.extend(in_dir("examples", "yaml"));
    files
}

/// A line without a leading YAML comment mark (`#   - name: …` in the chart's values), and its
/// indentation after it.
fn uncommented(line: &str) -> (usize, &str) {
    let text = line.trim_start().strip_prefix('#').unwrap_or(line);
    let content = text.trim_start();
    (text.len() - content.len(), content)
}

/// Every `expression:` of a YAML rule in `text`: plain, quoted, or a folded or literal block.
fn expressions(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let (indent, content) = uncommented(line);
        let Some(value) = content.strip_prefix("- ").unwrap_or(content).strip_prefix("expression:") else {
            continue;
        };
        let value = value.trim();
        let expression = if value.starts_with(['>', '|']) {
            let block = lines[index + 1..].iter().map(|line| uncommented(line));
            let block = block.take_while(|(inner, content)| *inner > indent && !content.is_empty());
            block.map(|(_, content)| content).collect::<Vec<_>>().join(" ")
        } else if let Some(quoted) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            quoted.replace("\\\"", "\"").replace("\\\\", "\\")
        } else if let Some(quoted) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            quoted.replace("''", "'")
        } else {
            value.to_owned()
        };
        found.push(expression);
    }
    found
}

/// The label an example keys on and the value it compares it with: the first
/// `labels['key'] == 'value'` (or `!=`) of the expression.
fn keyed_label(expression: &str) -> Option<(String, String)> {
    let pattern = regex::Regex::new(r#"labels\[\s*'([^']+)'\s*\]\s*(?:==|!=)\s*'([^']*)'"#).unwrap();
    let captures = pattern.captures(expression)?;
    Some((captures[1].to_owned(), captures[2].to_owned()))
}

/// Decides node `n1`'s serving CSR for `dns` and `ip` under `rule`, in machine mode (so both
/// `node` and `machine` are set), its Node and its Machine carrying `labels`.
fn decide_with(rule: &UserRules, (dns, ip): (&str, &str), labels: &serde_json::Value) -> (DecisionKind, Reason) {
    let config = PolicyConfig {
        provider_regex: regex::Regex::new(r"^n1\.[a-z0-9.-]+$").unwrap(),
        ip_prefixes: vec!["10.0.0.0/8".parse().unwrap()],
        user_rules: rule.clone(),
        ..machine_config()
    };
    let address = |kind: &str, address: &str| NodeAddress { kind: kind.into(), address: address.into() };
    let object = |kind: &str| serde_json::json!({ "kind": kind, "metadata": { "name": "n1", "labels": labels } });
    let node = NodeInfo { name: "n1".into(), addresses: Vec::new(), object: Some(Arc::new(object("Node"))) };
    let machine = MachineInfo {
        id: "openshift-machine-api/m1".into(),
        created: testkit::machine::MACHINE_CREATED.parse().ok(),
        node_ref: Some("n1".into()),
        addresses: vec![address("InternalDNS", "n1"), address("Hostname", dns), address("InternalIP", ip)],
        object: Some(Arc::new(object("Machine"))),
    };
    let evidence = Evidence {
        node: Some(Lookup::Found(node)),
        machines: Some(Ok(vec![Arc::new(machine)])),
        load: Some(Ok(BrakeInputs { pending: 1, machines: 1, nodes: 1 })),
        apiserver: Some(Ok(ApiserverAddresses::default())),
        client_certificates: Some(Ok(Vec::new())),
        serving_csrs: Some(Ok(Vec::new())),
        ..Evidence::default()
    };
    let sub = serving("n1", &Request::node("n1").dns(dns).ip(ip).pem());
    let decision = decide(&sub, &config, &evidence, now()).decision;
    (decision.kind, decision.reason)
}

#[test]
fn the_documents_show_rule_examples_and_each_is_read() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = expressions(&readme);
    assert_eq!(shown.len(), 3, "the README's three pool rules: {shown:?}");
    assert!(shown.iter().all(|e| e.starts_with("node.metadata.labels[") && e.contains(" request.")), "{shown:?}");
    let block = "rules:\n  - name: a\n    expression: >-\n      a ||\n      b\n    message: m\n";
    assert_eq!(expressions(block), ["a || b"]);
    let values = "rules: []\n#   - name: a\n#     expression: >-\n#       a ||\n#       b\n#     message: m\n";
    assert_eq!(expressions(values), ["a || b"]);
    let quoted = "  - expression: \"a == \\\"x\\\"\"\n  - expression: 'a == ''x'''\n  - expression: a";
    assert_eq!(expressions(quoted), ["a == \"x\"", "a == 'x'", "a"]);
}

#[test]
fn every_rule_example_denies_a_node_without_its_label_whatever_the_request() {
    let mut examples = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        examples.extend(expressions(&text).into_iter().map(|expression| (file.clone(), expression)));
    }
    assert!(examples.len() >= 5, "{examples:?}");
    let mut failures = Vec::new();
    for (file, expression) in examples {
        let at = format!("{}: {expression}", file.display());
        let compiled = UserRule::compile("example", &expression, "m").unwrap_or_else(|e| panic!("{at}: {e}"));
        let rule = UserRules::new(vec![compiled]).unwrap();
        let Some((key, value)) = keyed_label(&expression) else {
            failures.push(format!("{at}: keys on no label"));
            continue;
        };
        let pool = serde_json::json!({ key.as_str(): value });
        let satisfying: Vec<_> =
            REQUESTS.into_iter().filter(|sans| decide_with(&rule, *sans, &pool).0 == DecisionKind::Approve).collect();
        if satisfying.is_empty() {
            failures.push(format!("{at}: approves none of {REQUESTS:?} for a node labelled {pool}"));
        }
        for sans in satisfying {
            let unlabelled = decide_with(&rule, sans, &serde_json::json!({}));
            if unlabelled != (DecisionKind::Deny, Reason::RuleFailed) {
                failures.push(format!("{at}: {unlabelled:?} without {key:?} for {sans:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
