//! The burst benchmark of node-csr-approver (dev-only; see BENCHMARKS.md).
//!
//! [`run`] starts a loopback DNS server holding one A record per node and, for each phase, a fresh
//! etcd + kube-apiserver (testenv), then measures:
//!
//! - **limit**: a bare kube-rs client in this process writes the Approved condition of N pending
//!   kubelet-serving CSRs through the `approval` subresource (a merge patch carrying the
//!   resourceVersion, exactly as the controller does), `concurrency` at a time: `T_limit`. The
//!   same again with one Event created per CSR after its write, as the controller records them:
//!   `T_limit+events`.
//! - **catch-up**: N CSRs created while no controller runs, then the real release binary started
//!   as a child process; `T_catchup` is the time from spawn to the last decision the bench's own
//!   watch sees. The headline is `T_catchup / T_limit`.
//! - **live**: the controller running and ready, N CSRs created at a steady rate; per-CSR latency
//!   from the create response to the decision seen in the watch.
//! - **flood**: one node's N CSRs waiting when the controller starts, then 100 other nodes
//!   creating one CSR each while it decides them; the others' latency ([`flood`]).
//!
//! - **storm** (`--storm N`, off by default): N nodes' CSRs and a tenth of them twice more, all
//!   pending when the controller starts, the apiserver restarted once meanwhile ([`storm`]); with
//!   `--storm-nodes M`, M Node objects created first ([`nodes`]).
//!
//! In catch-up, live and the storm the apiserver's own counters give the approver's requests and
//! response bytes per decision ([`apiserver`]).
//!
//! Catch-up and live run with DNS checks and with `--bypass-dns-resolution`, for ours and then,
//! when it is built and the bench runs as root, for the Go kubelet-csr-approver ([`peer`]) on the
//! same DNS server. The controllers' resident memory (`VmRSS`, every 100 ms) and CPU time
//! (`utime + stime`) come from `/proc`.

pub mod apiserver;
pub mod approver;
pub mod audit_load;
pub mod cluster;
pub mod csrs;
pub mod flood;
pub mod hostile;
pub mod nodes;
pub mod peer;
mod phases;
pub mod report;
mod setup;
pub mod storm;
mod table;
pub mod targets;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use testdns::{DnsServer, Records};

use crate::approver::Program;
use crate::peer::{PEER_DNS, Peer};

pub use report::Report;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// CSRs (and nodes) per phase.
    pub n: usize,
    /// The flooding node's CSRs in the flood phase.
    pub flood_csrs: usize,
    /// Concurrency of the controller (`--concurrency`) and of the bare client in the limit phase.
    pub concurrency: u16,
    /// CSRs created per second in the live phase; `None`: a quarter of the approval rate measured in the
    /// limit phase.
    pub live_rate: Option<f64>,
    /// Concurrent creates while setting up (untimed).
    pub create_concurrency: usize,
    /// Build and run the release binary (the benchmark) rather than the debug one (the smoke test).
    pub release: bool,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// The Go kubelet-csr-approver's binary, to run beside ours; `None`: ours only.
    pub peer: Option<PathBuf>,
    /// Run the live phases (off: limit and catch-up only, e.g. to profile a catch-up).
    pub live: bool,
    /// The storm's nodes; `None`: no storm.
    pub storm: Option<usize>,
    /// Node objects created before the storm's CSRs (at least the storm's nodes), ours then run
    /// with `--verify-node-addresses` (and a rule reading `node` when `storm_node_rule`); `None`:
    /// no Nodes.
    pub storm_nodes: Option<usize>,
    /// With `storm_nodes`, ours runs with a rule that reads `node` too.
    pub storm_node_rule: bool,
    /// Flags given to ours in every phase (not to the peer).
    pub ours_args: Vec<String>,
    /// Restart the apiserver once during the storm, so the controller's watch relists.
    pub storm_relist: bool,
    /// Run the storm alone (no limit, catch-up, live, hostile or flood phase).
    pub only_storm: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            n: 2000,
            flood_csrs: 2000,
            concurrency: 32,
            live_rate: None,
            create_concurrency: 32,
            release: true,
            verbose: true,
            peer: None,
            live: true,
            storm: None,
            storm_nodes: None,
            storm_node_rule: true,
            ours_args: Vec::new(),
            storm_relist: true,
            only_storm: false,
        }
    }
}

