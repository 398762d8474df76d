//! A cluster whose node runs containers: a pod runs, reaches a Service through kube-proxy and the
//! cluster DNS, and nothing of the node is left on the machine once the cluster is dropped.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use serde_json::json;
use testenv::{ContainerCluster, ContainerClusterOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The test image: Debian's static busybox under the name pods use.
const BUSYBOX: &str = "docker.io/library/busybox:1.37";

#[tokio::test]
async fn a_pod_runs_and_reaches_a_service_by_name_and_the_node_leaves_nothing_behind() -> TestResult {
    if !testenv::running_as_root()? {
        eprintln!("skipped: a container node needs root");
        return Ok(());
    }
    let host_tunables = tunables()?;
    let dir = tempfile::tempdir()?;
    let image = testenv::busybox_image(BUSYBOX, &dir.path().join("busybox.tar"))?;
    let cluster = ContainerCluster::start(ContainerClusterOptions::new("node-1.example.com", vec![image])).await?;
    cluster.wait_node_ready().await?;
    let client = cluster.control_plane().admin_client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client, "default");
    let server: Pod = serde_json::from_value(json!({
        "metadata": {"name": "server", "labels": {"app": "server"}},
        "spec": {"containers": [{
            "name": "httpd", "image": BUSYBOX,
            "command": ["sh", "-c", "mkdir /tmp/www && echo hello > /tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www"],
        }]},
    }))?;
    pods.create(&PostParams::default(), &server).await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    services.create(&PostParams::default(), &service).await?;
    let client_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "client"},
        "spec": {"restartPolicy": "OnFailure", "containers": [{
            "name": "wget", "image": BUSYBOX,
            "command": ["sh", "-c", "wget -qO- http://web/index.html > /dev/termination-log"],
        }]},
    }))?;
    pods.create(&PostParams::default(), &client_pod).await?;
    let succeeded = |pod: Option<&Pod>| {
        pod.and_then(|pod| pod.status.as_ref()).and_then(|status| status.phase.as_deref()) == Some("Succeeded")
    };
    let done = tokio::time::timeout(Duration::from_secs(90), await_condition(pods.clone(), "client", succeeded)).await;
    let pod = pods.get("client").await?;
    assert!(
        done.is_ok(),
        "the client pod did not succeed: {:?}\nkubelet: {}",
        pod.status,
        tail(&cluster.node().kubelet_log())
    );
    // What the pod read, as its termination message (logs would need the kubelet's serving
    // certificate, which waits for an approver).
    let message = pod
        .status
        .and_then(|status| status.container_statuses)
        .and_then(|statuses| statuses.into_iter().next())
        .and_then(|status| status.state)
        .and_then(|state| state.terminated)
        .and_then(|terminated| terminated.message);
    assert_eq!(message.as_deref().map(str::trim), Some("hello"));

    // The kubelet set its kernel tunables, on the node's copies.
    let copy = std::fs::read_to_string(cluster.node().dir().join("sysctl/vm_overcommit_memory"))?;
    assert_eq!(copy.trim(), "1", "the kubelet did not write vm.overcommit_memory");
    assert_eq!(tunables()?, host_tunables, "the node changed the machine's kernel tunables");

    let cgroup = cluster.node().cgroup_name().to_owned();
    let node_dir = cluster.node().dir().to_owned();
    drop(cluster);
    let left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join(&cgroup))
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    assert!(left.is_empty(), "cgroups left: {left:?}");
    assert!(!node_dir.exists(), "{} left", node_dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(!mounts.contains(&node_dir.display().to_string()), "mounts left:\n{mounts}");
    Ok(())
}

/// The kernel tunables the kubelet sets, as this machine has them.
fn tunables() -> std::io::Result<Vec<String>> {
    ["vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops"]
        .iter()
        .map(|key| std::fs::read_to_string(format!("/proc/sys/{key}")))
        .collect()
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
