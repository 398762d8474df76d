//! `--audit-load NODES`: the CSR path's latency with the periodic audit scanning and without.
//!
//! One control plane holds NODES Nodes whose kubelets accept the connection and never answer (one
//! listener of the bench on the host end of a node network's link is every Node's InternalIP and
//! kubelet port: a fleet of hung kubelets). The release binary runs [`ROUNDS`] times in each of
//! four [`MODES`]: without the audit; with it (`--audit-period=1s`, [`DIAL_TIMEOUT`],
//! [`DIAL_CONCURRENCY`]: scans back to back, the first queueing an Event for each Node, as the
//! first scan of a new leader does); with it and `--events=none` (the dials without the Events);
//! and with it at the default dial timeout and concurrency. The modes take turns in a rotating order; each run creates [`CSRS`] CSRs at a
//! steady rate once it is ready (and, with the audit, its first scan has started) and measures each
//! one's latency from the create response to the decision the bench's watch sees, as the live phase
//! does. Reported: each run's percentiles and peak resident memory, and the ratio of each mode's
//! median p99 to the median p99 without the audit. Needs root (a network namespace).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use testenv::{AddressFamilies, ControlPlane, NodeNetwork};
use testkit::approver::Process;
use tokio::io::AsyncReadExt;

use crate::cluster::{Decisions, create_as_node};
use crate::csrs::{NODE_PREFIXES, NodeRequest};
use crate::report::Latency;

/// Runs of each mode.
pub const ROUNDS: usize = 3;
/// The modes: no audit, the audit, the audit with `--events=none`, the audit with the default
/// dial timeout and concurrency.
pub const MODES: [&str; 4] = ["off", "on", "on-events-none", "on-default-dials"];
/// CSRs created in each run.
pub const CSRS: usize = 400;
/// CSRs created per second unless `--live-rate` says otherwise.
pub const RATE: f64 = 20.0;
/// `--audit-dial-timeout` of the runs with the audit.
pub const DIAL_TIMEOUT: &str = "250ms";
/// `--audit-dial-concurrency` of the runs with the audit.
pub const DIAL_CONCURRENCY: &str = "256";
/// How long after readiness the CSRs start: the first scan starts 2 s after the CSR watch synced.
const SCAN_STARTED: Duration = Duration::from_secs(4);

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// One of [`MODES`].
    pub mode: &'static str,
    /// Latency from create to decision, in milliseconds.
    pub latency_ms: Latency,
    /// The approver's peak resident memory (`VmHWM`), MiB.
    pub peak_mib: f64,
}