/// Runs every phase and returns the figures.
pub async fn run(options: &Options) -> Result<Report> {
    if let (Some(storm), Some(nodes)) = (options.storm, options.storm_nodes) {
        anyhow::ensure!(nodes >= storm, "--storm-nodes {nodes}: every one of the storm's {storm} nodes needs its Node");
    }
    let started = Instant::now();
    let progress = Progress { verbose: options.verbose, started };
    progress.say(format_args!("building node-csr-approver (release: {})", options.release));
    let binary = tokio::task::spawn_blocking({
        let release = options.release;
        move || testkit::approver::binary(release)
    })
    .await??;
    let n = if options.only_storm { 0 } else { options.n };
    progress.say(format_args!("generating {n} keys and PKCS#10 requests"));
    let requests = tokio::task::spawn_blocking(move || csrs::generate(n)).await??;
    let storm = match options.storm {
        Some(nodes) => {
            let started = Instant::now();
            let storm = tokio::task::spawn_blocking(move || storm_requests(nodes)).await??;
            progress.say(format_args!(
                "storm: {} keys and requests generated in {:.1}s",
                storm.total(),
                started.elapsed().as_secs_f64()
            ));
            Some(storm)
        }
        None => None,
    };
    let mut records = Records::new();
    let storm_nodes = storm.as_ref().map(|s| s.newest.as_slice()).unwrap_or_default();
    // A node of both has the same name and address in each: one record.
    for request in requests.iter().chain(storm_nodes.iter().skip(requests.len())) {
        records = records.a(&request.dns, request.ip);
    }
    let logs = tempfile::Builder::new().prefix("bench-").tempdir()?;
    let peer = match &options.peer {
        Some(binary) => Some((Program::Peer(Peer::new(binary.clone(), logs.path())?), peer_version(binary)?)),
        None => None,
    };
    // The peer reads its DNS server from resolv.conf, so only port 53; ours is told, and uses the
    // same server when the peer runs.
    let dns = match peer {
        Some(_) => DnsServer::start_on_thread_at(records, PEER_DNS)
            .with_context(|| format!("starting the DNS server on {PEER_DNS} for the peer"))?,
        None => DnsServer::start_on_thread(records).context("starting the DNS server")?,
    };
    let bench = setup::Bench {
        options: options.clone(),
        ours: Program::Ours(binary.clone()),
        peer,
        requests,
        storm,
        dns: dns.addr(),
        logs: logs.path().to_owned(),
        progress,
    };
    let report = phases::all(&bench).await?;
    progress.say(format_args!("done; {} DNS queries answered", dns.total_queries()));
    Ok(Report { binary_bytes: std::fs::metadata(&binary).map(|m| m.len()).unwrap_or(0), ..report })
}

/// The storm's requests: one for each of `nodes` nodes, and two older ones for every
/// [`storm::DUPLICATE_EVERY`]th node (generation 0 of each, then generation 1).
fn storm_requests(nodes: usize) -> Result<storm::StormRequests> {
    let newest = csrs::generate(nodes)?;
    let duplicated = storm::StormRequests::duplicated(nodes);
    let older = csrs::generate_nodes(&[duplicated.as_slice(), duplicated.as_slice()].concat())?;
    Ok(storm::StormRequests { newest, older })
}

/// The peer's release, from the name `scripts/build-peer.sh` gives its binary
/// (`kubelet-csr-approver-<version>`), else the file name.
fn peer_version(binary: &std::path::Path) -> Result<String> {
    let name = binary.file_name().and_then(|n| n.to_str()).context("the peer's binary has no file name")?;
    Ok(name.strip_prefix("kubelet-csr-approver-").unwrap_or(name).to_owned())
}

/// Progress reporting on stderr.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    verbose: bool,
    started: Instant,
}

impl Progress {
    pub(crate) fn say(&self, what: std::fmt::Arguments<'_>) {
        if self.verbose {
            eprintln!("[{:>6.1}s] {what}", self.started.elapsed().as_secs_f64());
        }
    }
}

/// Where the JSON report goes by default.
pub fn default_out() -> PathBuf {
    PathBuf::from("bench.json")
}
