//! `deploy/` and the Dockerfile: each kustomize overlay and `deploy/rbac` equal the chart rendered
//! with the matching values file (`tests/chart.rs` checks the chart itself), and the Dockerfile
//! passes hadolint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::chart::{find, kustomize, normalize, parse_documents, render, root, values_file};

/// Fails with the chart's rendering of every object that differs.
fn assert_same(what: &str, expected: &[Value], actual: &[Value]) {
    let (expected, actual) = (normalize(expected), normalize(actual));
    let mut problems = Vec::new();
    for (key, want) in &expected {
        match actual.get(key) {
            Some(got) if got == want => {}
            Some(got) => problems.push(format!(
                "{key:?} differs.\n--- chart:\n{}\n--- {what}:\n{}",
                serde_json::to_string_pretty(want).unwrap(),
                serde_json::to_string_pretty(got).unwrap()
            )),
            None => problems.push(format!("{key:?} is rendered by the chart but missing from {what}")),
        }
    }
    for key in actual.keys().filter(|k| !expected.contains_key(*k) && k.0 != "Namespace") {
        problems.push(format!("{key:?} is in {what} but not rendered by the chart"));
    }
    assert!(problems.is_empty(), "{what} drifted from charts/node-csr-approver:\n{}", problems.join("\n\n"));
}

#[test]
fn kustomize_overlays_equal_the_chart_with_their_values() {
    for (overlay, values) in [("standalone", "standalone-values.yaml"), ("ha", "ha-values.yaml")] {
        let expected = render("node-csr-approver", "node-csr-approver", &["-f", &values_file(values)]).unwrap();
        let built = kustomize(&root().join("deploy/overlays").join(overlay));
        assert_same(&format!("deploy/overlays/{overlay}"), &expected, &built);
        let namespace = find(&built, "Namespace").unwrap();
        assert_eq!(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted");
    }
}

#[test]
fn deploy_rbac_equals_the_chart_rbac() {
    let expected = render(
        "node-csr-approver",
        "node-csr-approver",
        &[
            "--set",
            "providerRegex=x",
            "--set",
            "verifyNodeAddresses=true",
            "--set",
            "machineMode.apis={machine.openshift.io/v1beta1,cluster.x-k8s.io/v1beta1}",
        ],
    )
    .unwrap();
    let expected: Vec<Value> = expected
        .into_iter()
        .filter(|o| o["kind"].as_str().unwrap().contains("Role") || o["kind"] == "ServiceAccount")
        .collect();
    let dir = root().join("deploy/rbac");
    let mut files = kustomize(&dir);
    for optional in ["clusterrole-nodes.yaml", "clusterrole-machine.yaml"] {
        files.extend(parse_documents(&std::fs::read_to_string(dir.join(optional)).unwrap()));
    }
    assert_same("deploy/rbac", &expected, &files);
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let output = std::process::Command::new(root().join("scripts/check-dockerfile.sh")).output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
