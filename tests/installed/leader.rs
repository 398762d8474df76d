//! The leader pod deleted, or its process killed, while CSRs arrive: the Lease goes to another
//! replica and every CSR ends decided exactly once, as it must be.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::support::installed::{
    self, NAMESPACE, Workload, assert_decided_once, can_run, diagnose, install_or_panic, lease_holder, names, pods,
    wait_holder,
};

/// The chart's default `leaseDuration`: a standby takes an abandoned Lease within it.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// CSRs created each second.
const RATE: u32 = 5;
/// Once the workload stops, every CSR is decided within this.
const RECOVERY: Duration = Duration::from_secs(20);

/// With the chart's defaults (two replicas, leader election), deleting the pod that holds the
/// Lease while a node keeps creating CSRs hands the Lease to the other replica, the standby that
/// was already running, within a lease duration; every CSR created before, during and after ends
/// with exactly one condition: Approved for the node's own requests, Denied for forged ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_leader_pod_is_deleted_and_every_csr_is_decided_once() {
    let Some(_turn) = can_run().await else { return };
    let started = Instant::now();
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    install_or_panic(&cluster, &release, &[]);
    let replicas = names(&pods(&admin).await);
    let holder = wait_holder(&admin, None, Duration::from_secs(30)).await.expect("no replica holds the Lease");
    let leader = replicas.iter().find(|name| holder.starts_with(name.as_str())).unwrap_or_else(|| {
        panic!("the Lease holder {holder} is none of {replicas:?}");
    });
    let standbys: Vec<&String> = replicas.iter().filter(|name| *name != leader).collect();
    eprintln!("installed in {:.1} s: leader {leader}, standbys {standbys:?}", started.elapsed().as_secs_f64());

    let workload = Workload::start(&cluster, "leader", RATE).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deleted = Instant::now();
    Api::<Pod>::namespaced(admin.clone(), NAMESPACE).delete(leader, &DeleteParams::default()).await.unwrap();
    let next = wait_holder(&admin, Some(leader), LEASE_DURATION + Duration::from_secs(10)).await;
    let next = next.unwrap_or_else(|| panic!("nobody took the Lease over from {leader}\n{}", diagnose(&cluster)));
    let takeover = deleted.elapsed();
    assert!(
        standbys.iter().any(|standby| next.starts_with(standby.as_str())),
        "the Lease went to {next}, not to a standby of {standbys:?} (a replacement pod?)"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let sent = workload.stop().await;
    eprintln!("{next} took the Lease {:.1} s after {leader} was deleted", takeover.as_secs_f64());

    assert_decided_once(&cluster, "leader pod deleted", &sent, RECOVERY).await;
    assert_eq!(lease_holder(&admin).await.as_deref(), Some(next.as_str()), "the Lease changed hands again");
    eprintln!("test took {:.1} s", started.elapsed().as_secs_f64());
}

/// With the chart's defaults, the leader's process killed (SIGKILL, as the OOM killer or a crashed
/// node ends it: no release of the Lease) while a node keeps creating CSRs: the Lease expires and
/// another holder (the standby, or the restarted container under a new identity) takes it over
/// within a lease duration and a few retries; every CSR ends with exactly one condition, the
/// right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_takes_over_when_the_leaders_process_is_killed_and_every_csr_is_decided_once() {
    let Some(_turn) = can_run().await else { return };
    let started = Instant::now();
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    install_or_panic(&cluster, &release, &[]);
    let holder = wait_holder(&admin, None, Duration::from_secs(30)).await.expect("no replica holds the Lease");
    let replicas = pods(&admin).await;
    let leader = replicas.iter().find(|pod| holder.starts_with(&pod.name_any())).expect("the holder's pod");
    let container = leader
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .and_then(|status| status.container_id.as_deref())
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("the leader's container id")
        .to_owned();

    let workload = Workload::start(&cluster, "killed", RATE).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pids = container_processes(cluster.node().cgroup_name(), &container);
    assert!(!pids.is_empty(), "no process found for container {container}");
    let killed = Instant::now();
    for pid in &pids {
        assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    }
    let next = wait_holder(&admin, Some(&holder), LEASE_DURATION + Duration::from_secs(10)).await;
    let next = next.unwrap_or_else(|| panic!("nobody took the Lease over from {holder}\n{}", diagnose(&cluster)));
    let takeover = killed.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sent = workload.stop().await;
    eprintln!("{next} took the Lease {:.1} s after {holder}'s process was killed", takeover.as_secs_f64());

    assert_decided_once(&cluster, "leader's process killed", &sent, RECOVERY).await;
    eprintln!("test took {:.1} s", started.elapsed().as_secs_f64());
}

/// The processes of the container `id`, from its cgroup under the node's (any hierarchy: `pids`).
fn container_processes(node_cgroup: &str, id: &str) -> Vec<u32> {
    let mut dirs = vec![std::path::Path::new("/sys/fs/cgroup/pids").join(node_cgroup)];
    while let Some(dir) = dirs.pop() {
        if dir.file_name().is_some_and(|name| name == id) {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            return procs.lines().filter_map(|line| line.parse().ok()).collect();
        }
        let children = std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok);
        dirs.extend(children.map(|entry| entry.path()).filter(|path| path.is_dir()));
    }
    Vec::new()
}
