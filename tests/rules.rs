//! The rules of `--rules` with the real binary: every rule compiles at start or the program stops
//! with exit code 2 naming it, and `check` evaluates them with the Nodes of `--objects`, one check
//! row per rule. (`tests/rules_live.rs` has the controller deciding with them.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;

use support::process::{binary, repo, run, stderr};
use testkit::policy::REGEX;

const GPU_DOMAIN: &str = "rules:\n  - name: gpu-pool-domain\n    expression: >-\n      node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu' ?\n      request.dnsNames.all(n, n.endsWith('.gpu.example.com')) : true\n    message: GPU nodes must use names under gpu.example.com\n";

/// A Node `n1` with these labels (YAML flow mapping), as `--objects` reads it.
fn node_n1(labels: &str) -> String {
    format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {labels}\n")
}

fn check(rules: &Path) -> Command {
    let mut command = binary();
    command.args(["check", "-o", "json", "--provider-regex", REGEX, "--bypass-dns-resolution", "--file"]);
    command.arg(repo("examples/csrs.yaml")).arg("--rules").arg(rules);
    command
}

/// Runs `command`, which must stop at start with exit code 2 and one error line naming
/// `--rules`, `RULES_FILE` and each of `needles`.
fn assert_stops(command: &mut Command, needles: &[&str]) {
    let output = run(command);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line: {err}"));
    for needle in ["--rules", "RULES_FILE"].iter().chain(needles) {
        assert!(line.contains(needle), "{line:?} does not name {needle:?}");
    }
    assert!(output.stdout.is_empty(), "nothing is evaluated");
}

#[test]
fn a_rule_that_does_not_compile_stops_the_program_with_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let broken = file(
        "broken.yaml",
        &format!("{GPU_DOMAIN}  - name: broken\n    expression: request.nodeName ==\n    message: m\n"),
    );
    let shown = broken.display().to_string();
    assert_stops(&mut check(&broken), &[&shown, "rule \"broken\" does not compile"]);
    // The controller too, before it connects; and from the env var.
    let mut run_command = binary();
    run_command.args(["--provider-regex", REGEX, "--kubeconfig", "/nonexistent"]).env("RULES_FILE", &broken);
    assert_stops(&mut run_command, &[&shown, "rule \"broken\" does not compile"]);

    let twice = file("twice.yaml", &format!("{GPU_DOMAIN}{}", &GPU_DOMAIN["rules:\n".len()..]));
    assert_stops(&mut check(&twice), &["rule name \"gpu-pool-domain\" is used twice"]);
    let deep = "[1].all(a, [2].all(b, [3].all(c, true)))";
    let nested = file("nested.yaml", &format!("rules:\n  - name: deep\n    expression: {deep:?}\n    message: m\n"));
    assert_stops(&mut check(&nested), &["rule \"deep\": comprehensions", "nested 3 deep"]);
    let unknown =
        file("unknown.yaml", "rules:\n  - name: a\n    expression: 'true'\n    message: m\n    when: always\n");
    assert_stops(&mut check(&unknown), &["when"]);
    assert_stops(&mut check(&dir.path().join("missing.yaml")), &["missing.yaml", "cannot read"]);
}

#[test]
fn check_evaluates_the_rules_with_the_nodes_of_objects_one_row_per_rule() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    let request_only = "  - name: n-names\n    expression: request.nodeName.startsWith('n')\n    message: m\n";
    std::fs::write(&rules, format!("{GPU_DOMAIN}{request_only}")).unwrap();
    let decide = |pool: &str| {
        let objects = dir.path().join("nodes.yaml");
        std::fs::write(&objects, node_n1(&format!("{{node-restriction.kubernetes.io/pool: {pool}}}"))).unwrap();
        let output = run(check(&rules).arg("--objects").arg(&objects));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let reports: Vec<serde_json::Value> =
            String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        reports.into_iter().find(|r| r["name"] == "legit-n1").unwrap()
    };
    let rows = |report: &serde_json::Value| -> Vec<(String, String)> {
        let checks = report["checks"].as_array().unwrap().iter().filter(|c| c["check"] == "rule");
        checks.map(|c| (c["result"].as_str().unwrap().into(), c["detail"].as_str().unwrap().into())).collect()
    };
    let cpu = decide("cpu");
    assert_eq!((&cpu["decision"], &cpu["reason"]), (&"approve".into(), &"AutoApproved".into()), "{cpu}");
    let holds = |name: &str| ("pass".to_owned(), format!("{name}: holds"));
    assert_eq!(rows(&cpu), [holds("gpu-pool-domain"), holds("n-names")]);
    let gpu = decide("gpu");
    let message = "rule \"gpu-pool-domain\" failed: GPU nodes must use names under gpu.example.com";
    assert_eq!(
        (&gpu["decision"], &gpu["reason"], &gpu["message"]),
        (&"deny".into(), &"RuleFailed".into(), &message.into())
    );
    assert_eq!(rows(&gpu), [("fail".to_owned(), message.to_owned()), holds("n-names")]);
    // A CSR a built-in check denies runs no rule.
    let output = run(check(&rules).arg("--objects").arg(dir.path().join("nodes.yaml")));
    let text = String::from_utf8_lossy(&output.stdout);
    let forged = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["name"] == "forged-hostname")
        .unwrap();
    assert_eq!(forged["reason"], "HostnameMismatch");
    assert!(rows(&forged).is_empty(), "{forged}");
}

