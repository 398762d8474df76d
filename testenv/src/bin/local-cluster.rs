//! Starts a local control plane (etcd + kube-apiserver, and kube-controller-manager's CSR signer) to
//! try node-csr-approver without a cluster, writes its admin kubeconfig to a stable path and runs
//! until interrupted.
//!
//! Usage: `cargo run -p testenv --bin local-cluster [-- --kubeconfig-out PATH]`

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use testenv::{ATTACH_ENV, ControlPlane, Error, Signer};
use tokio::signal::unix::{SignalKind, signal};

/// Where the kubeconfig goes unless `--kubeconfig-out` says otherwise.
const DEFAULT_KUBECONFIG_OUT: &str = "target/local-cluster/kubeconfig";

const USAGE: &str = "usage: local-cluster [--kubeconfig-out PATH]";

#[tokio::main]
async fn main() -> ExitCode {
    let out = match kubeconfig_out(std::env::args().skip(1)) {
        Ok(out) => out,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("local-cluster: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The kubeconfig output path from the command line arguments.
fn kubeconfig_out(mut args: impl Iterator<Item = String>) -> Result<PathBuf, String> {
    let mut out = PathBuf::from(DEFAULT_KUBECONFIG_OUT);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kubeconfig-out" => {
                out = args.next().map(PathBuf::from).ok_or("--kubeconfig-out needs a path")?;
            }
            "-h" | "--help" => {
                return Err("local-cluster: a local etcd + kube-apiserver + CSR signer".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(out)
}

async fn run(out: &Path) -> Result<(), Error> {
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::io("watching SIGTERM"))?;
    let control_plane = ControlPlane::start().await?;
    let signer = control_plane.start_signer().await?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(Error::io(format!("creating {}", parent.display())))?;
    }
    std::fs::copy(control_plane.kubeconfig_path(), out).map_err(Error::io(format!("writing {}", out.display())))?;
    let out = std::path::absolute(out).map_err(Error::io("resolving the kubeconfig path"))?;
    print_usage(&control_plane, &signer, &out).await;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map_err(Error::io("watching Ctrl-C"))?,
        _ = terminate.recv() => {}
    }
    println!("stopping");
    drop(signer);
    drop(control_plane);
    std::fs::remove_file(&out).map_err(Error::io(format!("removing {}", out.display())))
}

async fn print_usage(control_plane: &ControlPlane, signer: &Signer, kubeconfig: &Path) {
    let kubeconfig = kubeconfig.display();
    let mut ids = control_plane.process_ids().await;
    ids.push(signer.process_id());
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("kube-apiserver ready at {}", control_plane.server_url());
    println!("CSR signer (kube-controller-manager) ready at {}", signer.url());
    println!("processes (etcd, kube-apiserver, kube-controller-manager): {}", ids.join(" "));
    if let Some(dir) = control_plane.state_dir() {
        println!("state and logs: {}", dir.display());
    }
    println!("admin kubeconfig: {kubeconfig}");
    println!();
    println!("try it:");
    println!("  export KUBECONFIG={kubeconfig}; kubectl get namespaces   # if kubectl is installed");
    println!("  cargo run -p node-csr-approver -- --kubeconfig {kubeconfig}");
    println!("  {ATTACH_ENV}={kubeconfig} cargo test   # tests share this cluster");
    println!();
    println!("Ctrl-C stops everything.");
}
