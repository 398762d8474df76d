//! Fairness under a flood: one node's N CSRs wait when the controller starts, and while it works
//! through them up to 100 other nodes create one CSR each. What counts is how long those others
//! wait: with turns shared between requesting nodes, a flood delays them by about one reconcile,
//! not by its whole backlog.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, TryStreamExt};

use crate::approver::{Approver, Program};
use crate::cluster::{Decisions, create_all, create_as_node, csr_name};
use crate::phases::decide_limit;
use crate::report::{Flood, Latency, cpu_ms_per_decision, mib};
use crate::setup::{Bench, control_plane, launch};

/// Other nodes, one CSR each, created during the flood.
pub const OTHER_NODES: usize = 100;

/// The others are created this far apart, from the moment the controller is ready.
const OTHERS_INTERVAL: Duration = Duration::from_millis(20);

/// Measures `program` with DNS checks on: the flood's CSRs (`--flood-csrs`) are all the first
/// request's (one node), the others are requests 1..=100.
pub(crate) async fn flood(bench: &Bench, program: &Program) -> Result<Flood> {
    let phase = "flood";
    let Some((flooder, others)) = bench.requests.split_first() else { return Ok(Flood::default()) };
    let others = &others[..others.len().min(OTHER_NODES)];
    ensure!(!others.is_empty(), "the flood phase needs at least two nodes");
    let (control_plane, admin) = control_plane(bench, phase).await?;
    let n = bench.options.flood_csrs;
    let flood = vec![flooder.clone(); n];
    let started = Instant::now();
    create_all(&admin, phase, &flood, bench.options.create_concurrency).await?;
    bench.progress.say(format_args!(
        "{phase}: created {n} CSRs as {} in {:.1}s",
        flooder.node,
        started.elapsed().as_secs_f64()
    ));
    let mut decisions = Decisions::watch(&admin);
    decisions.wait_synced(Duration::from_secs(60)).await?;

    let launch = launch(bench, program, phase, false, control_plane.kubeconfig_path());
    let mut approver = Approver::start(&launch)?;
    approver.wait_ready(Duration::from_secs(120)).await?;
    let ready = Instant::now();
    let admin = &admin;
    let created: Vec<(String, Instant)> = futures::stream::iter(others.iter().enumerate())
        .map(|(i, request)| async move {
            tokio::time::sleep_until((ready + OTHERS_INTERVAL.saturating_mul(i as u32)).into()).await;
            let name = csr_name("flood-other", i);
            create_as_node(admin, &name, request).await?;
            Ok::<_, anyhow::Error>((name, Instant::now()))
        })
        .buffer_unordered(OTHER_NODES)
        .try_collect()
        .await?;
    let total = n + created.len();
    decisions.wait_count(total, decide_limit(total)).await?;
    let seen = decisions.snapshot();
    let flood_done = seen
        .iter()
        .filter(|(name, _)| !name.starts_with("bench-flood-other-"))
        .map(|(_, s)| s.at)
        .max()
        .unwrap_or(ready);
    let latencies: Vec<_> =
        created.iter().filter_map(|(name, at)| seen.get(name).map(|s| s.at.saturating_duration_since(*at))).collect();
    let others_done_before_flood =
        created.iter().filter(|(name, _)| seen.get(name).is_some_and(|s| s.at < flood_done)).count();
    let last = seen.values().map(|s| s.at).max().unwrap_or(ready);
    let peak_mib = mib(approver.peak_kib(approver.started(), last));
    let cpu_seconds = approver.cpu_seconds().unwrap_or(0.0);
    approver.stop().await?;
    let latency_ms = Latency::of(latencies);
    let seconds = flood_done.duration_since(ready).as_secs_f64();
    bench.progress.say(format_args!(
        "{phase}: {n} CSRs of one node decided {seconds:.2}s after ready; {} others: p50 {:.1} ms, p99 {:.1} ms",
        created.len(),
        latency_ms.p50,
        latency_ms.p99
    ));
    Ok(Flood {
        flood_csrs: n,
        other_csrs: created.len(),
        flood_seconds: seconds,
        others_latency_ms: latency_ms,
        others_decided_before_flood: others_done_before_flood,
        cpu_ms_per_decision: cpu_ms_per_decision(cpu_seconds, total),
        peak_mib,
    })
}