#[test]
fn the_readme_rules_decide_by_a_label_the_node_cannot_set_and_fail_closed_without_it() {
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let section = readme.split("## Node pools: rules of your own").nth(1).unwrap();
    let yaml = section.split("```yaml\n").nth(1).unwrap().split("```").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, yaml).unwrap();
    let decide = |labels: &str| {
        let objects = dir.path().join("nodes.yaml");
        std::fs::write(&objects, node_n1(labels)).unwrap();
        let output = run(check(&rules).arg("--objects").arg(&objects));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(!stderr(&output).contains("warning: rule"), "the README's rules read nothing the node writes");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let report: serde_json::Value = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .find(|r: &serde_json::Value| r["name"] == "legit-n1")
            .unwrap();
        (report["reason"].as_str().unwrap().to_owned(), report["message"].as_str().unwrap().to_owned())
    };
    let pool = |pool: &str| decide(&format!("{{node-restriction.kubernetes.io/pool: {pool}}}"));
    // legit-n1 asks for n1.nodes.example.com and 10.0.0.11.
    assert_eq!(pool("cpu").0, "AutoApproved");
    assert_eq!(pool("legacy").0, "AutoApproved");
    assert_eq!(pool("gpu").1, "rule \"gpu-pool-domain\" failed: GPU nodes must use names under gpu.example.com");
    assert_eq!(pool("edge").1, "rule \"edge-pool-prefixes\" failed: edge nodes must use addresses in 10.20.0.0/16");
    // A node of the GPU pool that removed or rewrote every label it may write is still in it; a
    // node without the label is denied, never approved.
    let gpu_escaping = decide("{node-restriction.kubernetes.io/pool: gpu, pool: cpu}");
    assert_eq!(gpu_escaping.0, "RuleFailed");
    for unlabelled in ["{}", "{pool: cpu}", "{pool: gpu}"] {
        let (reason, message) = decide(unlabelled);
        assert_eq!(reason, "RuleFailed", "{unlabelled}");
        assert!(
            message.starts_with("rule \"gpu-pool-domain\" could not be evaluated: No such key: node-restriction"),
            "{message}"
        );
    }
}

#[test]
fn a_rule_that_reads_a_field_the_node_writes_is_warned_about_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    let escapable = "rules:\n  - name: by-pool\n    expression: \"!('pool' in node.metadata.labels) || node.metadata.labels['pool'] != 'gpu'\"\n    message: m\n  - name: by-status\n    expression: \"node.status.addresses.size() > 0 && has(node.metadata.annotations.zone)\"\n    message: m\n  - name: fixed\n    expression: \"node.metadata.name == request.nodeName && node.metadata.labels['node-role.kubernetes.io/gpu'] == ''\"\n    message: m\n";
    std::fs::write(&rules, escapable).unwrap();
    let warnings = [
        "rule \"by-pool\" reads node.metadata.labels.pool, which the node writes itself",
        "rule \"by-status\" reads node.status.addresses, which the node writes itself",
        "rule \"by-status\" reads node.metadata.annotations.zone, which the node writes itself",
    ];
    let output = run(&mut check(&rules));
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    for warning in warnings {
        assert!(err.contains(&format!("warning: {warning}")), "{warning:?} not in {err}");
    }
    assert!(!err.contains("\"fixed\""), "{err}");
    // The controller logs them when it starts, before it connects.
    let mut controller = binary();
    controller.args(["--provider-regex", REGEX, "--kubeconfig", "/nonexistent", "--rules"]).arg(&rules);
    let err = stderr(&run(&mut controller));
    let logged: Vec<serde_json::Value> = err.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    for warning in warnings {
        let line = logged.iter().find(|line| line["message"].as_str().is_some_and(|m| m.starts_with(warning)));
        assert_eq!(line.map(|line| &line["level"]), Some(&"WARN".into()), "{warning:?} not in {err}");
    }
}

#[test]
fn check_gives_the_matched_machine_of_objects_to_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let pem = support::Request::node("n7").pem();
    let request: String = support::pem_block("X", pem.as_bytes()).lines().filter(|l| !l.starts_with("-----")).collect();
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: boot-n7\n  creationTimestamp: \"2026-01-01T00:01:00Z\"\nspec:\n  signerName: kubernetes.io/kube-apiserver-client-kubelet\n  username: system:serviceaccount:openshift-machine-config-operator:node-bootstrapper\n  groups: [system:serviceaccounts:openshift-machine-config-operator, system:serviceaccounts, system:authenticated]\n  usages: [digital signature, client auth]\n  request: {request}\n"
    );
    let decide = |zone: &str| {
        let machine = format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata:\n  name: m-n7\n  namespace: default\n  labels: {{zone: {zone}}}\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\nstatus:\n  addresses:\n    - {{type: InternalDNS, address: n7}}\n"
        );
        let (csr_path, machine_path, rules) =
            (dir.path().join("csr.yaml"), dir.path().join("machines.yaml"), dir.path().join("rules.yaml"));
        std::fs::write(&csr_path, &csr).unwrap();
        std::fs::write(&machine_path, machine).unwrap();
        let rule = "rules:\n  - name: zone-a\n    expression: machine.metadata.labels['zone'] == 'a' && node == null\n    message: zone a only\n";
        std::fs::write(&rules, rule).unwrap();
        let mut command = binary();
        command.args(["check", "-o", "json", "--provider-regex", REGEX, "--now", "2026-01-01T00:02:00Z"]);
        command.arg("--file").arg(&csr_path).arg("--objects").arg(&machine_path).arg("--rules").arg(&rules);
        let output = run(command.arg("--machine-api=cluster.x-k8s.io/v1beta1"));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let report: serde_json::Value =
            serde_json::from_slice(output.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
        (report["decision"].as_str().unwrap().to_owned(), report["reason"].as_str().unwrap().to_owned())
    };
    assert_eq!(decide("a"), ("approve".to_owned(), "AutoApproved".to_owned()));
    assert_eq!(decide("b"), ("hold".to_owned(), "RuleFailed".to_owned()));
}
