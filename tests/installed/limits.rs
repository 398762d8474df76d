//! The chart's limits under attack: the pods under their memory limit while a node floods hostile
//! CSRs, and the kubelet's probes while a client holds the admin port's connections.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testenv::ContainerCluster;

use crate::support::Request;
use crate::support::cluster::{create_serving_csr, unique, wait_decided};
use crate::support::installed::{
    self, NAMESPACE, NODE_NAME, can_run, diagnose, install_or_panic, lease_holder, names, pods, running_and_ready,
    wait_issued_serving_csr,
};

/// The chart's default memory limit (values.yaml, `resources.limits.memory`).
const LIMIT_BYTES: u64 = 128 * 1024 * 1024;
/// The chart's default memory request: the flood must cost less.
const REQUEST_BYTES: u64 = 64 * 1024 * 1024;
/// The flood: CSRs whose names are this long (the apiserver takes any name that is a path
/// segment), 120 MB of names in all, more than the limit for a process that kept them whole (300
/// such names took about 112 MB of one).
const FLOOD: usize = 400;
const LONG_NAME: usize = 300_000;

/// One node floods the cluster with [`FLOOD`] CSRs of [`LONG_NAME`]-character names while both
/// replicas, with the chart's default resources (128Mi limit), watch: neither is OOM-killed (no
/// restart, no `OOMKilled` last state), neither
/// pod's peak memory reaches the chart's request (64Mi), and the leader still decides, approving
/// a legitimate CSR created after the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_charts_memory_limit_a_flood_of_huge_csr_names_kills_no_pod_and_decisions_go_on() {
    let Some(_turn) = can_run().await else { return };
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    install_or_panic(&cluster, &release, &[]);
    // The approver decides before the flood: the node's own serving certificate.
    let own = wait_issued_serving_csr(&admin, Duration::from_secs(60)).await;
    assert!(own.is_some(), "the node's serving CSR was not issued\n{}", diagnose(&cluster));
    let before = pods(&admin).await;
    assert_eq!(before.len(), 2, "{:?}", names(&before));

    let user = format!("system:node:{NODE_NAME}");
    let node = cluster.control_plane().impersonated_client(&user, &["system:nodes"]).await.unwrap();
    let as_node = Api::<CertificateSigningRequest>::all(node);
    let node_ip = cluster.node().node_ip().to_string();
    let pem = Request::node(NODE_NAME).dns(NODE_NAME).ip(&node_ip).pem();
    let prefix = unique("flood");
    let started = Instant::now();
    let create = |i: usize| {
        let name = format!("{prefix}-{i:03}-{}", "x".repeat(LONG_NAME));
        let csr = testkit::csr::object(&name, testkit::csr::SERVING_SIGNER, &crate::support::SERVING_USAGES, &pem);
        let as_node = as_node.clone();
        async move { as_node.create(&PostParams::default(), &csr).await.map(drop) }
    };
    let created: Vec<_> = futures::stream::iter(0..FLOOD).map(create).buffer_unordered(8).collect().await;
    created.into_iter().collect::<Result<(), _>>().unwrap();
    let flooded = started.elapsed();

    // A second later, so that it is the node's newest serving CSR by creation time (the flood's,
    // older, are denied `Superseded` once decided).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let legit_created = Instant::now();
    let legit = unique("after-flood");
    create_serving_csr(
        cluster.control_plane(),
        &legit,
        NODE_NAME,
        &Request::node(NODE_NAME).dns(NODE_NAME).ip(&node_ip),
    )
    .await;
    let decided = wait_decided(&admin, &legit, Duration::from_secs(60)).await;
    let decided_in = legit_created.elapsed();
    eprintln!(
        "{FLOOD} CSRs of {LONG_NAME}-character names created in {:.1} s; a legitimate CSR created after them decided ({:?}) in {:.1} s",
        flooded.as_secs_f64(),
        decided.first().map(|c| &c.type_),
        decided_in.as_secs_f64()
    );

    let after = pods(&admin).await;
    let mut failures = Vec::new();
    for pod in &after {
        let memory = PodMemory::of(&cluster, pod);
        eprintln!("{}: {memory}", pod.name_any());
        failures.extend(memory.failure());
        if memory.peak >= REQUEST_BYTES {
            failures.push(format!("{}: peak {} bytes, not under the chart's request", pod.name_any(), memory.peak));
        }
        failures.extend(restarted(pod));
    }
    assert_eq!(names(&after), names(&before), "the approver pods changed\n{}", diagnose(&cluster));
    assert!(failures.is_empty(), "{failures:?}\n{}", diagnose(&cluster));
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", diagnose(&cluster));
}

/// What a pod's memory cgroup (v1) counted: its limit, its peak usage, how often the limit was
/// hit and its `oom_kill` count (which stays 0 when a container's process is killed: the kernel
/// counts that in the container's cgroup, which goes with the container; the kubelet's
/// `OOMKilled` state tells it).
struct PodMemory {
    cgroup: PathBuf,
    limit: u64,
    peak: u64,
    /// The largest peak of its containers' cgroups (the pause container's and the approver's).
    container_peak: u64,
    failcnt: u64,
    oom_kills: u64,
}