/// The figures of `--audit-load`.
#[derive(Debug, Clone, Serialize)]
pub struct AuditLoad {
    /// Nodes, none of whose kubelets answers.
    pub nodes: usize,
    /// CSRs per second in each run.
    pub rate: f64,
    /// Every run, in the order they ran.
    pub runs: Vec<Run>,
    /// Each mode's median p99 over the median p99 without the audit.
    pub p99_ratios: Vec<(&'static str, f64)>,
    /// Each mode's median peak RSS minus the median without the audit, MiB.
    pub peak_mib_differences: Vec<(&'static str, f64)>,
}

/// Runs the measurement, prints it and writes it as JSON to `out`.
pub async fn main(nodes: usize, rate: Option<f64>, out: &Path) -> ExitCode {
    match measure(nodes, rate.unwrap_or(RATE)).await.and_then(|load| {
        println!("{}", table(&load));
        std::fs::write(out, serde_json::to_string_pretty(&load)? + "\n").with_context(|| out.display().to_string())
    }) {
        Ok(()) => {
            println!("figures written to {}", out.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The runs, with and without the audit, against one cluster of `nodes` hung kubelets.
pub async fn measure(nodes: usize, rate: f64) -> Result<AuditLoad> {
    let binary = tokio::task::spawn_blocking(|| testkit::approver::binary(true)).await??;
    let network = tokio::task::spawn_blocking(|| NodeNetwork::create(AddressFamilies::Ipv4)).await??;
    let control_plane = ControlPlane::start().await.context("starting etcd + kube-apiserver")?;
    let admin = control_plane.admin_client().await?;
    let host = network.host_addresses().first().copied().context("the node network has no address")?;
    let kubelet = silent_kubelets(SocketAddr::new(host, 0)).await?;
    let started = Instant::now();
    let api = Api::<Node>::all(admin.clone());
    futures::stream::iter(0..nodes)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &node(i, kubelet)?).await.map(drop).map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!("audit-load: {nodes} Nodes created in {:.1}s", started.elapsed().as_secs_f64());
    let requests = tokio::task::spawn_blocking(|| crate::csrs::generate(CSRS)).await??;
    let logs = tempfile::tempdir()?;
    let prefixes = format!("{NODE_PREFIXES},{host}/32");
    let mut runs = Vec::new();
    for round in 0..ROUNDS {
        // Rotating which goes first, so that none always meets a warmer apiserver.
        for mode in (0..MODES.len()).map(|i| MODES[(i + round) % MODES.len()]) {
            let name = format!("{mode}-{round}");
            let mut command =
                testkit::approver::command(&binary, control_plane.kubeconfig_path(), testkit::policy::REGEX, &prefixes);
            command.args(["--bypass-dns-resolution", "--log-format", "json", "--log-level", "info"]);
            if mode != "off" {
                command.arg("--audit-period=1s").arg(format!("--kubelet-port={}", kubelet.port()));
            }
            if mode == "on" || mode == "on-events-none" {
                command.arg(format!("--audit-dial-timeout={DIAL_TIMEOUT}"));
                command.arg(format!("--audit-dial-concurrency={DIAL_CONCURRENCY}"));
            }
            if mode == "on-events-none" {
                command.arg("--events=none");
            }
            let run =
                one_run(&admin, command, &logs.path().join(format!("{name}.log")), &requests, &name, rate).await?;
            eprintln!(
                "audit-load: {name}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, peak {:.1} MiB",
                run.latency_ms.p50, run.latency_ms.p99, run.latency_ms.max, run.peak_mib
            );
            runs.push(Run { mode, ..run });
        }
    }
    let median = |mode: &str, of: fn(&Run) -> f64| {
        let mut values: Vec<f64> = runs.iter().filter(|run| run.mode == mode).map(of).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let p99 = |run: &Run| run.latency_ms.p99;
    let peak = |run: &Run| run.peak_mib;
    Ok(AuditLoad {
        nodes,
        rate,
        p99_ratios: MODES[1..]
            .iter()
            .map(|mode| (*mode, median(mode, p99) / median("off", p99).max(f64::MIN_POSITIVE)))
            .collect(),
        peak_mib_differences: MODES[1..].iter().map(|mode| (*mode, median(mode, peak) - median("off", peak))).collect(),
        runs,
    })
}

/// One approver run: ready, then the CSRs at `rate`; each one's latency and the peak memory.
async fn one_run(
    admin: &kube::Client,
    command: std::process::Command,
    log: &Path,
    requests: &[NodeRequest],
    name: &str,
    rate: f64,
) -> Result<Run> {
    let mut decisions = Decisions::watch(admin);
    decisions.wait_synced(Duration::from_secs(60)).await?;
    let mut process = Process::spawn(command, log)?;
    process.wait_ready(Duration::from_secs(60)).await?;
    tokio::time::sleep(SCAN_STARTED).await;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let names: Vec<String> = (0..requests.len()).map(|i| format!("audit-load-{name}-{i}")).collect();
    let created: Vec<Instant> = futures::stream::iter(requests.iter().zip(&names).enumerate())
        .map(|(i, (request, csr))| async move {
            tokio::time::sleep_until((started + interval.saturating_mul(i as u32)).into()).await;
            create_as_node(admin, csr, request).await?;
            Ok::<_, anyhow::Error>(Instant::now())
        })
        .buffered(64)
        .try_collect()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let latencies = loop {
        let seen = decisions.snapshot();
        let latencies: Vec<Duration> = names
            .iter()
            .zip(&created)
            .filter_map(|(csr, at)| seen.get(csr).map(|s| s.at.saturating_duration_since(*at)))
            .collect();
        if latencies.len() == names.len() {
            break latencies;
        }
        if Instant::now() > deadline {
            bail!("{name}: {} of {} CSRs decided", latencies.len(), names.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let peak_kib = peak_kib(process.pid())?;
    process.stop(Duration::from_secs(10)).await?;
    Ok(Run { mode: "off", latency_ms: Latency::of(latencies), peak_mib: peak_kib as f64 / 1024.0 })
}

/// Accepts every connection at `at` and never writes: each is closed only by the dialler.
async fn silent_kubelets(at: SocketAddr) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(at).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut sink = [0_u8; 1024];
                while matches!(tcp.read(&mut sink).await, Ok(read) if read > 0) {}
            });
        }
    });
    Ok(bound)
}

/// Node `i`, its kubelet at `kubelet`.
fn node(i: usize, kubelet: SocketAddr) -> Result<Node> {
    let ip: IpAddr = kubelet.ip();
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("hung-{i:06}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip.to_string()}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port()}},
        },
    }))?)
}

/// `VmHWM` of `pid`, KiB.
fn peak_kib(pid: u32) -> Result<u64> {
    let process = procfs::process::Process::new(i32::try_from(pid)?)?;
    process.status()?.vmhwm.context("no VmHWM")
}

/// The runs as a table.
fn table(load: &AuditLoad) -> String {
    let mut lines = vec![format!(
        "audit load: {} hung kubelets, {CSRS} CSRs at {}/s per run; audit runs: --audit-period=1s, on and \
         on-events-none with --audit-dial-timeout={DIAL_TIMEOUT} --audit-dial-concurrency={DIAL_CONCURRENCY}",
        load.nodes, load.rate
    )];
    lines.push(format!("{:<16} {:>9} {:>9} {:>9} {:>10}", "audit", "p50 ms", "p99 ms", "max ms", "peak MiB"));
    for run in &load.runs {
        let latency = &run.latency_ms;
        lines.push(format!(
            "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
            run.mode, latency.p50, latency.p99, latency.max, run.peak_mib
        ));
    }
    for ((mode, ratio), (_, difference)) in load.p99_ratios.iter().zip(&load.peak_mib_differences) {
        lines.push(format!("median p99 {mode} / off: {ratio:.2}; median peak RSS {mode} - off: {difference:.1} MiB"));
    }
    lines.join("\n")
}
