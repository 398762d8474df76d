//! The Helm chart against a real kube-apiserver: every rendered object is accepted and its pods
//! pass the restricted profile, the rendered manifests pass kubeconform (strict) against schemas
//! made from that apiserver's own OpenAPI, and the real binary decides a CSR with the chart's own
//! RBAC and exactly the rendered container environment. scripts/test.sh runs this file against
//! every supported Kubernetes release.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;
use support::Request;
use support::chart::{Container, VALUES_FILES, apply, find, monitoring_crd, render, restricted_namespace, values_file};
use support::chart::{chart, run_helm};
use support::cluster::{PREFIXES, REGEX, SERIAL, control_plane, create_serving_csr, http_get, unique, wait_decided};
use support::schemas::{SCHEMA_LOCATION, write_strict};

#[tokio::test]
async fn every_rendered_object_is_accepted_by_the_apiserver_and_pods_pass_restricted() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    cp.install_crds(vec![monitoring_crd("ServiceMonitor"), monitoring_crd("PrometheusRule")]).await.unwrap();
    let mut cases: Vec<Vec<String>> = vec![vec![]];
    cases.extend(VALUES_FILES.iter().map(|f| vec!["-f".into(), values_file(f)]));
    for case in cases {
        let namespace = restricted_namespace(&admin).await;
        let mut args: Vec<&str> = case.iter().map(String::as_str).collect();
        if args.is_empty() {
            args.extend(["--set-literal", "providerRegex=^n\\.example\\.com$"]);
        }
        let set_namespace = format!("namespace={namespace}");
        args.extend(["--api-versions", "monitoring.coreos.com/v1", "--set", &set_namespace]);
        let objects = render(&unique("rel"), &namespace, &args).unwrap();
        for object in &objects {
            let mut object = object.clone();
            // extraObjects name their own namespace.
            if object["metadata"]["namespace"] == "csr-system" {
                object["metadata"]["namespace"] = json!(namespace);
            }
            apply(&admin, &object, true).await.unwrap_or_else(|e| panic!("{case:?}: {e}"));
        }
        let template = &find(&objects, "Deployment").unwrap()["spec"]["template"];
        if template["spec"]["hostNetwork"] == true {
            continue; // host namespaces are outside every Pod Security Standard but privileged
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "template", "namespace": namespace, "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        });
        apply(&admin, &pod, true).await.unwrap_or_else(|e| panic!("{case:?}: pod template: {e}"));
    }
}

