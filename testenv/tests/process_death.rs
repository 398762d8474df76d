//! When the process owning a control plane is killed, its etcd, kube-apiserver and
//! kube-controller-manager go too.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use testenv::process_running;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn sigkilled_owner_leaves_no_processes_or_files() -> TestResult {
    let out = tempfile::tempdir()?;
    let mut cluster = Command::new(env!("CARGO_BIN_EXE_local-cluster"))
        .arg("--kubeconfig-out")
        .arg(out.path().join("kubeconfig"))
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = cluster.stdout.take().ok_or("no stdout")?;
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
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
