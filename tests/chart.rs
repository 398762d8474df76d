//! The Helm chart: lint, schema and rendering (`tests/chart_live.rs` has what a real kube-apiserver
//! makes of it, `tests/deploy.rs` holds `deploy/` and the Dockerfile to it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::chart::{VALUES_FILES, chart, container, env, find, kinds, render, render_with, run_helm, values_file};

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
fn helm_lint_strict_fails_on_seeded_defects() {
    let literal = ["--set-literal", "providerRegex=^n\\.example\\.com$"];
    let defects = [
        ("Chart.yaml", "version: ", "version: 0.1\nx-version: ", "version"),
        (
            "templates/deployment.yaml",
            "imagePullPolicy: {{ .Values.image.pullPolicy }}",
            "imagePullPolicy: {{ .Values.image.nope.deeper }}",
            "nil pointer",
        ),
        ("values.yaml", "\nimage:\n", "\nimage:\n  unknownKey: 1\n", "unknownKey"),
    ];
    for (file, from, to, finding) in defects {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("node-csr-approver");
        let copied = std::process::Command::new("cp").arg("-r").arg(chart()).arg(&copy).status().unwrap();
        assert!(copied.success());
        let path = copy.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} no longer contains {from:?}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        let mut args = vec!["lint", "--strict", copy.to_str().unwrap()];
        args.extend(literal);
        let out = std::process::Command::new(support::chart::helm()).args(&args).output().unwrap();
        let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "helm lint --strict passed {file}: {to:?}");
        assert!(report.contains(finding), "{file}: want {finding}: {report}");
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
        ("resyncPeriod=1 minute", "/resyncPeriod"),
        ("cacheRequestsBelow=-1", "/cacheRequestsBelow"),
        ("cacheRequestBytes=-1", "/cacheRequestBytes"),
        ("kubeApiQps=-1", "/kubeApiQps"),
        ("kubeApiQps=fast", "/kubeApiQps"),
        ("kubeApiBurst=0", "/kubeApiBurst"),
        ("audit.period=daily", "/audit/period"),
        ("audit.nodeMetrics=maybe", "/audit/nodeMetrics"),
        ("audit.dialTimeout=soon", "/audit/dialTimeout"),
        ("audit.dialConcurrency=257", "/audit/dialConcurrency"),
        ("audit.dialConcurrency=many", "/audit/dialConcurrency"),
        ("audit.perNode=true", "audit"),
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
    let error = render_with(&["--set", "leaderElection=false"]).unwrap_err();
    assert!(error.contains("replicas is 2 but leaderElection is false"), "{error}");
    let error = render_with(&["--set", "replicas=3", "--set", "leaderElection=false"]).unwrap_err();
    assert!(error.contains("replicas is 3 but leaderElection is false"), "{error}");
    render_with(&["--set", "replicas=1", "--set", "leaderElection=false"]).unwrap();
    render_with(&["--set", "replicas=3"]).unwrap();
}

