//! `check` as the real binary in machine mode: it sees only the Machines the running controller
//! watches (`--machine-api`, `--machine-namespace`), and it warns about flags whose combination
//! trusts what a node reports about itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine;
use serde_json::{Value, json};
use testkit::policy::REGEX;

const BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const GROUPS: [&str; 3] =
    ["system:serviceaccounts:openshift-machine-config-operator", "system:serviceaccounts", "system:authenticated"];

/// The binary with a clean environment.
fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.stdin(Stdio::null());
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes `value` as JSON to `dir/name`.
fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path
}

/// A bootstrap client CSR for node `n1`, created a minute after the Machines.
fn bootstrap_csr(dir: &Path) -> PathBuf {
    let request = base64::engine::general_purpose::STANDARD.encode(support::Request::node("n1").pem());
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "boot-n1", "creationTimestamp": "2026-01-01T00:01:00Z"},
        "spec": {
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "username": BOOTSTRAPPER,
            "groups": GROUPS,
            "usages": ["digital signature", "client auth"],
            "request": request,
        },
    });
    write(dir, "csr.json", &csr)
}

/// Machine `m1` of `api_version` in `namespace`, with the InternalDNS address `n1`.
fn machine(api_version: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": namespace, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"addresses": [{"type": "InternalDNS", "address": "n1"}]},
    })
}

/// `check -o json` of the bootstrap CSR against `machines`, with `flags`: (decision, reason).
fn decide(machines: Value, flags: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let csr = bootstrap_csr(dir.path());
    let objects = write(dir.path(), "machines.json", &json!({"apiVersion": "v1", "kind": "List", "items": machines}));
    let mut command = binary();
    command.args(["check", "-o", "json", "--provider-regex", REGEX, "--now", "2026-01-01T00:02:00Z"]);
    command.arg("--file").arg(&csr).arg("--objects").arg(&objects).args(flags);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    (report["decision"].as_str().unwrap().to_owned(), report["reason"].as_str().unwrap().to_owned())
}

fn outcome(decision: &str, reason: &str) -> (String, String) {
    (decision.to_owned(), reason.to_owned())
}

#[test]
fn check_approves_only_against_machines_the_controller_watches() {
    const OPENSHIFT: &str = "machine.openshift.io/v1beta1";
    const CAPI: &str = "cluster.x-k8s.io/v1beta1";
    let openshift_ns = ["--machine-api", OPENSHIFT, "--machine-namespace", "openshift-machine-api"];
    let approved = outcome("approve", "AutoApproved");
    let not_found = outcome("retry", "MachineNotFound");
    // The control: a Machine of the configured API in the configured namespace.
    assert_eq!(decide(json!([machine(OPENSHIFT, "openshift-machine-api")]), &openshift_ns), approved);
    assert_eq!(decide(json!([machine(OPENSHIFT, "elsewhere")]), &openshift_ns), not_found, "another namespace");
    assert_eq!(decide(json!([machine(CAPI, "openshift-machine-api")]), &openshift_ns), not_found, "the other API");
    let other_version = machine("machine.openshift.io/v1", "openshift-machine-api");
    assert_eq!(decide(json!([other_version]), &openshift_ns), not_found, "another version");
    // Without --machine-namespace every namespace is watched; a second API may be added.
    assert_eq!(decide(json!([machine(CAPI, "anywhere")]), &["--machine-api", CAPI]), approved);
    assert_eq!(decide(json!([machine(CAPI, "anywhere")]), &["--machine-api", OPENSHIFT]), not_found);
    let both = format!("{OPENSHIFT},{CAPI}");
    assert_eq!(decide(json!([machine(CAPI, "anywhere")]), &["--machine-api", &both]), approved);
}

#[test]
fn verifying_node_addresses_without_dns_warns_that_nodes_report_their_own_addresses() {
    let warning = "warning: --verify-node-addresses with --bypass-dns-resolution";
    let dir = tempfile::tempdir().unwrap();
    let csr = bootstrap_csr(dir.path());
    let run = |flags: &[&str]| {
        let output = binary().args(["check", "--provider-regex", REGEX, "--file"]).arg(&csr).args(flags).output();
        let output = output.unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        stderr(&output)
    };
    let both = run(&["--verify-node-addresses", "--bypass-dns-resolution"]);
    assert_eq!(both.lines().filter(|l| l.starts_with(warning)).count(), 1, "{both}");
    assert!(both.contains("a node that adds another node's IP to its status gets a certificate for it"), "{both}");
    for flags in [&["--verify-node-addresses"][..], &["--bypass-dns-resolution"]] {
        let err = run(flags);
        assert!(!err.contains(warning), "{flags:?}: {err}");
    }
}