/// kubeconform's verdict on `manifests` (multi-document YAML) against the schemas under `schemas`:
/// Ok with its summary, or Err with its report. The prometheus-operator kinds are skipped: the
/// apiserver serves only the stand-in CRDs' schemas for them, which take any field.
fn kubeconform(schemas: &std::path::Path, manifests: &str) -> Result<String, String> {
    use std::io::Write as _;
    let tool = testenv::tools_dir().unwrap().join("kubeconform");
    let location = format!("{}/{SCHEMA_LOCATION}", schemas.display());
    let mut child = std::process::Command::new(&tool)
        .args(["-strict", "-summary", "-output", "text", "-skip", "ServiceMonitor,PrometheusRule"])
        .args(["-schema-location", &location, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    child.stdin.take().unwrap().write_all(manifests.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(report) } else { Err(report) }
}

#[tokio::test]
async fn rendered_manifests_pass_kubeconform_strict_against_the_apiservers_own_openapi() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let openapi = admin.request_text(http::Request::get("/openapi/v2").body(Vec::new()).unwrap()).await.unwrap();
    let schemas = tempfile::tempdir().unwrap();
    let kinds = write_strict(&serde_json::from_str(&openapi).unwrap(), schemas.path());
    for kind in [
        "apps/v1/deployment",
        "v1/v1/serviceaccount",
        "rbac.authorization.k8s.io/v1/clusterrole",
        "policy/v1/poddisruptionbudget",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no schema for {kind} among {} kinds", kinds.len());
    }
    let chart = chart();
    let mut cases: Vec<Vec<String>> = vec![vec!["--set-literal".into(), "providerRegex=^n\\.example\\.com$".into()]];
    cases.extend(VALUES_FILES.iter().map(|f| vec!["-f".into(), values_file(f)]));
    let mut deployment = String::new();
    for case in &cases {
        let mut args = vec!["template", "rel", chart.to_str().unwrap(), "--api-versions", "monitoring.coreos.com/v1"];
        args.extend(case.iter().map(String::as_str));
        let manifests = run_helm(&args).unwrap();
        let summary = kubeconform(schemas.path(), &manifests).unwrap_or_else(|report| panic!("{case:?}:\n{report}"));
        assert!(summary.contains("Invalid: 0, Errors: 0"), "{case:?}: {summary}");
        assert!(!summary.contains("Valid: 0,"), "{case:?}: nothing validated: {summary}");
        if deployment.is_empty() {
            deployment = manifests;
        }
    }
    // Seeded defects kubeconform must catch: a field the apiserver does not know, and a wrong type.
    let unknown =
        deployment.replacen("imagePullPolicy:", "imagePullPolicyy: IfNotPresent\n          imagePullPolicy:", 1);
    let report = kubeconform(schemas.path(), &unknown).expect_err("an unknown field passed kubeconform -strict");
    assert!(report.contains("imagePullPolicyy"), "{report}");
    let wrong_type = deployment.replacen("replicas: 2", "replicas: two", 1);
    assert_ne!(wrong_type, deployment, "the default Deployment renders `replicas: 2`");
    kubeconform(schemas.path(), &wrong_type).expect_err("replicas: two passed kubeconform");
}

#[tokio::test]
async fn the_chart_rbac_and_container_env_approve_a_real_csr_and_deny_a_forgery() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = testdns::DnsServer::start_on_thread(
        testdns::Records::new().a(&format!("{node}.nodes.example.com"), "10.0.0.31"),
    )
    .unwrap();
    let namespace = unique("chart-e2e");
    let release = unique("e2e");
    let (metrics_port, health_port) = (testenv::free_port().unwrap(), testenv::free_port().unwrap());
    let values = json!({
        "providerRegex": REGEX,
        "providerIpPrefixes": [PREFIXES],
        "dnsServers": [dns.addr().to_string()],
        "leaderElection": true,
        "metrics": {"port": metrics_port},
        "healthProbe": {"port": health_port},
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values.to_string()).unwrap();
    let objects = render(&release, &namespace, &["-f", file.to_str().unwrap()]).unwrap();

    apply(&admin, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}), false)
        .await
        .unwrap();
    for object in
        objects.iter().filter(|o| o["kind"].as_str().unwrap().contains("Role") || o["kind"] == "ServiceAccount")
    {
        apply(&admin, object, false).await.unwrap();
    }
    // RBAC changes reach the authorizer through an informer: give it a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let account = find(&objects, "ServiceAccount").unwrap()["metadata"]["name"].as_str().unwrap().to_owned();
    let token = cp.service_account_token(&namespace, &account).await.unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    cp.write_kubeconfig_for_token(&token, &kubeconfig).unwrap();

    let mut approver = Container::start(&objects, "approver-pod-0", &namespace, &kubeconfig);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(health_port, "/readyz").await.is_none_or(|(code, _)| code != 200) {
        assert!(!approver.exited() && Instant::now() < deadline, "not ready:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let legit = unique("chart-legit");
    let forged = unique("chart-forged");
    let request = Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.31");
    // The forgery first: of a node's serving CSRs pending together only the newest is approved.
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("evil.nodes.example.com")).await;
    create_serving_csr(cp, &legit, &node, &request).await;
    for (name, want) in [(&legit, "Approved"), (&forged, "Denied")] {
        let decided = wait_decided(&admin, name, Duration::from_secs(30)).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some(want), "{name}:\n{}", approver.logs());
    }
    let lease = Api::<Lease>::namespaced(admin.clone(), &namespace).get("node-csr-approver").await.unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(holder.starts_with("approver-pod-0_"), "{holder}");
    let metrics = http_get(metrics_port, "/metrics").await.map(|(_, body)| body).unwrap_or_default();
    assert!(metrics.contains("node_csr_approver_leader 1"), "{metrics}");
}
