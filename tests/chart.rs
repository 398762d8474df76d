//! The Helm chart, the kustomize manifests and the Dockerfile: lint, schema, rendering, drift
//! between chart and `deploy/`, acceptance by a real kube-apiserver, and the real binary deciding a
//! CSR with the chart's own RBAC and exactly the rendered container environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::{Value, json};
use support::Request;
use support::chart::{Container, apply, chart, container, env, find, kustomize, normalize, render, root, run_helm};
use support::cluster::{
    PREFIXES, REGEX, SERIAL, control_plane, create_serving_csr, free_port, http_get, unique, wait_decided,
};

const VALUES_FILES: [&str; 4] =
    ["standalone-values.yaml", "ha-values.yaml", "go-chart-values.yaml", "all-features-values.yaml"];

fn values_file(name: &str) -> String {
    chart().join("ci").join(name).to_str().unwrap().to_owned()
}

/// Renders with the required regex given literally and `args`.
fn render_with(args: &[&str]) -> Result<Vec<Value>, String> {
    let mut all = vec!["--set-literal", "providerRegex=^[a-z0-9-]+\\.nodes\\.example\\.com$"];
    all.extend_from_slice(args);
    render("approver", "csr-system", &all)
}

fn kinds(objects: &[Value]) -> Vec<&str> {
    objects.iter().map(|o| o["kind"].as_str().unwrap()).collect()
}

