//! What every phase sets up: the shared [`Bench`], a fresh control plane and the controller's
//! [`Launch`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use kube::Client;
use testenv::ControlPlane;

use crate::Progress;
use crate::approver::{Launch, Program};
use crate::csrs::NodeRequest;

/// Everything the phases share.
pub(crate) struct Bench {
    pub(crate) options: crate::Options,
    pub(crate) ours: Program,
    /// The Go kubelet-csr-approver and its release, when it runs too.
    pub(crate) peer: Option<(Program, String)>,
    pub(crate) requests: Vec<NodeRequest>,
    /// The storm's CSRs, when it runs.
    pub(crate) storm: Option<crate::storm::StormRequests>,
    pub(crate) dns: SocketAddr,
    pub(crate) logs: PathBuf,
    pub(crate) progress: Progress,
}

/// A fresh etcd + kube-apiserver for `phase`, and its admin client.
pub(crate) async fn control_plane(bench: &Bench, phase: &str) -> Result<(ControlPlane, Client)> {
    let started = Instant::now();
    let control_plane = ControlPlane::start().await.context("starting etcd + kube-apiserver")?;
    let admin = control_plane.admin_client().await?;
    bench.progress.say(format_args!("{phase}: control plane up in {:.1}s", started.elapsed().as_secs_f64()));
    Ok((control_plane, admin))
}

/// How `program` runs in `phase` against the control plane of `kubeconfig`, logging to
/// `<phase>.log`.
pub(crate) fn launch(
    bench: &Bench,
    program: &Program,
    phase: &str,
    bypass_dns: bool,
    kubeconfig: &std::path::Path,
) -> Launch {
    Launch {
        program: program.clone(),
        kubeconfig: kubeconfig.to_owned(),
        dns: bench.dns,
        concurrency: bench.options.concurrency,
        bypass_dns,
        events_all: false,
        extra_args: match program {
            Program::Ours(_) => bench.options.ours_args.clone(),
            Program::Peer(_) => Vec::new(),
        },
        log: bench.logs.join(format!("{phase}.log")),
    }
}