impl PodMemory {
    /// The memory cgroup of `pod` on the cluster's node: `pod<uid>` under the node's `kubepods`
    /// (in its QoS class's directory).
    fn of(cluster: &ContainerCluster, pod: &Pod) -> PodMemory {
        let root = Path::new("/sys/fs/cgroup/memory").join(cluster.node().cgroup_name()).join("kubepods");
        let wanted = format!("pod{}", pod.uid().unwrap());
        let cgroup = find_dir(&root, &wanted, 3).unwrap_or_else(|| panic!("no {wanted} under {}", root.display()));
        let read = |file: &str| std::fs::read_to_string(cgroup.join(file)).unwrap();
        let number = |file: &str| read(file).trim().parse::<u64>().unwrap();
        let oom_control = read("memory.oom_control");
        let oom_kills = oom_control.lines().find_map(|line| line.strip_prefix("oom_kill "));
        let containers = std::fs::read_dir(&cgroup).unwrap().flatten().map(|entry| entry.path()).filter(|p| p.is_dir());
        let container_peak = containers
            .filter_map(|dir| std::fs::read_to_string(dir.join("memory.max_usage_in_bytes")).ok()?.trim().parse().ok())
            .max()
            .unwrap_or(0);
        PodMemory {
            container_peak,
            limit: number("memory.limit_in_bytes"),
            peak: number("memory.max_usage_in_bytes"),
            failcnt: number("memory.failcnt"),
            oom_kills: oom_kills.map_or(0, |count| count.trim().parse().unwrap()),
            cgroup,
        }
    }

    /// Why this pod's memory shows a failure: the chart's limit not applied, or an OOM kill.
    fn failure(&self) -> Option<String> {
        (self.limit != LIMIT_BYTES || self.oom_kills > 0).then(|| format!("{}: {self}", self.cgroup.display()))
    }
}

impl std::fmt::Display for PodMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| bytes as f64 / 1024.0 / 1024.0;
        write!(
            f,
            "memory limit {:.0} MiB, peak usage {:.1} MiB (page cache included; largest container {:.1} MiB), failcnt {}, oom kills {}",
            mib(self.limit),
            mib(self.peak),
            mib(self.container_peak),
            self.failcnt,
            self.oom_kills
        )
    }
}

/// The directory named `name` under `dir`, at most `depth` levels down.
fn find_dir(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let subdirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    if let Some(found) = subdirs.iter().find(|p| p.file_name().is_some_and(|n| n == name)) {
        return Some(found.clone());
    }
    if depth == 0 {
        return None;
    }
    subdirs.iter().find_map(|sub| find_dir(sub, name, depth - 1))
}

/// Why `pod`'s containers show they were restarted: a restart count above 0 or a terminated last
/// state (`OOMKilled`, or any other).
fn restarted(pod: &Pod) -> Vec<String> {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    let mut found = Vec::new();
    for status in statuses {
        let terminated = status.last_state.as_ref().and_then(|state| state.terminated.as_ref());
        if status.restart_count > 0 || terminated.is_some() {
            let reason = terminated.and_then(|t| t.reason.clone());
            found.push(format!("{}: restarted {} times, last {reason:?}", pod.name_any(), status.restart_count));
        }
    }
    found
}

/// Connections the holding client keeps open to the approver's health port, more than the
/// [`node_csr_approver::admin::MAX_CONNECTIONS`] an admin server holds at once.
const HELD: usize = 150;
/// Rounds of each of its connections: a round sends an unfinished request head and holds the
/// connection for [`ROUND`] (the approver closes it after its 5 s header timeout, or sooner to
/// let another in), then reconnects.
const ROUNDS: usize = 10;
const ROUND: Duration = Duration::from_secs(6);
/// The chart's `healthProbe.port`.
const HEALTH_PORT: u16 = 8081;
/// The chart's liveness probe period: the hold must last at least three.
const LIVENESS_PERIOD: Duration = Duration::from_secs(10);

/// The holding client (busybox `sh` and `nc`): `$1` address, `$2` port, `$3` connections, `$4`
/// rounds of `$5` seconds each; every 2 s it prints how many of its connections are established.
const HOLDER: &str = r#"
slot() {
  r=0
  while [ "$r" -lt "$4" ]; do
    (printf 'GET /healthz HTTP/1.1\r\nHost: approver\r\nX-Slow: ' && sleep "$5") | nc "$1" "$2" >/dev/null 2>&1
    r=$((r + 1))
  done
}
i=0
while [ "$i" -lt "$3" ]; do slot "$@" & i=$((i + 1)); done
port="$(printf '%04X' "$2")"
t=0
while [ "$t" -lt $(($4 * $5 / 2)) ]; do
  echo "held $(grep -c ":${port} 01 " /proc/net/tcp)"
  sleep 2
  t=$((t + 1))
