//! `hostNetwork: true`: the approver in the node's network namespace, running and deciding while
//! the node's pod network is not up.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testenv::ContainerCluster;

use crate::support::installed::{
    self, NAMESPACE, NODE_NAME, can_run, decision, diagnose, install, names, pods, running_and_ready,
    wait_issued_serving_csr,
};

/// How long the node may take to report NotReady once its CNI configuration is gone, and to run a
/// pod-network pod once it is back.
const NETWORK_CHANGE: Duration = Duration::from_secs(60);

/// With the node's CNI configuration taken away (the container runtime's network not ready, as
/// before a CNI is installed: the Node NotReady, pods on the pod network cannot start), the chart
/// with `hostNetwork: true` installs (`--wait`): the approver pod runs in the node's network
/// namespace (its address the node's, its ports host ports) and approves the node's own
/// kubelet-serving CSR, which is issued; meanwhile a pod on the pod network stays Pending, and
/// runs once the configuration is back.
///
/// One replica (`replicas=1`): with `hostNetwork` the apiserver gives each container port a host
/// port of the same number (health 8081, metrics 8080), so two replicas cannot share a node and
/// the scheduler keeps the second Pending on this one-node cluster (a real cluster has several
/// nodes, over which the chart spreads its replicas). With `hostNetwork` the chart tolerates the
/// `node.kubernetes.io/not-ready` taint the node lifecycle controller puts on such a node;
/// without it the pod stays Pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_host_network_the_approver_runs_and_approves_before_the_pod_network_is_up() {
    let Some(_turn) = can_run().await else { return };
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();

    let conflist = cluster.node().dir().join("cni/10-testenv.conflist");
    let held = cluster.node().dir().join("10-testenv.conflist.held");
    std::fs::rename(&conflist, &held).unwrap();
    let started = Instant::now();
    let reason = wait_node_not_ready(&admin).await.unwrap_or_else(|| panic!("the node stayed Ready without CNI"));
    eprintln!("node NotReady {:.1} s after its CNI configuration went: {reason}", started.elapsed().as_secs_f64());

    let pod_network: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pod_network.create(&PostParams::default(), &pod_network_pod()).await.unwrap();

    let started = Instant::now();
    install(&cluster, &release, "install", &["--set", "hostNetwork=true", "--set", "replicas=1"])
        .unwrap_or_else(|error| panic!("helm install failed: {error}\n{}\n{}", diagnose(&cluster), logs(&cluster)));
    eprintln!("helm install --wait (hostNetwork, no pod network) took {:.1} s", started.elapsed().as_secs_f64());
    let replicas = pods(&admin).await;
    assert_eq!(replicas.len(), 1, "{:?}", names(&replicas));
    let pod = &replicas[0];
    assert!(running_and_ready(pod), "{:?}", pod.status);
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.host_network, Some(true));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
    let node_ip = cluster.node().node_ip().to_string();
    assert_eq!(pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()), Some(node_ip.as_str()));
    let ports = spec.containers[0].ports.clone().unwrap_or_default();
    let host_ports: Vec<_> = ports.iter().map(|port| (port.container_port, port.host_port)).collect();
    assert!(host_ports.iter().all(|(container, host)| Some(*container) == *host), "{host_ports:?}");

    let csr = wait_issued_serving_csr(&admin, Duration::from_secs(60)).await;
    let csr = csr.unwrap_or_else(|| panic!("the node's serving CSR was not issued\n{}", diagnose(&cluster)));
    let decided = decision(&csr);
    assert_eq!(decided.as_ref().map(|(kind, _)| kind.as_str()), Some("Approved"), "{csr:?}");
    eprintln!("the node's serving CSR approved ({decided:?}) and issued {:.1} s after the install began", {
        started.elapsed().as_secs_f64()
    });

    // Still no pod network: the Node NotReady, the pod-network pod not running.
    let waiting = pod_network.get("on-pod-network").await.unwrap();
    let phase = waiting.status.as_ref().and_then(|s| s.phase.clone());
    let sandbox = events(&admin, "on-pod-network").await;
    eprintln!("the pod-network pod meanwhile: {phase:?}, events {sandbox:?}");
    assert_eq!(phase.as_deref(), Some("Pending"), "{:?}", waiting.status);
    assert!(wait_node_not_ready(&admin).await.is_some(), "the node became Ready without its CNI");

    // Written, not renamed back: containerd reloads its CNI configuration on a write (it ignores
    // the creation of a file).
    std::fs::write(&conflist, std::fs::read(&held).unwrap()).unwrap();
    let started = Instant::now();
    let running = loop {
        let pod = pod_network.get("on-pod-network").await.unwrap();
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            break true;
        }
        if started.elapsed() > NETWORK_CHANGE {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "the pod-network pod Running {:.1} s after the CNI configuration came back",
        started.elapsed().as_secs_f64()
    );
    assert!(running, "the pod-network pod did not run with its network back\n{}", diagnose(&cluster));
}

/// A busybox pod on the pod network that tolerates the node's not-ready taint.
fn pod_network_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-pod-network", "namespace": "default"},
        "spec": {
            "containers": [{
                "name": "sleep",
                "image": "docker.io/library/busybox:1.37",
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
            }],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        },
    }))
    .unwrap()
}

/// Waits up to [`NETWORK_CHANGE`] until the node's Ready condition is False; returns its message.
async fn wait_node_not_ready(admin: &Client) -> Option<String> {
    let nodes: Api<Node> = Api::all(admin.clone());
    let deadline = Instant::now() + NETWORK_CHANGE;
    while Instant::now() < deadline {
        let node = nodes.get(NODE_NAME).await.unwrap();
        let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
        if let Some(condition) = conditions.iter().find(|c| c.type_ == "Ready" && c.status == "False") {
            return Some(condition.message.clone().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// The reasons and messages of the Events of the pod `name` in `default`.
async fn events(admin: &Client, name: &str) -> Vec<String> {
    let events = Api::<Event>::namespaced(admin.clone(), "default").list(&ListParams::default()).await.unwrap();
    let about = events.items.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name));
    about.map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default())).collect()
}

/// The approver containers' logs as the kubelet wrote them (`kubectl logs` needs the serving
/// certificate the approver did not approve).
fn logs(cluster: &ContainerCluster) -> String {
    let mut found = String::new();
    let Ok(pods) = std::fs::read_dir(cluster.node().dir().join("pod-logs")) else { return found };
    for pod in pods.flatten().filter(|pod| pod.file_name().to_string_lossy().starts_with(NAMESPACE)) {
        for file in walk(&pod.path()) {
            found.push_str(&format!("{}:\n{}\n", file.display(), std::fs::read_to_string(&file).unwrap_or_default()));
        }
    }
    found
}

/// The files under `dir`, at any depth.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path());
    entries.flat_map(|path| if path.is_dir() { walk(&path) } else { vec![path] }).collect()
}
