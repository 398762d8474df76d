//! The real binary under the chart's memory limit (128 MiB, a cgroup v1 memory controller as the
//! kubelet sets it) while one node has filled the cluster with CSRs whose names are 300,000
//! characters long: it keeps each as a prefix and a digest, tells each once, stays up and decides
//! a legitimate CSR. And in machine mode under `--skip-deny-step`, with thousands of CSRs of 25 KiB
//! requests it ignores (another signer) or holds (client and serving CSRs whose requests the
//! canonical gate refuses): it keeps none of those requests, stays up and approves a new node's
//! client CSR. Needs root and cgroup v1's memory controller at `/sys/fs/cgroup/memory`.
//!
//! `NODE_CSR_APPROVER_BIN` runs another build of the binary (for example an older one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;
use support::Request;
use support::cluster::{Approver, PREFIXES, REGEX, SERIAL, control_plane, create_serving_csr, unique, wait_decided};
use testdns::{DnsServer, Records};
use testenv::ControlPlane;

/// The chart's memory limit.
const LIMIT_BYTES: u64 = 128 * 1024 * 1024;
/// CSRs with long names, and their names' length: 90 MB of names in all, which etcd and the
/// apiserver take (each object well under etcd's 1.5 MiB request limit).
const LONG_CSRS: usize = 300;
const LONG_NAME: usize = 300_000;
/// What the approver may hold in anonymous memory with them all cached: a CSR that can never be
/// decided costs a few hundred bytes, so this is the approver's own memory with room to spare.
const ANONYMOUS_BOUND: u64 = 32 * 1024 * 1024;
/// Machine mode: CSRs of each kind (ignored, held client, held serving) and the bytes of each
/// one's request: a real request followed by junk that Go's PEM reader skips (the apiserver
/// accepts it) and the canonical gate refuses. Kept in the cache, the three kinds would take
/// 6,600 × 16 KiB, more than the limit.
const EACH_KIND: usize = 2_200;
const LARGE_REQUEST: usize = 25 * 1024;
/// What the approver may hold in anonymous memory in machine mode with all of them pending: its
/// own memory, the 4,400 CSRs it decides without their requests, and the cache's room for
/// requests (`--cache-request-bytes`, 4 MiB), with room to spare.
const MACHINE_ANONYMOUS_BOUND: u64 = 32 * 1024 * 1024;
const BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const BOOTSTRAPPER_GROUPS: [&str; 3] =
    ["system:serviceaccounts:openshift-machine-config-operator", "system:serviceaccounts", "system:authenticated"];
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const MACHINE_GROUP: &str = "machine.openshift.io";
const MACHINE_NAMESPACE: &str = "memory-machines";