done
wait
echo done
"#;

/// A pod holds [`HELD`] connections to the leader's health port (pod IP and `healthProbe.port`),
/// each sending an unfinished request head, for [`ROUNDS`] × [`ROUND`] (more than three liveness
/// periods): meanwhile the kubelet's liveness and readiness probes of both replicas never fail (no
/// new `Unhealthy` Event, no restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_never_fail_while_a_client_holds_the_health_ports_connections() {
    let Some(_turn) = can_run().await else { return };
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    install_or_panic(&cluster, &release, &[]);
    let replicas = pods(&admin).await;
    assert!(replicas.len() == 2 && replicas.iter().all(running_and_ready), "{:?}", names(&replicas));
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let holder = lease_holder(&admin).await;
        if let Some(pod) = replicas.iter().find(|pod| holder.as_ref().is_some_and(|h| h.starts_with(&pod.name_any()))) {
            break pod.clone();
        }
        assert!(Instant::now() < deadline, "no replica holds the Lease");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let target = leader.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    // Probe failures of the start (a readiness probe before the port is open) are not this test's.
    let unhealthy_before = unhealthy(&admin, &replicas).await;

    let holder_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let holder = holding_pod(&target, HEALTH_PORT);
    holder_pods.create(&PostParams::default(), &holder).await.unwrap();
    let started = Instant::now();
    let mut held_since = None;
    let mut failures = BTreeSet::new();
    loop {
        let phase = holder_pods.get("holder").await.unwrap().status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Running" && held_since.is_none() {
            held_since = Some(Instant::now());
        }
        for pod in pods(&admin).await {
            failures.extend(restarted(&pod));
        }
        if phase == "Succeeded" || phase == "Failed" || started.elapsed() > Duration::from_secs(180) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let held_for = held_since.map(|since| since.elapsed()).unwrap_or_default();
    // A failed probe's Event is written within a second or two of it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unhealthy_after = unhealthy(&admin, &replicas).await;
    let new: Vec<_> = unhealthy_after.iter().filter(|(key, count)| unhealthy_before.get(*key) < Some(count)).collect();

    let log = holder_pods.logs("holder", &LogParams::default()).await.unwrap_or_default();
    let counts: Vec<usize> = log.lines().filter_map(|l| l.strip_prefix("held ")?.parse().ok()).collect();
    let approver_log = Api::<Pod>::namespaced(admin.clone(), NAMESPACE)
        .logs(&leader.name_any(), &LogParams::default())
        .await
        .unwrap_or_default();
    let cap_reports = approver_log.lines().filter(|line| line.contains("admin connections at their limit")).count();
    eprintln!(
        "held for {:.1} s: connections established by the client every 2 s {counts:?} (max {:?}); \
         the approver's log lines about closing connections at its cap (at most one a minute): {cap_reports}; new Unhealthy events: {new:?}; restarts: {failures:?}",
        held_for.as_secs_f64(),
        counts.iter().max()
    );
    assert!(log.ends_with("done\n"), "the holding client did not finish: {log}");
    assert!(held_for >= 3 * LIVENESS_PERIOD, "held only {held_for:?}");
    // The server keeps at most its cap, closing the oldest unfinished ones to take new ones.
    let cap = node_csr_approver::admin::MAX_CONNECTIONS;
    assert!(counts.iter().any(|&count| count >= cap), "the client never held the server's {cap}: {counts:?}");
    assert!(new.is_empty(), "probes failed: {new:?}\n{}", diagnose(&cluster));
    assert!(failures.is_empty(), "{failures:?}\n{}", diagnose(&cluster));
}

/// The busybox pod running [`HOLDER`] against `address`:`port`.
fn holding_pod(address: &str, port: u16) -> Pod {
    let args = ["-c", HOLDER, "holder", address, &port.to_string(), &HELD.to_string(), &ROUNDS.to_string()];
    let mut args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    args.push(ROUND.as_secs().to_string());
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "holder",
                "image": "docker.io/library/busybox:1.37",
                "imagePullPolicy": "Never",
                "command": ["sh"],
                "args": args,
            }],
        },
    }))
    .unwrap()
}

/// The `Unhealthy` Events of `replicas` (the kubelet's probe failures): each Event's name with its
/// count and message.
async fn unhealthy(admin: &Client, replicas: &[Pod]) -> BTreeMap<(String, String), i32> {
    let events = Api::<Event>::namespaced(admin.clone(), NAMESPACE).list(&ListParams::default()).await.unwrap();
    let names = names(replicas);
    events
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Unhealthy"))
        .filter(|e| e.involved_object.name.as_ref().is_some_and(|name| names.contains(name)))
        .map(|e| ((e.name_any(), e.message.clone().unwrap_or_default()), e.count.unwrap_or(1)))
        .collect()
}
