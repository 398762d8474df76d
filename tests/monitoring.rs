//! The chart's alerts and dashboard: the PrometheusRule checked by the real `promtool` and held by
//! the unit tests in `tests/fixtures/alerts/`, the dashboard's queries parsed by promtool, and
//! every metric that the alerts and the dashboard query read from the live `/metrics` of the real
//! binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use node_csr_approver::audit::Finding;
use serde_json::Value;
use support::Request;
use support::chart::{find, render, root};
use support::cluster::{Approver, Csrs, SERIAL, control_plane, create_serving_csr, unique, wait_decided};
use testdns::{DnsServer, Records};

/// The unit tests of the rules; they name the rule file `rules.json`, written beside a copy.
const UNIT_TESTS: &str = "tests/fixtures/alerts/alerts-test.yaml";
const DECIDE: Duration = Duration::from_secs(20);

/// The `promtool` binary that `scripts/build-tools.sh` builds.
fn promtool() -> &'static Path {
    static PROMTOOL: OnceLock<PathBuf> = OnceLock::new();
    PROMTOOL.get_or_init(|| testenv::tools_dir().unwrap().join("promtool"))
}

/// Runs promtool with `args` in `dir`; `Ok(stdout)` on success, `Err(stdout and stderr)` otherwise.
fn run_promtool(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(promtool()).args(args).current_dir(dir).stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))
    }
}

/// The chart rendered for release `approver` in namespace csr-system with the alerts and the
/// dashboard on, as the unit tests expect it.
fn rendered() -> Vec<Value> {
    render(
        "approver",
        "csr-system",
        &[
            "--set-literal",
            "providerRegex=^[a-z0-9-]+\\.nodes\\.example\\.com$",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "dashboard.enabled=true",
            "--api-versions",
            "monitoring.coreos.com/v1",
        ],
    )
    .unwrap()
}

/// The rendered PrometheusRule's `spec`: a rule file's content.
fn rule_spec(objects: &[Value]) -> &Value {
    &find(objects, "PrometheusRule").expect("a PrometheusRule")["spec"]
}

/// (alert name, expression) of every rule.
fn alerts(spec: &Value) -> Vec<(String, String)> {
    let groups = spec["groups"].as_array().unwrap();
    let rules = groups.iter().flat_map(|group| group["rules"].as_array().unwrap());
    rules.map(|rule| (rule["alert"].as_str().unwrap().to_owned(), rule["expr"].as_str().unwrap().to_owned())).collect()
}

/// The name of every finding the audit can report, in its order.
fn findings() -> Vec<&'static str> {
    Finding::value_variants().iter().map(|finding| finding.as_str()).collect()
}

/// The dashboard JSON carried by the rendered ConfigMap.
fn dashboard(objects: &[Value]) -> Value {
    let config_map = find(objects, "ConfigMap").expect("the dashboard ConfigMap");
    serde_json::from_str(config_map["data"]["node-csr-approver.json"].as_str().unwrap()).unwrap()
}

/// Every PromQL query of the dashboard: each `expr` anywhere in it, and the metric selector of
/// each `label_values(selector, label)` variable query.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn exprs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", Value::String(expr)) => out.push(expr.clone()),
                        _ => exprs(value, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| exprs(item, out)),
            _ => {}
        }
    }
    let mut queries = Vec::new();
    exprs(&dashboard["panels"], &mut queries);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().unwrap();
        let inner = query.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')).unwrap();
        let (selector, _label) = inner.rsplit_once(',').unwrap();
        queries.push(selector.trim().to_owned());
    }
    queries
}

/// A dashboard query with Grafana's variables replaced by values, so promtool can parse it.
fn without_variables(query: &str) -> String {
    query.replace("$__rate_interval", "5m").replace("$namespace", "csr-system").replace("$job", "approver")
}

