//! Objects kube-apiserver accepts and then serves with a time of a five-digit year: CSRs whose
//! requester wrote such a time into managedFields, a Node whose node wrote it into its status and
//! managedFields (NodeRestriction on), and, through the fault proxy, CSRs served with a creation
//! time of the year 10000 (a field the approver reads). None may pause the watch, fail a list,
//! keep the approver unready or keep another node's CSR from being decided; `check` and `audit`
//! work beside them.

use std::time::{Duration, Instant};

use kube::Client;
use testenv::FaultProxy;

use crate::harness::{Created, Expect, RECOVERY, Scenario, logs, replicas};
use crate::support::cluster::{SERIAL, metric, unique};
use crate::support::process::binary;
use crate::verdict::{decided, decisions, writes};

/// A time kube-apiserver accepts and serves back as `10000-01-01T04:00:00Z`.
const ACCEPTED: &str = "9999-12-31T23:00:00-05:00";
/// How it serves it.
const SERVED: &str = "10000-01-01T04:00:00Z";
/// How many poisoned CSRs: on a watch that backs off for each, this many would delay every other
/// decision by about a minute.
const POISONED: usize = 30;
/// How soon a replica started beside them must be ready.
const READY_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test]
async fn five_digit_years_in_csrs_and_a_node_stall_no_decision_and_no_command() {
    let _serial = SERIAL.lock().await;
    let cp = testenv::ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let base = unique("p");

    // Before the approver starts: its first list meets them all.
    let mut poisoned = Vec::new();
    for i in 0..POISONED {
        let node = format!("{base}-{i:02}");
        let name = format!("{base}-csr-{i:02}");
        let request = testkit::request::legit(&node, 101 + u8::try_from(i).unwrap());
        post_as_node(&cp, &node, "/apis/certificates.k8s.io/v1/certificatesigningrequests", csr_body(&name, &request))
            .await;
        poisoned.push(Created { name, expect: Expect::Approved });
    }
    let sick_node = format!("{base}-node");
    post_as_node(&cp, &sick_node, "/api/v1/nodes", node_body(&sick_node)).await;
    let served = get_text(&admin, &format!("/api/v1/nodes/{sick_node}")).await;
    assert!(served.contains(SERVED), "the apiserver did not serve the Node's times as the year 10000: {served}");
    let served =
        get_text(&admin, &format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{base}-csr-00")).await;
    assert!(
        served.contains(SERVED),
        "the apiserver did not serve the CSR's managedFields time as the year 10000: {served}"
    );

    let lease = unique("poisoned");
    let started = Instant::now();
    let (replicas, _) = replicas(&cp, &lease, 1, &[]).await;
    let ready = started.elapsed();
    println!("ready {ready:.1?} after start beside {POISONED} poisoned CSRs and a poisoned Node");
    assert!(ready < READY_WITHIN, "ready only after {ready:?}:\n{}", logs(&replicas));

    let nodes = crate::harness::Nodes::new(&cp).await;
    let mut created = Vec::new();
    for i in 0..4 {
        let expect = if i == 3 { Expect::Denied } else { Expect::Approved };
        created.push(nodes.create_as(&format!("{base}-fresh-{i}"), expect).await);
    }
    let done = Instant::now();
    let report = decided(&admin, "beside five-digit years", &created, done, "their creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));
    let poisoned_report = decided(&admin, "the poisoned CSRs", &poisoned, started, "the start", RECOVERY).await;
    poisoned_report.assert_within(RECOVERY + READY_WITHIN, || logs(&replicas));

    let approver = &replicas[0].approver;
    let text = approver.metrics().await;
    let skipped = metric(&text, r#"node_csr_approver_undecodable_objects_total{kind="CertificateSigningRequest"}"#);
    assert_eq!(skipped, Some(0.0), "nothing the approver reads was poisoned: nothing is skipped");

    // `check` lists every CSR (the superseded rule) and reads the one named: both work.
    let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig_path().display());
    for name in [&created[0].name, &poisoned[0].name] {
        let output = binary()
            .args(["check", name.as_str(), &kubeconfig, "--bypass-dns-resolution", "-o", "json"])
            .args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", testkit::policy::PREFIXES])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "check {name}: {:?}\n{stderr}", output.status);
        assert!(String::from_utf8_lossy(&output.stdout).contains("\"decision\""), "check {name}: {stderr}");
    }
    // `audit` lists every Node: the poisoned one is listed, and audited (its address is loopback,
    // outside the prefixes given: never dialled).
    let output = binary()
        .args(["audit", &kubeconfig, "-o", "json", "--provider-regex", testkit::policy::REGEX])
        .args(["--provider-ip-prefixes", "127.0.0.0/8"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "audit: {:?}\n{stderr}", output.status);
    assert!(stdout.contains(&sick_node), "the poisoned Node is not in the audit: {stdout}\n{stderr}");
}

#[tokio::test]
async fn a_csr_served_with_a_creation_year_of_10000_is_skipped_once_counted_and_stalls_nothing() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start(1).await;
    let proxy: &FaultProxy = &replicas[0].proxy;
    let approver = &replicas[0].approver;
    let base = unique("y");

    // Live events: each such CSR arrives undecodable on the watch the approver already runs.
    proxy.serve_five_digit_years(true);
    proxy.cut_watches();
    let mut marked = Vec::new();
    for i in 0..POISONED {
        let name = format!("{base}-{}-{i:02}", testenv::FIVE_DIGIT_YEAR_MARKER);
        marked.push(nodes.create_as(&name, Expect::Approved).await);
    }
    let mut created = Vec::new();
    for i in 0..4 {
        created.push(nodes.create_as(&format!("{base}-live-{i}"), Expect::Approved).await);
    }
    let done = Instant::now();
    let report = decided(&admin, "beside undecodable live events", &created, done, "their creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));

    // A relist: the streaming list meets them all again, and completes without them.
    proxy.expire_watches(true);
    proxy.cut_watches();
    let relisted = Instant::now();
    while proxy.expired_watches() == 0 {
        assert!(relisted.elapsed() < RECOVERY, "no watch was expired:\n{}", logs(&replicas));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.expire_watches(false);
    let mut after_relist = Vec::new();
    for i in 0..4 {
        after_relist.push(nodes.create_as(&format!("{base}-relisted-{i}"), Expect::Approved).await);
    }
    let done = Instant::now();
    let report = decided(&admin, "after a relist of them", &after_relist, done, "their creation", RECOVERY).await;
    report.assert_within(RECOVERY, || logs(&replicas));

    let skipped =
        approver.metric(r#"node_csr_approver_undecodable_objects_total{kind="CertificateSigningRequest"}"#).await;
    assert!(skipped.is_some_and(|n| n >= 2.0 * POISONED as f64), "each skipped live and in the relist: {skipped:?}");
    let warnings = approver
        .log_lines()
        .iter()
        .filter(|line| line["level"] == "WARN" && line.to_string().contains("could not be decoded"))
        .count();
    assert_eq!(warnings, POISONED, "each version logged once:\n{}", logs(&replicas));
    let found = decisions(&admin).await;
    let touched: Vec<&String> =
        marked.iter().map(|csr| &csr.name).filter(|name| found.get(*name).is_none_or(|d| !d.is_empty())).collect();
    assert!(touched.is_empty(), "CSRs the approver cannot read, decided (or gone): {touched:?}");
    writes(&replicas, &lease).assert(2 * created.len());
}

/// Creates the object `body` at `path` as `system:node:<node>`.
async fn post_as_node(cp: &testenv::ControlPlane, node: &str, path: &str, body: serde_json::Value) {
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client.request_text(request).await.unwrap_or_else(|error| panic!("creating {path} as {node}: {error}"));
}

/// The object at `path`, as the apiserver serves it.
async fn get_text(admin: &Client, path: &str) -> String {
    admin.request_text(http::Request::get(path).body(Vec::new()).unwrap()).await.unwrap()
}

/// A managedFields entry whose time the apiserver serves with a five-digit year, of a manager
/// owning `fields` (the apiserver keeps what a client gives of managers other than itself, and
/// takes the entry of the fields the creation itself sets over).
fn managed_fields(api_version: &str, fields: serde_json::Value) -> serde_json::Value {
    serde_json::json!([{
        "manager": "kubelet", "operation": "Update", "apiVersion": api_version, "time": ACCEPTED,
        "fieldsType": "FieldsV1", "fieldsV1": fields,
    }])
}

/// A kubelet-serving CSR named `name` with `request`, its managedFields poisoned.
fn csr_body(name: &str, request: &testkit::request::Request) -> serde_json::Value {
    let usages = &crate::support::SERVING_USAGES;
    let csr = testkit::csr::object(name, testkit::csr::SERVING_SIGNER, usages, &request.pem());
    let mut body = serde_json::to_value(csr).unwrap();
    body["metadata"]["labels"] = serde_json::json!({"poisoned": "yes"});
    let spec = serde_json::json!({"f:spec": {"f:request": {}, "f:signerName": {}, "f:usages": {}}});
    body["metadata"]["managedFields"] = managed_fields("certificates.k8s.io/v1", spec);
    body
}

/// Node `name` as its kubelet may register it: a loopback address, the kubelet's port, and a
/// heartbeat, a condition and a managedFields entry of a five-digit year.
fn node_body(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"poisoned": "yes"}, "managedFields": managed_fields("v1", serde_json::json!({"f:status": {"f:addresses": {}}}))},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.9"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "conditions": [{"type": "Ready", "status": "False", "reason": "Poisoned", "message": "m",
                "lastHeartbeatTime": ACCEPTED, "lastTransitionTime": ACCEPTED}],
        },
    })
}
