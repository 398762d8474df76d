//! Several replicas, leader election, apiserver restarts and the controller's real RBAC.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use support::Request;
use support::cluster::{Approver, SERIAL, conditions, control_plane, create_serving_csr, unique, wait_decided};
use testenv::ControlPlane;

const DECIDE: Duration = Duration::from_secs(20);
const FAST_LEASE: [&str; 3] = ["--lease-duration=6s", "--renew-deadline=4s", "--retry-period=1s"];

fn legit(node: &str) -> Request {
    Request::node(node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.31")
}

/// Starts `count` replicas with leader election on Lease `lease` in `default`, named replica-<i>.
async fn replicas(cp: &ControlPlane, lease: &str, count: usize, timing: &[&str]) -> Vec<Approver> {
    let mut started = Vec::new();
    for i in 0..count {
        let mut args = vec!["--bypass-dns-resolution", "--leader-election", "--leader-election-namespace=default"];
        let id = format!("--leader-election-id={lease}");
        args.push(&id);
        args.extend_from_slice(timing);
        let name = format!("replica-{i}");
        started.push(Approver::start(cp.kubeconfig_path(), &args, &[("POD_NAME", &name)]));
    }
    for approver in &mut started {
        approver.wait_ready().await;
    }
    started
}

async fn holder(admin: &Client, lease: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), "default").get_opt(lease).await.unwrap()?;
    lease.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty())
}