/// The metric names a PromQL expression selects: identifiers outside strings, label matchers,
/// ranges and grouping label lists that are neither keywords nor called as functions or
/// aggregations. Grafana variables (`$name`, `${name}`) are passed over.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 8] = ["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"];
    const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
    const AGGREGATIONS: [&str; 14] = [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let next_non_space = |from: usize| chars[from..].iter().position(|c| !c.is_whitespace()).map(|p| from + p);
    // The index just past the string literal, label matchers, range or parenthesised list at `i`.
    let skip = |mut i: usize| -> usize {
        let close = match chars[i] {
            '{' => '}',
            '[' => ']',
            '(' => ')',
            quote => {
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    i += if chars[i] == '\\' && quote != '`' { 2 } else { 1 };
                }
                return i + 1;
            }
        };
        i += 1;
        while i < chars.len() && chars[i] != close {
            if matches!(chars[i], '"' | '\'' | '`') {
                let quote = chars[i];
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    i += if chars[i] == '\\' && quote != '`' { 2 } else { 1 };
                }
            }
            i += 1;
        }
        i + 1
    };
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`' | '{' | '[') {
            i = skip(i);
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = skip(i);
            } else {
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let next = next_non_space(i);
            let called = next.is_some_and(|n| chars[n] == '(');
            if GROUPING.contains(&lower.as_str()) {
                if let Some(n) = next.filter(|_| called) {
                    i = skip(n);
                }
                continue;
            }
            // `sum by (x) (…)`: an aggregation with its grouping first.
            let grouped = AGGREGATIONS.contains(&lower.as_str())
                && next.is_some_and(|n| {
                    let rest: String = chars[n..].iter().take_while(|c| is_ident(**c)).collect();
                    rest == "by" || rest == "without"
                });
            if !(called || grouped || KEYWORDS.contains(&lower.as_str())) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The sample names of an OpenMetrics text: the series Prometheus stores, so a histogram is its
/// `_bucket`, `_sum` and `_count` and a counter its `_total`, exactly as queries name them.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| line.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

#[test]
fn metric_names_are_found_and_labels_functions_and_keywords_are_not() {
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(r#"sum by (decision, reason) (rate(a_total{namespace="$namespace", job=~"x|}"}[$__rate_interval]))"#),
        ["a_total"]
    );
    assert_eq!(names("histogram_quantile(0.99, sum by (le) (rate(h_bucket{le!=\"+Inf\"}[5m])))"), ["h_bucket"]);
    assert_eq!(names("a * on (instance) group_left (pod) b offset 5m > bool 1e3 and c unless ${d}"), ["a", "b", "c"]);
    assert_eq!(names("max without(instance) (x) < 1\nor\nabsent(y{z=\"w\"})"), ["x", "y"]);
    assert_eq!(names("sum(rate(x[5m])) / sum(rate(y[5m])) > 0.1"), ["x", "y"]);
    assert_eq!(names("a and on(i) group_right b == 1"), ["a", "b"]);
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let objects = rendered();
    let spec = rule_spec(&objects);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.json"), serde_json::to_string_pretty(spec).unwrap()).unwrap();
    std::fs::copy(root().join(UNIT_TESTS), dir.path().join("alerts-test.yaml")).unwrap();

    let alerts = alerts(spec);
    let names: BTreeSet<&str> = alerts.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "NodeCsrApproverCsrUndecided",
            "NodeCsrApproverCsrsWaitingRetry",
            "NodeCsrApproverDenialBurst",
            "NodeCsrApproverDnsFailures",
            "NodeCsrApproverNoLeader",
            "NodeCsrApproverPendingBrakeEngaged",
            "NodeCsrApproverKubeletsUnreachable",
            "NodeCsrApproverKubeletsNotDialled",
            "NodeCsrApproverServingCertificatesMalformed",
            "NodeCsrApproverServingCertificatesSelfSigned",
            "NodeCsrApproverServingCertificatesUntrusted",
            "NodeCsrApproverServingCertificatesNonCompliant",
            "NodeCsrApproverServingCertificatesUndetermined",
            "NodeCsrApproverServingCertificatesExpired",
            "NodeCsrApproverServingCertificatesExpiring",
            "NodeCsrApproverAuditStale",
        ])
    );
    // Every finding the audit can report has one alert, on the count of the Nodes that have it
    // (a Node counts under every finding it has, so no finding hides another).
    for finding in findings() {
        let selector = format!("node_csr_approver_audit_findings{{namespace=\"csr-system\",finding=\"{finding}\"}}");
        let alerting: Vec<&str> =
            alerts.iter().filter(|(_, expr)| expr.contains(&selector)).map(|(name, _)| name.as_str()).collect();
        assert_eq!(alerting.len(), 1, "the audit's finding {finding} has no alert of its own: {alerting:?}");
    }
    let checked = run_promtool(dir.path(), &["check", "rules", "--lint=all", "--lint-fatal", "rules.json"]).unwrap();
    assert!(checked.contains(&format!("SUCCESS: {} rules found", alerts.len())), "{checked}");
    run_promtool(dir.path(), &["test", "rules", "alerts-test.yaml"]).unwrap_or_else(|e| panic!("{e}"));

    // Each alert both fires and stays silent in some case, and no case names an alert that is not
    // there (its empty expectation would pass for nothing).
    let unit_tests: Value = serde_saphyr::from_str(&std::fs::read_to_string(root().join(UNIT_TESTS)).unwrap()).unwrap();
    let cases: Vec<&Value> = unit_tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_array().unwrap())
        .collect();
    for case in &cases {
        let name = case["alertname"].as_str().unwrap();
        assert!(names.contains(name), "{UNIT_TESTS} tests {name}, which the chart does not define");
    }
    for name in &names {
        let expectations: Vec<bool> = cases
            .iter()
            .filter(|case| case["alertname"] == *name)
            .map(|case| case["exp_alerts"].as_array().is_some_and(|alerts| !alerts.is_empty()))
            .collect();
        assert!(expectations.contains(&true), "{UNIT_TESTS}: {name} never fires");
        assert!(expectations.contains(&false), "{UNIT_TESTS}: {name} never stays silent");
    }
}

#[test]
fn the_unit_tests_fail_on_a_wrong_threshold_or_duration_and_promtool_on_a_broken_expression() {
    let objects = rendered();
    let text = serde_json::to_string_pretty(rule_spec(&objects)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(root().join(UNIT_TESTS), dir.path().join("alerts-test.yaml")).unwrap();
    let rules = dir.path().join("rules.json");
    let changes = [(") > 5", ") > 6"), ("> 0.1", "> 0.12"), (r#""for": "30m""#, r#""for": "29m""#)];
    let audit = [
        ("+ 600".to_owned(), "+ 900".to_owned()),
        ("2 * node_csr_approver_audit_period_seconds".into(), "3 * node_csr_approver_audit_period_seconds".into()),
    ];
    // Each finding's alert: its threshold, its selector moved to the next finding, and, for the
    // findings a Node can have behind another (its state), the count of Nodes in that state.
    let findings = findings();
    let mut per_finding = Vec::new();
    for (i, finding) in findings.iter().enumerate() {
        let selector = format!(r#"finding=\"{finding}\"}}"#);
        per_finding.push((format!("{selector}) > 0"), format!("{selector}) > 1")));
        let next = &findings[(i + 1) % findings.len()];
        per_finding.push((selector, format!(r#"finding=\"{next}\"}}"#)));
    }
    for masked in ["self-signed", "non-compliant", "undetermined", "expired", "expiring"] {
        let selector =
            |metric: &str, label: &str| format!(r#"{metric}{{namespace=\"csr-system\",{label}=\"{masked}\"}}"#);
        per_finding.push((
            selector("node_csr_approver_audit_findings", "finding"),
            selector("node_csr_approver_audit_nodes", "state"),
        ));
    }
    let thresholds = [(") > 900", ") > 899"), (") > 900", ") > 960")];
    let fixed = changes.into_iter().chain(thresholds).map(|(from, to)| (from.to_owned(), to.to_owned()));
    for (from, to) in fixed.chain(audit).chain(per_finding) {
        let (from, to) = (from.as_str(), to.as_str());
        assert_eq!(text.matches(from).count(), 1, "{from}");
        std::fs::write(&rules, text.replace(from, to)).unwrap();
        let result = run_promtool(dir.path(), &["test", "rules", "alerts-test.yaml"]);
        assert!(result.is_err(), "the unit tests pass with {to} in place of {from}");
    }
    std::fs::write(
        &rules,
        text.replace("max by (namespace, job) (node_csr_approver_leader", "max by (namespace, job ("),
    )
    .unwrap();
    let error = run_promtool(dir.path(), &["check", "rules", "rules.json"]).unwrap_err();
    assert!(error.contains("parse error"), "{error}");
}

#[test]
fn every_dashboard_query_parses_and_every_panel_reads_the_chosen_data_source() {
    let dashboard = dashboard(&rendered());
    assert_eq!(dashboard["uid"], "node-csr-approver");
    let dir = tempfile::tempdir().unwrap();
    for query in dashboard_queries(&dashboard) {
        let query = without_variables(&query);
        run_promtool(dir.path(), &["--experimental", "promql", "format", &query])
            .unwrap_or_else(|e| panic!("{query}: {e}"));
    }
    let mut ids = BTreeSet::new();
    let titles: Vec<&str> =
        dashboard["panels"].as_array().unwrap().iter().map(|p| p["title"].as_str().unwrap()).collect();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "panel ids are unique: {panel}");
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains(r#"namespace="$namespace", job="$job""#), "{expr}: the chosen approver only");
        }
    }
    for wanted in [
        "Decisions by reason",
        "Oldest undecided CSR",
        "Evaluation latency",
        "DNS lookup latency",
        "Writes by result",
        "CSRs waiting on a retry",
        "Leadership",
        "Reconcile passes by trigger",
        "Process memory and CPU",
        "Serving certificates by audit state",
        "Soonest serving certificate expiry",
        "Periodic audit scans",
    ] {
        assert!(titles.contains(&wanted), "{wanted} in {titles:?}");
    }
}

#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_query_is_exported_by_the_binary() {
    let objects = rendered();
    let mut queries: Vec<String> = alerts(rule_spec(&objects)).into_iter().map(|(_, expr)| expr).collect();
    queries.extend(dashboard_queries(&dashboard(&objects)));
    let mut queried = BTreeSet::new();
    for query in &queries {
        let names = metric_names(query);
        assert!(!names.is_empty(), "no metric found in {query}");
        queried.extend(names);
    }

    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let dns = DnsServer::start_on_thread(Records::new().a(&format!("{node}.nodes.example.com"), "10.0.0.41")).unwrap();
    let mut approver = Approver::start(cp.kubeconfig_path(), &[&format!("--dns-server={}", dns.addr())], &[]);
    approver.wait_ready().await;

    // decisions_total has a series per decision and reason, and prometheus-client writes nothing
    // for a family without series, not even its HELP and TYPE: only a decision makes it appear.
    // One approval (with a DNS lookup) and one denial.
    let csrs = Csrs::new(cp.kubeconfig_path());
    let (good, forged) = (csrs.name("good"), csrs.name("forged"));
    let legit = Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.41");
    create_serving_csr(cp, &good, &node, &legit).await;
    create_serving_csr(cp, &forged, &node, &Request::node(&node).dns("auth.evil.io")).await;
    for name in [&good, &forged] {
        assert!(!wait_decided(&admin, name, DECIDE).await.is_empty(), "{name}:\n{}", approver.logs());
    }
    // The counter is incremented after the write returns.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = approver.metrics().await;
        if sample_names(&text).contains("node_csr_approver_decisions_total") || Instant::now() >= deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let exported = sample_names(&text);
    let missing: Vec<&String> = queried.iter().filter(|name| !exported.contains(*name)).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}\n/metrics:\n{text}");
    documented_as_exported(&text, &exported);
}

/// docs/metrics.md's table names every family of the approver's `/metrics` (`text`, whose sample
/// names are `exported`), and every metric it names is exported, but for the per-Node series of
/// the periodic audit, which have none without `--audit-node-metrics` and a scan.
fn documented_as_exported(text: &str, exported: &BTreeSet<String>) {
    let docs = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    let rows: Vec<&str> = docs.lines().filter(|line| line.starts_with("| `node_csr_approver_")).collect();
    let families = text.lines().filter_map(|line| line.strip_prefix("# HELP node_csr_approver_"));
    for family in families.map(|rest| format!("`node_csr_approver_{}", rest.split(' ').next().unwrap())) {
        assert!(rows.iter().any(|row| row.contains(&family)), "docs/metrics.md does not document {family}`");
    }
    for row in rows.iter().filter(|row| !row.contains("--audit-node-metrics")) {
        let name = row.split('`').nth(1).unwrap();
        assert!(exported.iter().any(|sample| sample.starts_with(name)), "docs/metrics.md: {name} is not exported");
    }
}