/// A memory cgroup of its own, removed when dropped (its processes killed first).
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn create(limit: u64, test: &str) -> MemoryCgroup {
        let path = PathBuf::from(format!("/sys/fs/cgroup/memory/node-csr-approver-test-{}-{test}", std::process::id()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let cgroup = MemoryCgroup(path);
        std::fs::write(cgroup.0.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        cgroup
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }

    /// A count of `memory.stat` (`rss`: the anonymous memory charged to the cgroup now).
    fn stat(&self, name: &str) -> u64 {
        let stat = self.read("memory.stat");
        let value = stat.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' '));
        value.and_then(|value| value.trim().parse().ok()).unwrap()
    }

    /// The `oom_kill` count of `memory.oom_control` (0 where the kernel does not report it).
    fn oom_kills(&self) -> u64 {
        let control = self.read("memory.oom_control");
        let kills = control.lines().find_map(|line| line.strip_prefix("oom_kill "));
        kills.and_then(|count| count.trim().parse().ok()).unwrap_or(0)
    }

    /// The approver (the built binary, or `NODE_CSR_APPROVER_BIN`) with `extra` arguments, started
    /// in this cgroup: a shell joins it, then becomes the approver, so everything it allocates is
    /// counted.
    fn spawn_approver(&self, cp: &ControlPlane, extra: &[&str]) -> Approver {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_node-csr-approver"));
        let binary = std::env::var_os(testkit::approver::BINARY_ENV).map_or(built, PathBuf::from);
        let command = testkit::approver::command(&binary, cp.kubeconfig_path(), REGEX, PREFIXES);
        let program = command.get_program().to_owned();
        let args: Vec<_> = command.get_args().map(ToOwned::to_owned).collect();
        let mut joined = Command::new("sh");
        joined.args(["-c", r#"echo $$ > "$0" && exec "$@""#]).arg(self.0.join("cgroup.procs")).arg(program).args(args);
        joined.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        joined.args(["--log-format", "json", "--log-level", "info"]).args(extra);
        joined.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        Approver::spawn(joined)
    }

    /// Peak usage (page cache included), failcnt and oom kills, as a line.
    fn report(&self) -> String {
        let (peak, failcnt) = (self.read("memory.max_usage_in_bytes"), self.read("memory.failcnt"));
        format!(
            "anonymous memory {} bytes; peak usage {} bytes (limit {LIMIT_BYTES}, page cache included), failcnt {}, oom kills {}",
            self.stat("rss"),
            peak.trim(),
            failcnt.trim(),
            self.oom_kills()
        )
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            for pid in self.read("cgroup.procs").split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

#[tokio::test]
async fn under_the_charts_memory_limit_hundreds_of_csrs_with_huge_names_cost_little() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let label = unique("memory");
    let node = unique("n");
    let request = Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.31");

    // What a node can do: the apiserver takes any name that is a path segment.
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let as_node = Api::<CertificateSigningRequest>::all(client);
    let pem = request.pem();
    let started = Instant::now();
    let create = |i: usize| {
        let mut csr = testkit::csr::object(
            &format!("{label}-{i:03}-{}", "x".repeat(LONG_NAME)),
            testkit::csr::SERVING_SIGNER,
            &support::SERVING_USAGES,
            &pem,
        );
        csr.metadata.labels = Some([("test".to_owned(), label.clone())].into());
        let as_node = as_node.clone();
        async move { as_node.create(&PostParams::default(), &csr).await.map(drop) }
    };
    let created: Vec<_> = futures::stream::iter(0..LONG_CSRS).map(create).buffer_unordered(8).collect().await;
    created.into_iter().collect::<Result<(), _>>().unwrap();
    println!("{LONG_CSRS} CSRs of {LONG_NAME}-character names created in {:?}", started.elapsed());
    // The legitimate CSR below comes at least a second later, so that it is the node's newest
    // serving CSR by creation time, not only by name (the long-named ones are the same node's).
    let legit_after = tokio::time::Instant::now() + Duration::from_millis(1100);

    let cgroup = MemoryCgroup::create(LIMIT_BYTES, "names");
    let dns = DnsServer::start_on_thread(Records::new().a(&format!("{node}.nodes.example.com"), "10.0.0.31")).unwrap();
    let mut approver = cgroup.spawn_approver(cp, &[&format!("--dns-server={}", dns.addr())]);
    approver.wait_ready().await;

    let name = unique("legit");
    tokio::time::sleep_until(legit_after).await;
    create_serving_csr(cp, &name, &node, &request).await;
    let decided = wait_decided(&admin, &name, Duration::from_secs(30)).await;
    let (anonymous, kills) = (cgroup.stat("rss"), cgroup.oom_kills());
    println!("{}", cgroup.report());
    let running = approver.wait_exit(Duration::ZERO).await.is_none();
    let told = |approver: &Approver| {
        let lines = approver.log_lines();
        lines.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with("cannot decide this CSR"))).count()
    };
    let told_once = told(&approver);
    let counted = approver.metric("node_csr_approver_unaddressable_csrs_total").await;

    let _ =
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&format!("test={label}"))).await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    assert!(running && kills == 0, "the approver did not stay up (oom kills: {kills}):\n{}", approver.logs());
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    // The approver alone takes about 10 MiB; the names, 90 MB, would take most of the limit.
    assert!(anonymous < ANONYMOUS_BOUND, "{anonymous} bytes of anonymous memory with the long-named CSRs cached");
    assert_eq!(told_once, LONG_CSRS, "each long name told once:\n{}", approver.logs());
    assert_eq!(counted, Some(LONG_CSRS as f64));
    drop(cgroup);
}

/// Machine CRDs, a namespace for Machines, and the bootstrapper's right to create CSRs, as on a
/// real cluster (the built-in system:node-bootstrapper role). Idempotent.
async fn install_machine_api(cp: &ControlPlane) -> kube::Client {
    let path = format!("{}/tests/fixtures/crds/machines.{MACHINE_GROUP}.yaml", env!("CARGO_MANIFEST_DIR"));
    let crd = serde_saphyr::from_str::<CustomResourceDefinition>(&std::fs::read_to_string(path).unwrap()).unwrap();
    cp.install_crds(vec![crd]).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": MACHINE_NAMESPACE}})).unwrap();
    let _ = Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "memory-node-bootstrapper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": BOOTSTRAPPER}],
    }))
    .unwrap();
    let _ = Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await;
    admin
}

/// The Machines of [`MACHINE_GROUP`] in [`MACHINE_NAMESPACE`].
fn machines(admin: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(MACHINE_GROUP, "v1beta1", "Machine"));
    Api::namespaced_with(admin.clone(), MACHINE_NAMESPACE, &resource)
}

/// A Machine `name` awaiting node `node` (its InternalDNS address, no nodeRef yet).
async fn awaiting_machine(admin: &kube::Client, name: &str, node: &str) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(MACHINE_GROUP, "v1beta1", "Machine"));
    let object = DynamicObject::new(name, &resource).data(json!({"spec": {}}));
    machines(admin).create(&PostParams::default(), &object).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalDNS", "address": node}]}});
    machines(admin).patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// `pem` followed by lines of junk up to [`LARGE_REQUEST`] bytes.
