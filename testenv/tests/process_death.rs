//! When the process owning a control plane is killed, its etcd, kube-apiserver and
//! kube-controller-manager go too; when it owns a container node, the node's processes (the
//! containers and shims among them), cgroups and directory go as well.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use testenv::process_running;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn sigkilled_owner_leaves_no_processes_or_files() -> TestResult {
    let out = tempfile::tempdir()?;
    let (mut cluster, received) = local_cluster(&out.path().join("kubeconfig"), &[])?;
    let mut pids = Vec::new();
    let mut state_dir = None;
    while state_dir.is_none() {
        let line = received.recv_timeout(Duration::from_secs(600))?;
        if let Some(list) = line.strip_prefix("processes (etcd, kube-apiserver, kube-controller-manager): ") {
            pids = list.split_whitespace().map(str::parse).collect::<Result<Vec<u32>, _>>()?;
        }
        state_dir = line.strip_prefix("state and logs: ").map(PathBuf::from);
    }
    let state_dir = state_dir.ok_or("no state directory printed")?;
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(pids.iter().all(|pid| process_running(*pid)));
    assert!(state_dir.is_dir());

    cluster.kill()?;
    cluster.wait()?;

    let deadline = Instant::now() + Duration::from_secs(30);
    while (pids.iter().any(|pid| process_running(*pid)) || state_dir.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in &pids {
        assert!(!process_running(*pid), "process {pid} outlived its killed owner");
    }
    assert!(!state_dir.exists(), "{} was not removed", state_dir.display());
    Ok(())
}

#[tokio::test]
async fn sigkilled_owner_of_a_container_node_leaves_no_process_cgroup_or_file() -> TestResult {
    if !testenv::running_as_root()? {
        eprintln!("skipped: a container node needs root");
        return Ok(());
    }
    let out = tempfile::tempdir()?;
    let kubeconfig = out.path().join("kubeconfig");
    let (cluster, received) = local_cluster(&kubeconfig, &["--with-node"])?;
    let mut cluster = KillOnDrop(cluster);
    let (mut cgroup, mut dir, mut pid) = (None, None, None);
    while pid.is_none() {
        let line = received.recv_timeout(Duration::from_secs(600))?;
        cgroup = cgroup.or_else(|| line.strip_prefix("node cgroup: ").map(str::to_owned));
        dir = dir.or_else(|| line.strip_prefix("node directory: ").map(PathBuf::from));
        pid = line.strip_prefix("node process: ").map(str::parse::<u32>).transpose()?;
    }
    let (cgroup, dir, pid) = (cgroup.ok_or("no cgroup printed")?, dir.ok_or("no directory printed")?, pid.unwrap_or(0));
    // A pod, so that a shim and a container (outside the node's process group) run too.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sleeper"},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    // containerd, kube-proxy, the kubelet, then the pod's shim, sandbox and container.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut node_processes = cgroup_processes(&cgroup);
    while node_processes.len() < 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        node_processes = cgroup_processes(&cgroup);
    }
    assert!(node_processes.len() >= 6, "the pod did not start: {node_processes:?}");
    assert!(process_running(pid) && dir.is_dir());

    cluster.0.kill()?;
    cluster.0.wait()?;

    let deadline = Instant::now() + Duration::from_secs(30);
    let gone = || !cgroup_paths(&cgroup).iter().any(|path| path.exists()) && !dir.exists();
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let alive: Vec<&u32> = node_processes.iter().filter(|pid| process_running(**pid)).collect();
    assert!(alive.is_empty(), "processes of the node outlived its killed owner: {alive:?}");
    assert!(gone(), "the node's cgroups or {} outlived its killed owner", dir.display());
    Ok(())
}

/// A child process killed when dropped (also when the test panics).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `local-cluster` with `args`, its kubeconfig at `kubeconfig`; its stdout lines come
/// through the receiver.
fn local_cluster(kubeconfig: &std::path::Path, args: &[&str]) -> std::io::Result<(Child, mpsc::Receiver<String>)> {
    let mut cluster = Command::new(env!("CARGO_BIN_EXE_local-cluster"))
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = cluster.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    Ok((cluster, received))
}

/// The cgroup `name` in each hierarchy.
fn cgroup_paths(name: &str) -> Vec<PathBuf> {
    let hierarchies = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().filter_map(Result::ok);
    hierarchies.map(|entry| entry.path().join(name)).collect()
}

/// Every process in the cgroup `name` and its children, in any hierarchy.
fn cgroup_processes(name: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs: Vec<PathBuf> = cgroup_paths(name).into_iter().filter(|path| path.is_dir()).collect();
    while let Some(dir) = dirs.pop() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|line| line.parse::<u32>().ok()));
        let children = std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok);
        dirs.extend(children.map(|entry| entry.path()).filter(|path| path.is_dir()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}