/// Waits until some replica holds the Lease; returns the index of its replica-<i> name.
async fn wait_holder(admin: &Client, lease: &str, not: Option<usize>, limit: Duration) -> Option<usize> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let index =
            holder(admin, lease).await.and_then(|h| h.strip_prefix("replica-")?.split('_').next()?.parse().ok());
        if index.is_some() && index != not {
            return index;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn writes(approver: &Approver) -> usize {
    approver.logs().lines().filter(|l| l.contains(r#""message":"written""#)).count()
}

#[tokio::test]
async fn only_the_holder_writes_and_a_killed_holder_is_replaced_within_the_lease_duration() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let lease = unique("ha");
    let approvers = replicas(cp, &lease, 3, &FAST_LEASE).await;
    let leader = wait_holder(&admin, &lease, None, DECIDE).await.expect("a holder");

    let node = unique("n");
    let first: Vec<String> = (0..6).map(|_| unique("ha-a")).collect();
    for name in &first {
        create_serving_csr(cp, name, &node, &legit(&node)).await;
    }
    for name in &first {
        assert_eq!(wait_decided(&admin, name, DECIDE).await.len(), 1, "{name}");
    }
    for (i, approver) in approvers.iter().enumerate() {
        if i != leader {
            assert_eq!(writes(approver), 0, "standby replica-{i} wrote:\n{}", approver.logs());
        }
    }
    assert_eq!(writes(&approvers[leader]), first.len());

    approvers[leader].signal("KILL");
    let killed = Instant::now();
    let second: Vec<String> = (0..4).map(|_| unique("ha-b")).collect();
    for name in &second {
        create_serving_csr(cp, name, &node, &legit(&node)).await;
    }
    for name in &second {
        let decided = wait_decided(&admin, name, Duration::from_secs(6 + 10)).await;
        assert_eq!(decided.len(), 1, "{name} after the holder was killed: {decided:?}");
    }
    let takeover = killed.elapsed();
    assert!(takeover < Duration::from_secs(6 + 5), "took {takeover:?}");
    let new_leader = wait_holder(&admin, &lease, Some(leader), DECIDE).await.expect("a new holder");
    assert_ne!(new_leader, leader);
    for name in first.iter().chain(&second) {
        assert_eq!(conditions(&admin, name).await.len(), 1, "{name} has exactly one decision");
    }
}

#[tokio::test]
async fn sigterm_releases_the_lease_so_a_standby_takes_over_at_once() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let lease = unique("term");
    let mut approvers = replicas(cp, &lease, 2, &[]).await;
    let leader = wait_holder(&admin, &lease, None, DECIDE).await.expect("a holder");
    approvers[leader].signal("TERM");
    let status = approvers[leader].wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", approvers[leader].logs());
    let stopped = Instant::now();
    let next = wait_holder(&admin, &lease, Some(leader), Duration::from_secs(10)).await;
    assert!(next.is_some(), "no takeover");
    assert!(stopped.elapsed() < Duration::from_secs(5), "took {:?}; lease duration is 15s", stopped.elapsed());
    let node = unique("n");
    let name = unique("term-csr");
    create_serving_csr(cp, &name, &node, &legit(&node)).await;
    assert_eq!(wait_decided(&admin, &name, DECIDE).await.len(), 1);
}

#[tokio::test]
async fn csrs_around_an_apiserver_restart_are_all_decided() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let mut approver = Approver::start(cp.kubeconfig_path(), &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let node = unique("n");
    let mut names = Vec::new();
    let before = unique("before");
    create_serving_csr(&cp, &before, &node, &legit(&node)).await;
    names.push(before);
    cp.restart_apiserver().await.unwrap();
    for _ in 0..3 {
        let after = unique("after");
        create_serving_csr(&cp, &after, &node, &legit(&node)).await;
        names.push(after);
    }
    for name in &names {
        let decided = wait_decided(&admin, name, Duration::from_secs(40)).await;
        assert_eq!(decided.len(), 1, "{name}: {decided:?}\n{}", approver.logs());
    }
}

/// Applies the objects of a `deploy/rbac/*.yaml` file with server-side apply.
async fn apply_rbac(admin: &Client, file: &str, drop_signers_rule: bool) {
    let path = format!("{}/deploy/rbac/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let params = PatchParams::apply("node-csr-approver-tests").force();
    for doc in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap() {
        let name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        let namespace = doc["metadata"]["namespace"].as_str().map(str::to_owned);
        macro_rules! apply {
            ($kind:ty, $api:expr) => {{
                let object: $kind = serde_json::from_value(doc.clone()).unwrap();
                $api.patch(&name, &params, &Patch::Apply(&object)).await.unwrap();
            }};
        }
        match doc["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                apply!(ServiceAccount, Api::<ServiceAccount>::namespaced(admin.clone(), namespace.as_deref().unwrap()))
            }
            "ClusterRole" => {
                let mut role: ClusterRole = serde_json::from_value(doc.clone()).unwrap();
                if drop_signers_rule {
                    role.rules
                        .get_or_insert_default()
                        .retain(|r| !r.resources.iter().flatten().any(|res| res == "signers"));
                }
                Api::<ClusterRole>::all(admin.clone()).patch(&name, &params, &Patch::Apply(&role)).await.unwrap();
            }
            "ClusterRoleBinding" => apply!(ClusterRoleBinding, Api::<ClusterRoleBinding>::all(admin.clone())),
            "Role" => apply!(Role, Api::<Role>::namespaced(admin.clone(), namespace.as_deref().unwrap())),
            "RoleBinding" => {
                apply!(RoleBinding, Api::<RoleBinding>::namespaced(admin.clone(), namespace.as_deref().unwrap()))
            }
            other => panic!("unexpected kind {other} in {file}"),
        }
    }
}

#[tokio::test]
async fn the_deploy_rbac_is_enough_and_the_signers_rule_is_needed() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta { name: Some("node-csr-approver".into()), ..Default::default() },
        ..Default::default()
    };
    let params = PatchParams::apply("node-csr-approver-tests").force();
    Api::<Namespace>::all(admin.clone()).patch("node-csr-approver", &params, &Patch::Apply(&namespace)).await.unwrap();
    for file in
        ["serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "role-events.yaml", "role-leases.yaml"]
    {
        apply_rbac(&admin, file, false).await;
    }
    let token = cp.service_account_token("node-csr-approver", "node-csr-approver").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    cp.write_kubeconfig_for_token(&token, &kubeconfig).unwrap();
    let node = unique("n");
    {
        let args = ["--bypass-dns-resolution", "--leader-election", "--leader-election-namespace=node-csr-approver"];
        let mut approver = Approver::start(&kubeconfig, &args, &[]);
        approver.wait_ready().await;
        let name = unique("rbac-ok");
        create_serving_csr(cp, &name, &node, &legit(&node)).await;
        let decided = wait_decided(&admin, &name, DECIDE).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{}", approver.logs());
    }
    apply_rbac(&admin, "clusterrole.yaml", true).await;
    // RBAC changes reach the authorizer through an informer: give it a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut approver = Approver::start(&kubeconfig, &["--bypass-dns-resolution"], &[]);
    approver.wait_ready().await;
    let name = unique("rbac-denied");
    create_serving_csr(cp, &name, &node, &legit(&node)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let found = conditions(&admin, &name).await;
    apply_rbac(&admin, "clusterrole.yaml", false).await;
    assert!(found.is_empty(), "approved without the signers rule: {found:?}");
    let logs = approver.logs();
    assert!(logs.contains("403") || logs.contains("forbidden"), "{logs}");
    assert_eq!(writes(&approver), 0);
}