#[test]
fn helm_lint_strict_passes_with_defaults_and_every_values_file() {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    run_helm(&["lint", "--strict", chart, "--set-literal", "providerRegex=^n\\.example\\.com$"]).unwrap();
    for file in VALUES_FILES {
        let file = values_file(file);
        run_helm(&["lint", "--strict", chart, "-f", &file]).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn the_schema_rejects_wrong_types_and_a_missing_regex_with_a_readable_message() {
    let missing = render("approver", "ns", &[]).unwrap_err();
    assert!(missing.contains("missing property 'providerRegex'"), "{missing}");
    for (set, path) in [
        ("allowedDnsNames=many", "/allowedDnsNames"),
        ("bypassDnsResolution=maybe", "/bypassDnsResolution"),
        ("providerIpPrefixes=10.0.0.0/8", "/providerIpPrefixes"),
        ("replicas=two", "/replicas"),
        ("logFormat=xml", "/logFormat"),
        ("hostnameMatch=fuzzy", "/hostnameMatch"),
        ("dnsTimeout=soon", "/dnsTimeout"),
        ("metrics.port=http", "/metrics/port"),
        ("metrics.prometheusRule.enabled=maybe", "/metrics/prometheusRule/enabled"),
        ("metrics.prometheusRule.additionalRules[0].alert=X", "/metrics/prometheusRule/additionalRules/0"),
        ("dashboard.enabled=maybe", "/dashboard/enabled"),
        ("dashboard.labels.a=b", "dashboard"),
        ("providerIpPrefixed=10.0.0.0/8", "providerIpPrefixed"),
    ] {
        let error = render_with(&["--set", set]).unwrap_err();
        assert!(error.contains(path), "--set {set}: {error}");
    }
    let empty = render("approver", "ns", &["--set", "providerRegex="]).unwrap_err();
    assert!(empty.contains("/providerRegex"), "{empty}");
}

#[test]
fn several_replicas_without_leader_election_fail_with_a_clear_message() {
    let error = render_with(&["--set", "replicas=2"]).unwrap_err();
    assert!(error.contains("replicas is 2 but leaderElection is false"), "{error}");
    render_with(&["--set", "replicas=2", "--set", "leaderElection=true"]).unwrap();
}

#[test]
fn any_regex_renders_as_the_exact_string() {
    let dir = tempfile::tempdir().unwrap();
    for regex in [r#"^a"b'c\.d$"#, r"^x: {{ .Values }} # not a comment\\$", "^(?i)caf\u{e9}|<&>$", r"^\d+\.x$"] {
        let file = dir.path().join("values.yaml");
        std::fs::write(&file, serde_json::to_string(&json!({ "providerRegex": regex })).unwrap()).unwrap();
        let objects = render("approver", "ns", &["-f", file.to_str().unwrap()]).unwrap();
        assert_eq!(env(&objects)["PROVIDER_REGEX"], regex);
    }
}

#[test]
fn a_numeric_logging_level_is_the_go_level_and_a_string_an_env_filter_directive() {
    for level in ["-5", "0", "10"] {
        let objects = render_with(&["--set", &format!("loggingLevel={level}")]).unwrap();
        let env = env(&objects);
        assert_eq!((env.get("LEVEL").map(String::as_str), env.get("LOG_LEVEL")), (Some(level), None), "{level}");
    }
    let objects = render_with(&["--set-string", "loggingLevel=warn\\,node_csr_approver=trace"]).unwrap();
    let env = env(&objects);
    assert_eq!(env.get("LOG_LEVEL").map(String::as_str), Some("warn,node_csr_approver=trace"));
    assert_eq!(env.get("LEVEL"), None);
}

#[test]
fn defaults_are_one_hardened_replica_with_probes_and_least_privilege() {
    let objects = render_with(&[]).unwrap();
    assert_eq!(
        kinds(&objects),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service"
        ]
        .into_iter()
        .chain(["Deployment", "Pod"])
        .collect::<Vec<_>>()
    );
    let deployment = find(&objects, "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(pod["topologySpreadConstraints"].is_null());
    assert_eq!(pod["tolerations"][0]["key"], "node-role.kubernetes.io/control-plane");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = container(&objects);
    assert_eq!(c["securityContext"]["runAsUser"], 65532);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(c["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "health"}));
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "health"}));
    assert_eq!(c["ports"][0], json!({"name": "health", "containerPort": 8081, "protocol": "TCP"}));
    let downward: Vec<_> = c["env"].as_array().unwrap().iter().filter(|e| e["valueFrom"].is_object()).collect();
    assert_eq!(downward[0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(downward[1]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(env(&objects)["METRICS_BIND_ADDRESS"], ":8080");
    assert_eq!(env(&objects)["HEALTH_PROBE_BIND_ADDRESS"], ":8081");
    let roles: Vec<_> = objects.iter().filter(|o| o["kind"] == "Role").collect();
    assert_eq!(roles[0]["metadata"]["namespace"], "default", "events Role");
    assert_eq!(roles[1]["metadata"]["namespace"], "csr-system", "leases Role");
    assert_eq!(roles[1]["rules"][1]["resourceNames"], json!(["node-csr-approver"]));
    let test_pod = find(&objects, "Pod").unwrap();
    assert_eq!(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert!(test_pod["spec"]["containers"][0]["command"][2].as_str().unwrap().contains("/metrics"));
}

#[test]
fn optional_objects_appear_only_when_asked_for() {
    let ha = render("approver", "csr-system", &["-f", &values_file("ha-values.yaml")]).unwrap();
    let pod = &find(&ha, "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(find(&ha, "PodDisruptionBudget").unwrap()["spec"]["maxUnavailable"], 1);
    assert_eq!(env(&ha)["LEADER_ELECTION"], "true");

    let monitor = ["--set", "metrics.serviceMonitor.enabled=true"];
    assert!(find(&render_with(&monitor).unwrap(), "ServiceMonitor").is_none(), "no API, no ServiceMonitor");
    let with_api = [&monitor[..], &["--api-versions", "monitoring.coreos.com/v1"]].concat();
    assert!(find(&render_with(&with_api).unwrap(), "ServiceMonitor").is_some());
    let api = ["--api-versions", "monitoring.coreos.com/v1"];
    assert!(find(&render_with(&api).unwrap(), "PrometheusRule").is_none(), "alerts are opt-in");
    let rule = ["--set", "metrics.prometheusRule.enabled=true"];
    assert!(find(&render_with(&rule).unwrap(), "PrometheusRule").is_none(), "no API, no PrometheusRule");
    assert!(find(&render_with(&[&rule[..], &api[..]].concat()).unwrap(), "PrometheusRule").is_some());
    let quiet_rule = [&rule[..], &api[..], &["--set", "metrics.enable=false"]].concat();
    assert!(find(&render_with(&quiet_rule).unwrap(), "PrometheusRule").is_none(), "no /metrics, no alerts");

    assert!(find(&render_with(&[]).unwrap(), "ConfigMap").is_none(), "the dashboard is opt-in");
    let dashboard =
        render_with(&["--set", "dashboard.enabled=true", "--set", "dashboard.namespace=monitoring"]).unwrap();
    let config_map = find(&dashboard, "ConfigMap").unwrap();
    assert_eq!(config_map["metadata"]["namespace"], "monitoring");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let quiet_dashboard = render_with(&["--set", "dashboard.enabled=true", "--set", "metrics.enable=false"]).unwrap();
    assert!(find(&quiet_dashboard, "ConfigMap").is_none(), "no /metrics, no dashboard");

    let nodes = render_with(&["--set", "verifyNodeAddresses=true"]).unwrap();
    assert!(nodes.iter().any(|o| o["metadata"]["name"] == "approver-node-csr-approver-nodes"));
    assert!(!render_with(&[]).unwrap().iter().any(|o| o["metadata"]["name"] == "approver-node-csr-approver-nodes"));

    let unmanaged = render_with(&["--set", "rbac.manage=false", "--set", "serviceAccount.create=false"]).unwrap();
    assert_eq!(kinds(&unmanaged), ["Service", "Deployment", "Pod"]);

    let quiet = render_with(&["--set", "metrics.enable=false"]).unwrap();
    assert_eq!(env(&quiet)["METRICS_BIND_ADDRESS"], "0");
    assert!(find(&quiet, "Service").is_none() && find(&quiet, "Pod").is_none());

    let host = render_with(&["--set", "hostNetwork=true"]).unwrap();
    let pod = &find(&host, "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!((&pod["hostNetwork"], &pod["dnsPolicy"]), (&json!(true), &json!("ClusterFirstWithHostNet")));
}

#[test]
fn every_feature_reaches_its_environment_variable() {
    let objects = render(
        "approver",
        "csr-system",
        &["-f", &values_file("all-features-values.yaml"), "--api-versions", "monitoring.coreos.com/v1"],
    )
    .unwrap();
    let env = env(&objects);
    for (name, value) in [
        ("PROVIDER_IP_PREFIXES", "10.0.0.0/16,fd00::/64"),
        ("MAX_EXPIRATION_SEC", "604800"),
        ("ALLOWED_DNS_NAMES", "3"),
        ("BYPASS_DNS_RESOLUTION", "true"),
        ("BYPASS_HOSTNAME_CHECK", "true"),
        ("IGNORE_NON_SYSTEM_NODE", "true"),
        ("SKIP_DENY_STEP", "true"),
        ("HOSTNAME_MATCH", "prefix"),
        ("DNS_SERVERS", "10.96.0.10,[fd00::a]:53"),
        ("DNS_TIMEOUT", "3s"),
        ("DNS_GRACE_PERIOD", "10m"),
        ("VERIFY_NODE_ADDRESSES", "true"),
        ("DRY_RUN", "true"),
        ("CONCURRENCY", "8"),
        ("EVENTS", "all"),
        ("LEADER_ELECTION", "true"),
        ("LEADER_ELECTION_ID", "csr-approver-lease"),
        ("LEASE_DURATION", "20s"),
        ("RENEW_DEADLINE", "12s"),
        ("RETRY_PERIOD", "3s"),
        ("MACHINE_API", "machine.openshift.io/v1beta1,cluster.x-k8s.io/v1beta1"),
        ("MACHINE_NAMESPACE", "openshift-machine-api"),
        ("NODE_CLIENT_APPROVAL", "true"),
        ("BOOTSTRAPPER_USERNAME", "system:bootstrap:*"),
        ("BOOTSTRAPPER_GROUPS", "system:bootstrappers,system:authenticated"),
        ("MAX_PENDING_DELTA", "50"),
        ("HEALTH_PROBE_BIND_ADDRESS", ":9091"),
        ("METRICS_BIND_ADDRESS", ":9090"),
        ("LOG_FORMAT", "text"),
        ("LOG_LEVEL", "info,node_csr_approver=debug"),
        ("EXTRA", "1"),
    ] {
        assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
    }
    let names: Vec<_> = objects.iter().map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"approver-node-csr-approver-extra") && names.contains(&"approver-extra-string"));
    assert!(find(&objects, "ServiceMonitor").is_some());
    let rule = find(&objects, "PrometheusRule").unwrap();
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(rule["metadata"]["annotations"]["example.com/owner"], "platform");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert_eq!(rules.last().unwrap()["alert"], "NodeCsrApproverWriteErrors", "additionalRules come last");
    for rule in &rules[..rules.len() - 1] {
        assert_eq!(rule["labels"]["team"], "platform", "{rule}");
        assert!(
            rule["expr"]
                .as_str()
                .unwrap()
                .contains(r#"{namespace="csr-system",job="approver-node-csr-approver-metrics""#)
        );
    }
    let dashboard = find(&objects, "ConfigMap").unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1", "a number given, a string label");
    assert_eq!(dashboard["metadata"]["labels"]["team"], "platform");
    assert_eq!(dashboard["metadata"]["annotations"]["grafana_folder"], "Kubernetes");
    let json: Value = serde_json::from_str(dashboard["data"]["node-csr-approver.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "node-csr-approver");
    assert_eq!(find(&objects, "PodDisruptionBudget").unwrap()["metadata"]["namespace"], "csr-system");
    let machines = objects.iter().find(|o| o["metadata"]["name"] == "approver-node-csr-approver-machines").unwrap();
    assert_eq!(machines["rules"][0]["apiGroups"], json!(["machine.openshift.io", "cluster.x-k8s.io"]));
    assert!(!render_with(&[]).unwrap().iter().any(|o| o["metadata"]["name"] == "approver-node-csr-approver-machines"));
}

#[test]
fn a_go_chart_values_file_keeps_its_meaning() {
    let objects = render("kubelet-csr-approver", "kube-system", &["-f", &values_file("go-chart-values.yaml")]).unwrap();
    let env = env(&objects);
    assert_eq!(env["PROVIDER_REGEX"], r"^node-\w*\.int\.company\.ch$");
    assert_eq!(env["PROVIDER_IP_PREFIXES"], "192.168.8.0/22,fc00::/7");
    assert_eq!(env["MAX_EXPIRATION_SEC"], "86400");
    assert_eq!(env["ALLOWED_DNS_NAMES"], "2");
    assert_eq!(env["IGNORE_NON_SYSTEM_NODE"], "true");
    assert_eq!(env["SKIP_DENY_STEP"], "true");
    assert_eq!(env["LEVEL"], "4", "the Go tool's level, which the binary maps to debug");
    assert_eq!(env["HTTPS_PROXY"], "http://proxy.example.com:3128");
    assert!(!env.contains_key("BYPASS_DNS_RESOLUTION") && !env.contains_key("BYPASS_HOSTNAME_CHECK"));
    let deployment = find(&objects, "Deployment").unwrap();
    assert_eq!(deployment["metadata"]["name"], "kubelet-csr-approver");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["spec"]["dnsConfig"]["options"][0]["name"], "ndots");
    assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532, "chart defaults fill an empty podSecurityContext");
    let capabilities = &pod["spec"]["containers"][0]["securityContext"]["capabilities"];
    assert_eq!(capabilities["drop"], json!(["ALL"]), "the Go chart's drop: [all], as restricted asks");
    assert_eq!(find(&objects, "Service").unwrap()["metadata"]["annotations"]["prometheus.io/scrape"], "true");
}

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
        files.extend(support::chart::parse_documents(&std::fs::read_to_string(dir.join(optional)).unwrap()));
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

/// A permissive monitoring.coreos.com/v1 CRD of `kind` (ServiceMonitor, PrometheusRule), so the
/// apiserver knows the kind (its fields are not checked).
fn monitoring_crd(kind: &str) -> CustomResourceDefinition {
    let singular = kind.to_lowercase();
    let plural = format!("{singular}s");
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": singular, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

/// A namespace where the restricted Pod Security Standard is enforced.
async fn restricted_namespace(admin: &kube::Client) -> String {
    let name = unique("chart");
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}
    });
    apply(admin, &namespace, false).await.unwrap();
    name
}

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
    let (metrics_port, health_port) = (free_port(), free_port());
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
    create_serving_csr(cp, &legit, &node, &request).await;
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("evil.nodes.example.com")).await;
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
