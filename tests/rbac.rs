//! The controller's own RBAC (`deploy/rbac`, which `tests/chart.rs` keeps equal to the chart's):
//! the real binary runs under the chart's ServiceAccount with a real token, and each rule is shown
//! to be enough and, where it can be, needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::cluster::{
    Approver, Csrs, SERIAL, access, conditions, control_plane, create_serving_csr, unique, wait_access, wait_decided,
    wait_event,
};
use support::nodes::legit;
use testenv::ControlPlane;

const DECIDE: Duration = Duration::from_secs(20);
/// The namespace and ServiceAccount `deploy/rbac` grants to.
const NAMESPACE: &str = "node-csr-approver";
/// The only Lease the leases Role names.
const LEASE: &str = "node-csr-approver";
const ALWAYS: [&str; 6] = [
    "serviceaccount.yaml",
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "role-events.yaml",
    "role-apiserver.yaml",
    "role-leases.yaml",
];

/// The documents of a `deploy/rbac/*.yaml` file.
fn documents(file: &str) -> Vec<serde_json::Value> {
    let path = format!("{}/deploy/rbac/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_multiple::<serde_json::Value>(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Applies the objects of a `deploy/rbac/*.yaml` file with server-side apply, `edit` changing
/// each first.
async fn apply_rbac(admin: &Client, file: &str, edit: impl Fn(&mut serde_json::Value)) {
    let params = PatchParams::apply("node-csr-approver-tests").force();
    for mut doc in documents(file) {
        edit(&mut doc);
        let name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        let namespace = doc["metadata"]["namespace"].as_str().map(str::to_owned);
        let namespace = namespace.as_deref().unwrap_or_default();
        macro_rules! apply {
            ($kind:ty, $api:expr) => {{
                let object: $kind = serde_json::from_value(doc.clone()).unwrap();
                $api.patch(&name, &params, &Patch::Apply(&object)).await.unwrap();
            }};
        }
        match doc["kind"].as_str().unwrap() {
            "ServiceAccount" => apply!(ServiceAccount, Api::<ServiceAccount>::namespaced(admin.clone(), namespace)),
            "ClusterRole" => apply!(ClusterRole, Api::<ClusterRole>::all(admin.clone())),
            "ClusterRoleBinding" => apply!(ClusterRoleBinding, Api::<ClusterRoleBinding>::all(admin.clone())),
            "Role" => apply!(Role, Api::<Role>::namespaced(admin.clone(), namespace)),
            "RoleBinding" => apply!(RoleBinding, Api::<RoleBinding>::namespaced(admin.clone(), namespace)),
            other => panic!("unexpected kind {other} in {file}"),
        }
    }
}

/// Deletes the bindings of a `deploy/rbac/*.yaml` file (the grant, not the role).
async fn delete_bindings(admin: &Client, file: &str) {
    for doc in documents(file) {
        let name = doc["metadata"]["name"].as_str().unwrap();
        let deleted = match doc["kind"].as_str().unwrap() {
            "ClusterRoleBinding" => {
                Api::<ClusterRoleBinding>::all(admin.clone()).delete(name, &DeleteParams::default()).await.map(|_| ())
            }
            "RoleBinding" => {
                let namespace = doc["metadata"]["namespace"].as_str().unwrap();
                let api = Api::<RoleBinding>::namespaced(admin.clone(), namespace);
                api.delete(name, &DeleteParams::default()).await.map(|_| ())
            }
            _ => Ok(()),
        };
        match deleted {
            Err(kube::Error::Api(status)) if status.code != 404 => panic!("deleting {name}: {status:?}"),
            _ => {}
        }
    }
}

/// Drops the rule granting `approve` on the signer from a ClusterRole document.
fn without_signers_rule(doc: &mut serde_json::Value) {
    if let Some(rules) = doc["rules"].as_array_mut() {
        rules.retain(|rule| !rule["resources"].as_array().unwrap().iter().any(|r| r == "signers"));
    }
}

/// The namespace, the always-needed RBAC exactly as `deploy/rbac` has it (undoing whatever an
/// earlier test changed), no Lease, and a kubeconfig and a client with the ServiceAccount's token.
struct ServiceAccountEnv {
    admin: Client,
    account: Client,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl ServiceAccountEnv {
    async fn install(cp: &ControlPlane) -> ServiceAccountEnv {
        let admin = cp.admin_client().await.unwrap();
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta { name: Some(NAMESPACE.into()), ..Default::default() },
            ..Default::default()
        };
        let params = PatchParams::apply("node-csr-approver-tests").force();
        Api::<Namespace>::all(admin.clone()).patch(NAMESPACE, &params, &Patch::Apply(&namespace)).await.unwrap();
        for file in ALWAYS {
            apply_rbac(&admin, file, |_| {}).await;
        }
        delete_bindings(&admin, "clusterrole-nodes.yaml").await;
        match Api::<Lease>::namespaced(admin.clone(), NAMESPACE).delete(LEASE, &DeleteParams::default()).await {
            Err(kube::Error::Api(status)) if status.code != 404 => panic!("deleting the Lease: {status:?}"),
            _ => {}
        }
        let token = cp.service_account_token(NAMESPACE, "node-csr-approver").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("sa.kubeconfig");
        cp.write_kubeconfig_for_token(&token, &kubeconfig).unwrap();
        let account = cp.service_account_client(NAMESPACE, "node-csr-approver").await.unwrap();
        let signer = Some("kubernetes.io/kubelet-serving");
        wait_access(&account, access("approve", "certificates.k8s.io", "signers", None, signer), true).await;
        wait_access(&account, access("update", "coordination.k8s.io", "leases", Some(NAMESPACE), Some(LEASE)), true)
            .await;
        ServiceAccountEnv { admin, account, kubeconfig, _dir: dir }
    }

    fn approver(&self, extra: &[&str]) -> Approver {
        Approver::start(&self.kubeconfig, extra, &[])
    }
}

#[tokio::test]
async fn the_deploy_rbac_is_enough_and_the_signers_rule_is_needed() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let env = ServiceAccountEnv::install(cp).await;
    let admin = &env.admin;
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    // Events are created, never patched, updated or deleted.
    let events = |verb| access(verb, "events.k8s.io", "events", Some("default"), None);
    wait_access(&env.account, events("create"), true).await;
    for verb in ["patch", "update", "delete"] {
        wait_access(&env.account, events(verb), false).await;
    }
    // A decision is a patch of the approval subresource, or an update of it for a CSR the
    // apiserver cannot patch (a managedFields time of a five-digit year): the CSR itself is not the
    // controller's to write.
    let csrs_access = |verb, subresource: Option<&str>| ResourceAttributes {
        subresource: subresource.map(str::to_owned),
        ..access(verb, "certificates.k8s.io", "certificatesigningrequests", None, None)
    };
    for verb in ["patch", "update"] {
        wait_access(&env.account, csrs_access(verb, Some("approval")), true).await;
    }
    for (verb, subresource) in
        [("patch", None), ("update", None), ("patch", Some("status")), ("update", Some("status"))]
    {
        wait_access(&env.account, csrs_access(verb, subresource), false).await;
    }
    {
        // --events=all: the approval's event shows that the Role lets it create events.
        let args = [
            "--bypass-dns-resolution",
            "--leader-election",
            "--leader-election-namespace=node-csr-approver",
            "--events=all",
        ];
        let mut approver = env.approver(&args);
        approver.wait_ready().await;
        let name = csrs.name("rbac-ok");
        create_serving_csr(cp, &name, &node, &legit(&node, 31)).await;
        let decided = wait_decided(admin, &name, DECIDE).await;
        assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{}", approver.logs());
        assert!(wait_event(admin, &name, "AutoApproved", DECIDE).await.is_some(), "{}", approver.logs());
    }

    apply_rbac(admin, "clusterrole.yaml", without_signers_rule).await;
    let signer = Some("kubernetes.io/kubelet-serving");
    wait_access(&env.account, access("approve", "certificates.k8s.io", "signers", None, signer), false).await;
    let mut approver = env.approver(&["--bypass-dns-resolution"]);
    approver.wait_ready().await;
    let name = csrs.name("rbac-denied");
    create_serving_csr(cp, &name, &node, &legit(&node, 31)).await;
    let errors = r#"node_csr_approver_writes_total{result="error"}"#;
    let deadline = Instant::now() + DECIDE;
    while approver.metric(errors).await.unwrap_or(0.0) < 1.0 {
        assert!(Instant::now() < deadline, "no write was refused:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let found = conditions(admin, &name).await;
    apply_rbac(admin, "clusterrole.yaml", |_| {}).await;
    assert!(found.is_empty(), "approved without the signers rule: {found:?}");
    let logs = approver.logs();
    assert!(logs.contains("403") || logs.contains("forbidden"), "{logs}");
    assert!(approver.decisions(&name, "written").is_empty(), "{logs}");
}

#[tokio::test]
async fn verify_node_addresses_reads_real_nodes_with_the_nodes_role_and_only_with_it() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let env = ServiceAccountEnv::install(cp).await;
    let admin = &env.admin;
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let nodes = Api::<Node>::all(admin.clone());
    let object = Node {
        metadata: kube::api::ObjectMeta { name: Some(node.clone()), ..Default::default() },
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &object).await.unwrap();
    let hostname = format!("{node}.nodes.example.com");
    let status = json!({"status": {"addresses": [
        {"type": "InternalIP", "address": "10.0.0.51"}, {"type": "Hostname", "address": hostname},
    ]}});
    nodes.patch_status(&node, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let mut approver = env.approver(&["--bypass-dns-resolution", "--verify-node-addresses"]);
    approver.wait_ready().await;

    // Without clusterrole-nodes.yaml the Node cannot be read: retried, never decided.
    let get_node = access("get", "", "nodes", None, Some(&node));
    wait_access(&env.account, get_node.clone(), false).await;
    let early = csrs.name("nodes-early");
    create_serving_csr(cp, &early, &node, &legit(&node, 51)).await;
    assert!(wait_event(admin, &early, "ClusterUnavailable", DECIDE).await.is_some(), "{}", approver.logs());
    assert!(conditions(admin, &early).await.is_empty());

    apply_rbac(admin, "clusterrole-nodes.yaml", |_| {}).await;
    wait_access(&env.account, get_node, true).await;
    let (good, bad) = (csrs.name("nodes-good"), csrs.name("nodes-bad"));
    create_serving_csr(cp, &good, &node, &legit(&node, 51)).await;
    create_serving_csr(cp, &bad, &node, &legit(&node, 52)).await;
    let decided = wait_decided(admin, &good, DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    let decided = wait_decided(admin, &bad, DECIDE).await;
    assert_eq!(decided.first().and_then(|c| c.reason.as_deref()), Some("NodeAddressMismatch"), "{decided:?}");
    delete_bindings(admin, "clusterrole-nodes.yaml").await;
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
}

/// Drops the rule granting `list` on Nodes from a ClusterRole document.
fn without_nodes_rule(doc: &mut serde_json::Value) {
    if let Some(rules) = doc["rules"].as_array_mut() {
        rules.retain(|rule| !rule["resources"].as_array().unwrap().iter().any(|r| r == "nodes"));
    }
}

/// The ClusterRole lets the account list Nodes (and not get one): a node whose own Node lists an
/// address of the `default/kubernetes` EndpointSlices gets it approved; without the rule its CSR
/// is retried, never approved.
#[tokio::test]
async fn the_clusterrole_lists_nodes_for_an_advertise_address_and_is_needed() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let env = ServiceAccountEnv::install(cp).await;
    let admin = &env.admin;
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("cp");
    let nodes = Api::<Node>::all(admin.clone());
    let object = Node {
        metadata: kube::api::ObjectMeta { name: Some(node.clone()), ..Default::default() },
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &object).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.54"}]}});
    nodes.patch_status(&node, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), "default");
    let slice = EndpointSlice {
        metadata: kube::api::ObjectMeta {
            name: Some(unique("kubernetes-advertised")),
            labels: Some([("kubernetes.io/service-name".to_owned(), "kubernetes".to_owned())].into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint { addresses: vec!["10.0.0.54".into()], ..Endpoint::default() }],
        ports: None,
    };
    let slice_name = slice.metadata.name.clone().unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();

    apply_rbac(admin, "clusterrole.yaml", without_nodes_rule).await;
    let list_nodes = access("list", "", "nodes", None, None);
    wait_access(&env.account, list_nodes.clone(), false).await;
    let mut approver = env.approver(&["--bypass-dns-resolution"]);
    approver.wait_ready().await;
    let early = csrs.name("advertise-early");
    create_serving_csr(cp, &early, &node, &legit(&node, 54)).await;
    let retried = wait_event(admin, &early, "ClusterUnavailable", DECIDE).await;
    let found = conditions(admin, &early).await;
    apply_rbac(admin, "clusterrole.yaml", |_| {}).await;
    assert!(retried.is_some(), "{}", approver.logs());
    assert!(found.is_empty(), "decided without listing Nodes: {found:?}");

    wait_access(&env.account, list_nodes, true).await;
    wait_access(&env.account, access("get", "", "nodes", None, Some(&node)), false).await;
    let late = csrs.name("advertise-late");
    create_serving_csr(cp, &late, &node, &legit(&node, 54)).await;
    let decided = wait_decided(admin, &late, DECIDE).await;
    slices.delete(&slice_name, &DeleteParams::default()).await.unwrap();
    nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
}

/// The apiserver Role lets the account read exactly Services and EndpointSlices in `default`
/// (the watches narrow them to `default/kubernetes` by selector), nothing else; without it a CSR
/// with an IP SAN is retried, never approved; with it, approved.
#[tokio::test]
async fn the_apiserver_role_reads_services_and_endpointslices_in_default_and_is_needed() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let env = ServiceAccountEnv::install(cp).await;
    let admin = &env.admin;
    let service = |verb, namespace| access(verb, "", "services", namespace, None);
    let slices = |verb, namespace| access(verb, "discovery.k8s.io", "endpointslices", namespace, None);
    for verb in ["get", "list", "watch"] {
        wait_access(&env.account, service(verb, Some("default")), true).await;
        wait_access(&env.account, slices(verb, Some("default")), true).await;
        wait_access(&env.account, service(verb, Some("kube-system")), false).await;
        wait_access(&env.account, slices(verb, Some("kube-system")), false).await;
        wait_access(&env.account, service(verb, None), false).await;
        wait_access(&env.account, slices(verb, None), false).await;
    }
    for verb in ["create", "update", "patch", "delete"] {
        wait_access(&env.account, service(verb, Some("default")), false).await;
        wait_access(&env.account, slices(verb, Some("default")), false).await;
    }
    wait_access(&env.account, access("list", "", "endpoints", Some("default"), None), false).await;

    delete_bindings(admin, "role-apiserver.yaml").await;
    wait_access(&env.account, service("list", Some("default")), false).await;
    let csrs = Csrs::new(cp.kubeconfig_path());
    let node = unique("n");
    let (early, late) = (csrs.name("apiserver-early"), csrs.name("apiserver-late"));
    {
        let mut approver = env.approver(&["--bypass-dns-resolution"]);
        approver.wait_ready().await;
        create_serving_csr(cp, &early, &node, &legit(&node, 61)).await;
        assert!(wait_event(admin, &early, "ClusterUnavailable", DECIDE).await.is_some(), "{}", approver.logs());
        assert!(conditions(admin, &early).await.is_empty(), "decided without the apiserver's addresses");
    }
    apply_rbac(admin, "role-apiserver.yaml", |_| {}).await;
    wait_access(&env.account, service("watch", Some("default")), true).await;
    let mut approver = env.approver(&["--bypass-dns-resolution"]);
    approver.wait_ready().await;
    create_serving_csr(cp, &late, &node, &legit(&node, 61)).await;
    let decided = wait_decided(admin, &late, DECIDE).await;
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
}

#[tokio::test]
async fn an_election_that_loses_access_to_its_lease_exits_1() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let env = ServiceAccountEnv::install(cp).await;
    let args = [
        "--bypass-dns-resolution",
        "--leader-election",
        "--leader-election-namespace=node-csr-approver",
        "--lease-duration=6s",
        "--renew-deadline=4s",
        "--retry-period=1s",
    ];
    let mut approver = env.approver(&args);
    approver.wait_ready().await;
    let leases = Api::<Lease>::namespaced(env.admin.clone(), NAMESPACE);
    let deadline = Instant::now() + DECIDE;
    while leases.get_opt(LEASE).await.unwrap().and_then(|l| l.spec?.holder_identity).is_none_or(|h| h.is_empty()) {
        assert!(Instant::now() < deadline, "never held the Lease:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    delete_bindings(&env.admin, "role-leases.yaml").await;
    let lease = access("update", "coordination.k8s.io", "leases", Some(NAMESPACE), Some(LEASE));
    wait_access(&env.account, lease, false).await;
    let revoked = Instant::now();
    // The next renewal, a retry period later, is refused.
    let status = approver.exit_by(revoked + DECIDE).await;
    apply_rbac(&env.admin, "role-leases.yaml", |_| {}).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{}", approver.logs());
    assert!(approver.logs().contains("leader election task ended"), "{}", approver.logs());
}