fn padded(mut pem: String) -> String {
    let junk = "A".repeat(63) + "\n";
    while pem.len() + junk.len() <= LARGE_REQUEST {
        pem.push_str(&junk);
    }
    pem
}

#[tokio::test]
async fn in_machine_mode_thousands_of_ignored_and_held_csrs_keep_no_request_under_the_charts_memory_limit() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = install_machine_api(cp).await;
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let label = unique("machine-memory");
    let node = unique("n");
    let as_node = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let as_bootstrapper = cp.impersonated_client(BOOTSTRAPPER, &BOOTSTRAPPER_GROUPS).await.unwrap();
    let serving_pem = padded(Request::node(&node).dns(&format!("{node}.nodes.example.com")).pem());
    let client_pem = padded(Request::node(&unique("boot")).pem());
    // Another signer's (ignored), bootstrap client CSRs the canonical gate refuses (held: client
    // CSRs are never denied), and the node's serving CSRs it refuses (held: --skip-deny-step).
    let client_usages = ["digital signature", "client auth"];
    let kinds = [
        (&as_node, "example.com/x", &client_usages[..], &serving_pem),
        (&as_bootstrapper, CLIENT_SIGNER, &client_usages[..], &client_pem),
        (&as_node, testkit::csr::SERVING_SIGNER, &support::SERVING_USAGES[..], &serving_pem),
    ];
    let started = Instant::now();
    let create = |i: usize| {
        let (client, signer, usages, pem) = kinds[i % kinds.len()];
        let mut csr = testkit::csr::object(&format!("{label}-{i:05}"), signer, usages, pem);
        csr.metadata.labels = Some([("test".to_owned(), label.clone())].into());
        let api = Api::<CertificateSigningRequest>::all(client.clone());
        async move { api.create(&PostParams::default(), &csr).await.map(drop) }
    };
    let total = EACH_KIND * kinds.len();
    let created: Vec<_> = futures::stream::iter(0..total).map(create).buffer_unordered(16).collect().await;
    created.into_iter().collect::<Result<(), _>>().unwrap();
    println!("{total} CSRs of {LARGE_REQUEST}-byte requests created in {:?}", started.elapsed());

    let cgroup = MemoryCgroup::create(LIMIT_BYTES, "machine");
    let (machine, legit_node, legit) = (unique("m"), unique("joining"), unique("legit"));
    let run = async {
        let machine_mode =
            ["--machine-api=machine.openshift.io/v1beta1", "--bypass-dns-resolution", "--skip-deny-step"];
        let started = Instant::now();
        let mut approver = cgroup.spawn_approver(cp, &machine_mode);
        approver.wait_ready().await;
        println!("ready {:?} after the start", started.elapsed());
        // A new node joins: its Machine awaits it, and its bootstrap client CSR is approved.
        awaiting_machine(&admin, &machine, &legit_node).await;
        let mut csr = testkit::csr::object(&legit, CLIENT_SIGNER, &client_usages, &Request::node(&legit_node).pem());
        csr.metadata.labels = Some([("test".to_owned(), label.clone())].into());
        let bootstrapper = Api::<CertificateSigningRequest>::all(as_bootstrapper.clone());
        bootstrapper.create(&PostParams::default(), &csr).await.unwrap();
        let decided = wait_decided(&admin, &legit, Duration::from_secs(60)).await;
        println!("{legit} decided {:?} after the start; {}", started.elapsed(), cgroup.report());
        let held =
            approver.metric(r#"node_csr_approver_decisions_total{decision="hold",reason="MalformedRequest"}"#).await;
        let running = approver.wait_exit(Duration::ZERO).await.is_none();
        (approver, decided, held, running)
    };
    let outcome = std::panic::AssertUnwindSafe(run).catch_unwind().await;
    let (anonymous, kills) = (cgroup.stat("rss"), cgroup.oom_kills());
    let report = cgroup.report();
    drop(cgroup);
    let _ =
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&format!("test={label}"))).await;
    let _ = machines(&admin).delete(&machine, &DeleteParams::default()).await;
    let (approver, decided, held, running) = match outcome {
        Ok(outcome) => outcome,
        Err(panic) => {
            eprintln!("{report}");
            std::panic::resume_unwind(panic)
        }
    };
    assert!(running && kills == 0, "the approver did not stay up ({report}):\n{}", approver.logs());
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    assert!(held.is_some_and(|held| held > 0.0), "held CSRs were evaluated: {held:?}");
    assert!(anonymous < MACHINE_ANONYMOUS_BOUND, "{anonymous} bytes of anonymous memory: {report}");
}