#[test]
fn an_image_digest_pins_the_image_and_a_malformed_one_is_rejected() {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let repository = "--set=image.repository=registry.example.com/node-csr-approver";
    let tagged = render_with(&[repository]).unwrap();
    assert_eq!(container(&tagged)["image"], "registry.example.com/node-csr-approver:0.1.0");
    let pinned =
        render_with(&[repository, "--set=image.tag=ignored", &format!("--set=image.digest={digest}")]).unwrap();
    assert_eq!(container(&pinned)["image"], format!("registry.example.com/node-csr-approver@{digest}"));
    assert_eq!(container(&pinned)["imagePullPolicy"], "IfNotPresent");
    for malformed in ["sha256:abc", "0123456789abcdef", "sha512:00"] {
        let error = render_with(&[&format!("--set=image.digest={malformed}")]).unwrap_err();
        assert!(error.contains("/image/digest"), "{malformed}: {error}");
    }
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
fn defaults_are_two_hardened_replicas_with_leader_election_probes_and_least_privilege() {
    let objects = render_with(&[]).unwrap();
    let rbac = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
    ];
    assert_eq!(kinds(&objects), [&["PodDisruptionBudget"][..], &rbac, &["Service", "Deployment", "Pod"]].concat());
    // As the Go chart: two replicas, one writing through the Lease, spread over nodes, at most one
    // evicted at a time.
    let deployment = find(&objects, "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(env(&objects)["LEADER_ELECTION"], "true");
    let pdb = find(&objects, "PodDisruptionBudget").unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"]);
    let pod = &deployment["spec"]["template"]["spec"];
    let spread = &pod["topologySpreadConstraints"];
    assert_eq!((spread.as_array().unwrap().len(), &spread[0]["topologyKey"]), (1, &json!("kubernetes.io/hostname")));
    assert_eq!(spread[0]["whenUnsatisfiable"], "ScheduleAnyway", "a single schedulable node still runs both");
    assert_eq!(spread[0]["labelSelector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"]);
    assert!(!env(&objects).contains_key("RESYNC_PERIOD"), "the binary's default");
    assert!(!env(&objects).contains_key("CACHE_REQUESTS_BELOW"), "the binary's default");
    assert!(!env(&objects).contains_key("CACHE_REQUEST_BYTES"), "the binary's default");
    for audit in
        ["AUDIT_PERIOD", "AUDIT_EXPIRING_WITHIN", "AUDIT_DIAL_TIMEOUT", "AUDIT_DIAL_CONCURRENCY", "AUDIT_NODE_METRICS"]
    {
        assert!(!env(&objects).contains_key(audit), "the periodic audit is off by default: {audit}");
    }
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
    assert_eq!(roles[0]["metadata"]["namespace"], "default", "apiserver Role");
    assert_eq!(
        roles[0]["rules"],
        json!([
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        ])
    );
    assert_eq!(roles[1]["metadata"]["namespace"], "default", "events Role");
    assert_eq!(roles[2]["metadata"]["namespace"], "csr-system", "leases Role");
    assert_eq!(roles[2]["rules"][1]["resourceNames"], json!(["node-csr-approver"]));
    let test_pod = find(&objects, "Pod").unwrap();
    assert_eq!(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert!(test_pod["spec"]["containers"][0]["command"][2].as_str().unwrap().contains("/metrics"));
}

#[test]
fn optional_objects_appear_only_when_asked_for() {
    let single = render("approver", "csr-system", &["-f", &values_file("standalone-values.yaml")]).unwrap();
    let deployment = find(&single, "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(deployment["spec"]["template"]["spec"]["topologySpreadConstraints"].is_null());
    assert!(find(&single, "PodDisruptionBudget").is_none(), "one replica: no PDB");
    assert!(!env(&single).contains_key("LEADER_ELECTION"));
    assert!(
        find(&render_with(&["--set", "podDisruptionBudget.enabled=false"]).unwrap(), "PodDisruptionBudget").is_none()
    );

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
    assert_eq!(kinds(&unmanaged), ["PodDisruptionBudget", "Service", "Deployment", "Pod"]);

    let quiet = render_with(&["--set", "metrics.enable=false"]).unwrap();
    assert_eq!(env(&quiet)["METRICS_BIND_ADDRESS"], "0");
    assert!(find(&quiet, "Service").is_none() && find(&quiet, "Pod").is_none());

    let host = render_with(&["--set", "hostNetwork=true"]).unwrap();
    let pod = &find(&host, "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!((&pod["hostNetwork"], &pod["dnsPolicy"]), (&json!(true), &json!("ClusterFirstWithHostNet")));
    // It runs on a node whose pod network is not up (NotReady), beside the default toleration.
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists"});
    let tolerations = pod["tolerations"].as_array().unwrap();
    assert!(tolerations.contains(&not_ready) && tolerations.len() == 2, "{tolerations:?}");
    let objects = render_with(&[]).unwrap();
    let default = &find(&objects, "Deployment").unwrap()["spec"]["template"]["spec"]["tolerations"];
    assert!(!default.as_array().unwrap().contains(&not_ready), "{default:?}");
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
        ("KUBE_API_QPS", "2.5"),
        ("KUBE_API_BURST", "40"),
        ("CONCURRENCY", "8"),
        ("EVENTS", "all"),
        ("RESYNC_PERIOD", "30s"),
        ("CACHE_REQUESTS_BELOW", "5000"),
        ("CACHE_REQUEST_BYTES", "2097152"),
        ("AUDIT_PERIOD", "6h"),
        ("AUDIT_EXPIRING_WITHIN", "14d"),
        ("AUDIT_DIAL_TIMEOUT", "1s"),
        ("AUDIT_DIAL_CONCURRENCY", "64"),
        ("AUDIT_NODE_METRICS", "true"),
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
        ("KUBELET_SERVING_CA_FILE", "/etc/node-csr-approver/kubelet-serving-ca/ca-bundle.crt"),
        ("KUBELET_PORT", "10251"),
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
    let pod = &find(&objects, "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], json!([{"name": "kubelet-serving-ca", "configMap": {"name": "kubelet-serving-ca"}}]));
    let mounts = &pod["containers"][0]["volumeMounts"];
    assert_eq!(mounts[0]["mountPath"], "/etc/node-csr-approver/kubelet-serving-ca");
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

#[test]
fn rules_are_mounted_from_a_config_map_and_reading_node_grants_get_on_nodes() {
    let pool = r#"{"name":"gpu-pool","expression":"node.metadata.labels['pool'] != 'gpu' || request.dnsNames.all(n, n.endsWith('.gpu.example.com'))","message":"GPU names"}"#;
    let request_only = r#"{"name":"ipv4","expression":"request.ipAddresses.all(a, !a.contains(':')) && request.nodeName != ''","message":"IPv4 only"}"#;
    let objects = render_with(&["--set-json", &format!("rules=[{pool},{request_only}]")]).unwrap();
    let config_map = objects.iter().find(|o| o["metadata"]["name"] == "approver-node-csr-approver-rules").unwrap();
    assert_eq!(config_map["kind"], "ConfigMap");
    let file = support::chart::parse_documents(config_map["data"]["rules.yaml"].as_str().unwrap());
    let expected: Value = serde_json::from_str(&format!("{{\"rules\":[{pool},{request_only}]}}")).unwrap();
    assert_eq!(file, [expected]);
    let mount = &container(&objects)["volumeMounts"][0];
    assert_eq!(env(&objects)["RULES_FILE"], format!("{}/rules.yaml", mount["mountPath"].as_str().unwrap()));
    let pod = &find(&objects, "Deployment").unwrap()["spec"]["template"];
    assert_eq!(pod["spec"]["volumes"][0]["configMap"]["name"], "approver-node-csr-approver-rules");
    assert_eq!(mount["name"], pod["spec"]["volumes"][0]["name"]);
    assert!(pod["metadata"]["annotations"]["checksum/rules"].is_string(), "a change of rules restarts the pods");
    let nodes_role =
        |objects: &[Value]| objects.iter().any(|o| o["metadata"]["name"] == "approver-node-csr-approver-nodes");
    assert!(nodes_role(&objects));

    let without_node = render_with(&["--set-json", &format!("rules=[{request_only}]")]).unwrap();
    assert!(!nodes_role(&without_node), "request.nodeName is not node");
    assert!(env(&without_node).contains_key("RULES_FILE"));
    let none = render_with(&[]).unwrap();
    assert!(!env(&none).contains_key("RULES_FILE") && container(&none).get("volumeMounts").is_none());

    let bad_name = render_with(&["--set-json", r#"rules=[{"name":"GPU","expression":"true","message":"m"}]"#]);
    assert!(bad_name.unwrap_err().contains("rules"), "the schema names the value");
}

#[test]
fn the_periodic_audit_reads_the_kubelet_serving_ca_without_machine_mode() {
    let ca = [
        "--set",
        "machineMode.kubeletServingCA.configMap=kubelet-ca",
        "--set",
        "machineMode.kubeletServingCA.kubeletPort=10251",
    ];
    let off = render_with(&ca).unwrap();
    for name in ["KUBELET_SERVING_CA_FILE", "KUBELET_PORT", "AUDIT_PERIOD"] {
        assert!(!env(&off).contains_key(name), "neither machine mode nor the audit: {name}");
    }
    assert_eq!(find(&off, "Deployment").unwrap()["spec"]["template"]["spec"]["volumes"], Value::Null);
    let on =
        render_with(&[&ca[..], &["--set", "audit.period=6h", "--set", "audit.nodeMetrics=true"]].concat()).unwrap();
    let env = env(&on);
    assert_eq!(env["AUDIT_PERIOD"], "6h");
    assert_eq!(env["AUDIT_NODE_METRICS"], "true");
    for name in ["AUDIT_EXPIRING_WITHIN", "AUDIT_DIAL_TIMEOUT", "AUDIT_DIAL_CONCURRENCY"] {
        assert!(!env.contains_key(name), "the binary's default: {name}");
    }
    assert_eq!(env["KUBELET_SERVING_CA_FILE"], "/etc/node-csr-approver/kubelet-serving-ca/ca-bundle.crt");
    assert_eq!(env["KUBELET_PORT"], "10251");
    let pod = &find(&on, "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], json!([{"name": "kubelet-serving-ca", "configMap": {"name": "kubelet-ca"}}]));
    assert_eq!(container(&on)["volumeMounts"][0]["mountPath"], "/etc/node-csr-approver/kubelet-serving-ca");
}
