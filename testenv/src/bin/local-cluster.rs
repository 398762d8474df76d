//! Starts a local control plane (etcd + kube-apiserver, and kube-controller-manager's CSR signer) to
//! try node-csr-approver without a cluster, writes its admin kubeconfig to a stable path and runs
//! until interrupted. With `--with-node`, a whole cluster whose node runs containers instead
//! (`testenv::ContainerCluster`, as root), importing the OCI image archives given with `--image`,
//! to install the chart into with helm.
//!
//! Usage: `cargo run -p testenv --bin local-cluster [-- [--kubeconfig-out PATH] [--with-node
//! [--image ARCHIVE]...]]`

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use testenv::{ATTACH_ENV, ContainerCluster, ContainerClusterOptions, ControlPlane, Error, Signer};
use tokio::signal::unix::{SignalKind, signal};

/// Where the kubeconfig goes unless `--kubeconfig-out` says otherwise.
const DEFAULT_KUBECONFIG_OUT: &str = "target/local-cluster/kubeconfig";

/// The node's name with `--with-node`.
const NODE_NAME: &str = "node-1.nodes.example.com";

const USAGE: &str = "usage: local-cluster [--kubeconfig-out PATH] [--with-node [--image ARCHIVE]...]";

/// What the command line asks for.
struct Args {
    kubeconfig_out: PathBuf,
    /// `Some(images)` with `--with-node`.
    node: Option<Vec<PathBuf>>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let run = match args.node {
        None => run(&args.kubeconfig_out).await,
        Some(images) => run_with_node(&args.kubeconfig_out, images).await,
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("local-cluster: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The command line arguments.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = PathBuf::from(DEFAULT_KUBECONFIG_OUT);
    let (mut with_node, mut images) = (false, Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kubeconfig-out" => {
                out = args.next().map(PathBuf::from).ok_or("--kubeconfig-out needs a path")?;
            }
            "--with-node" => with_node = true,
            "--image" => images.push(args.next().map(PathBuf::from).ok_or("--image needs an archive")?),
            "-h" | "--help" => {
                return Err("local-cluster: a local etcd + kube-apiserver + CSR signer".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !images.is_empty() && !with_node {
        return Err("--image needs --with-node".into());
    }
    Ok(Args { kubeconfig_out: out, node: with_node.then_some(images) })
}

async fn run(out: &Path) -> Result<(), Error> {
    let control_plane = ControlPlane::start().await?;
    let signer = control_plane.start_signer().await?;
    let out = write_kubeconfig(control_plane.kubeconfig_path(), out)?;
    print_usage(&control_plane, &signer, &out).await;
    wait_for_stop().await?;
    drop(signer);
    drop(control_plane);
    std::fs::remove_file(&out).map_err(Error::io(format!("removing {}", out.display())))
}

/// Writes `kubeconfig` to `out` (creating its directory); returns `out` made absolute.
fn write_kubeconfig(kubeconfig: &Path, out: &Path) -> Result<PathBuf, Error> {
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(Error::io(format!("creating {}", parent.display())))?;
    }
    std::fs::copy(kubeconfig, out).map_err(Error::io(format!("writing {}", out.display())))?;
    std::path::absolute(out).map_err(Error::io("resolving the kubeconfig path"))
}

/// Until SIGTERM or Ctrl-C.
async fn wait_for_stop() -> Result<(), Error> {
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::io("watching SIGTERM"))?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map_err(Error::io("watching Ctrl-C"))?,
        _ = terminate.recv() => {}
    }
    println!("stopping");
    Ok(())
}

/// `--with-node`: a [`ContainerCluster`] importing `images`, until stopped.
async fn run_with_node(out: &Path, images: Vec<PathBuf>) -> Result<(), Error> {
    let cluster = ContainerCluster::start(ContainerClusterOptions::new(NODE_NAME, images)).await?;
    cluster.wait_node_ready().await?;
    let out = write_kubeconfig(cluster.control_plane().kubeconfig_path(), out)?;
    let node = cluster.node();
    println!("cluster ready: node {} at {} (pods in 203.0.113.0/24)", node.node_name(), node.node_ip());
    println!("node cgroup: {}", node.cgroup_name());
    println!("node directory: {}", node.dir().display());
    println!("node process: {}", node.process_id());
    println!("admin kubeconfig: {}", out.display());
    println!();
    println!("try it (scripts/build-image.sh made the image given with --image):");
    println!(
        "  helm install approver charts/node-csr-approver --kubeconfig {} --namespace csr-system \\",
        out.display()
    );
    println!("    --create-namespace --wait --set-literal 'providerRegex=^[a-z0-9-]+\\.nodes\\.example\\.com$' \\");
    println!("    --set 'providerIpPrefixes={{198.51.100.0/24}}'");
    println!();
    println!("Ctrl-C stops everything.");
    wait_for_stop().await?;
    drop(cluster);
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
