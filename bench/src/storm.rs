//! The renewal storm (`--storm N`): N nodes' kubelet-serving CSRs pending together, with
//! duplicates, all created before the controller starts; then the controller started against them,
//! and the apiserver restarted once while it catches up, so its watch relists.
//!
//! Every [`DUPLICATE_EVERY`]th node has filed three CSRs (its kubelet gave up on two): the two
//! older ones, `bench-storm-0-node-<i>` and then `bench-storm-1-node-<i>`, are created first, each
//! generation at least a second after the one before, and `bench-storm-2-node-<i>` of every node
//! after that. Creation time (one-second resolution) and name then order a node's CSRs alike.
//!
//! With `--storm-nodes M` the Node objects come first ([`crate::nodes`]) and ours runs with
//! `--verify-node-addresses` and a rule that reads `node`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Serialize;

use crate::apiserver::{ApiserverCost, cost_since, scrape};
use crate::approver::{Approver, Launch, SAMPLE_PERIOD};
use crate::cluster::{Decisions, create_as_node};
use crate::csrs::NodeRequest;
use crate::nodes;
use crate::phases::{approve, decide_limit};
use crate::report::{cpu_ms_per_decision, mib};
use crate::setup::{Bench, control_plane, launch};

/// One node in this many has three CSRs pending (10 %).
pub const DUPLICATE_EVERY: usize = 10;

/// The apiserver is restarted once this share of the storm's CSRs is decided.
const RELIST_AT: f64 = 1.0 / 3.0;

/// Between creating one generation of CSRs and the next: more than the creation time's resolution.
const GENERATION_GAP: Duration = Duration::from_millis(1100);

/// How long the controller may take to list the storm and say ready.
const READY_LIMIT: Duration = Duration::from_secs(600);

/// The storm's requests: one per node, and two older ones per duplicated node.
#[derive(Debug, Clone, Default)]
pub struct StormRequests {
    /// The newest CSR of every node, node `i` at `i`.
    pub newest: Vec<NodeRequest>,
    /// The older CSRs: generation 0 of every duplicated node, then generation 1.
    pub older: Vec<NodeRequest>,
}

impl StormRequests {
    /// The nodes (indices) that file three CSRs among `0..nodes`.
    pub fn duplicated(nodes: usize) -> Vec<usize> {
        (0..nodes).step_by(DUPLICATE_EVERY).collect()
    }

    /// Every CSR of the storm.
    pub fn total(&self) -> usize {
        self.newest.len() + self.older.len()
    }

    /// The generations in creation order.
    fn generations(&self) -> [&[NodeRequest]; 3] {
        let (first, second) = self.older.split_at(self.older.len() / 2);
        [first, second, &self.newest]
    }
}

/// The name of `node`'s CSR of `generation`: a later generation's name is greater.
pub fn storm_csr_name(generation: usize, node: &str) -> String {
    format!("bench-storm-{generation}-{node}")
}

/// Creates the CSRs of `generation` as their nodes, `concurrency` at a time.
async fn create_generation(
    admin: &Client,
    generation: usize,
    requests: &[NodeRequest],
    concurrency: usize,
) -> Result<Vec<CertificateSigningRequest>> {
    futures::stream::iter(requests)
        .map(|request| async move { create_as_node(admin, &storm_csr_name(generation, &request.node), request).await })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await
}

/// The storm's figures (ours, DNS checks on).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Storm {
    /// Nodes, one newest CSR each.
    pub nodes: usize,
    /// Nodes with three CSRs.
    pub duplicated_nodes: usize,
    /// CSRs created: `nodes + 2 × duplicated_nodes`.
    pub csrs: usize,
    /// Creating every CSR of the storm (the gaps between generations included), s.
    pub create_seconds: f64,
    /// `T_limit` at the storm's size: the bare client writing the Approved condition of every one
    /// of its CSRs on a fresh control plane, as the limit phase does, s.
    pub limit_seconds: f64,
    /// Ready with an empty cluster, before any list, MiB.
    pub idle_mib: f64,
    /// Process spawn to `/readyz` 200 (its watch listed the storm), s.
    pub ready_seconds: f64,
    /// `T_catchup`: process spawn to the last decision seen, the apiserver's restart included, s.
    pub seconds: f64,
    /// `T_catchup / T_limit`.
    pub ratio: f64,
    /// The apiserver's restart (stopped until ready again), s; 0 when no relist was forced.
    pub outage_seconds: f64,
    /// `(T_catchup - outage) / T_limit`.
    pub ratio_without_outage: f64,
    /// Largest resident memory from spawn to the last decision, MiB.
    pub peak_mib: f64,
    /// Largest resident memory from spawn until the apiserver was stopped, MiB.
    pub peak_before_relist_mib: f64,
    /// Largest resident memory from the apiserver's stop to the last decision (the relist), MiB.
    pub relist_peak_mib: f64,
    /// 3 s after the last decision, MiB.
    pub after_mib: f64,
    /// CPU seconds from spawn until all was decided and settled.
    pub cpu_seconds: f64,
    /// CPU milliseconds per decision.
    pub cpu_ms_per_decision: f64,
    /// Counted from the apiserver once all was decided: Approved.
    pub approved: usize,
    /// Denied.
    pub denied: usize,
    /// Denied with reason `Superseded`.
    pub denied_superseded: usize,
    /// Neither (should be 0).
    pub pending: usize,
    /// The most approved CSRs of one node (1 when duplicates are not signed twice).
    pub approvals_per_node_max: usize,
    /// Nodes with more than one approved CSR.
    pub nodes_approved_more_than_once: usize,
    /// Nodes with no approved CSR.
    pub nodes_not_approved: usize,
    /// The Node objects created before the CSRs (`--storm-nodes`); `None`: none.
    pub node_objects: Option<nodes::Created>,
    /// What ours cost the apiserver from spawn to stop; `None` when the apiserver's counters
    /// restarted with it (the forced relist).
    pub apiserver: Option<ApiserverCost>,
}

/// Measures ours against a storm of `requests`: `T_limit` at its size and the idle memory on one
/// fresh control plane, then the storm on another, relisting once when `relist`.
pub(crate) async fn storm(bench: &Bench, requests: &StormRequests, relist: bool) -> Result<Storm> {
    let (limit_seconds, idle_kib) = limit_and_idle(bench, requests).await?;
    let phase = "storm";
    let (control_plane, admin) = control_plane(bench, phase).await?;
    let node_objects = match bench.options.storm_nodes {
        Some(n) => {
            let created = nodes::create(&admin, n, bench.options.create_concurrency).await?;
            bench.progress.say(format_args!(
                "{phase}: {n} Nodes of {} bytes created in {:.1}s ({:.0}/s)",
                created.node_json_bytes, created.seconds, created.per_second
            ));
            Some(nodes::Created { node_rule: bench.options.storm_node_rule, ..created })
        }
        None => None,
    };
    let started = Instant::now();
    for (i, generation) in requests.generations().into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(GENERATION_GAP).await;
        }
        create_generation(&admin, i, generation, bench.options.create_concurrency).await?;
        bench.progress.say(format_args!("{phase}: created {} CSRs of generation {i}", generation.len()));
    }
    let create_seconds = started.elapsed().as_secs_f64();
    let total = requests.total();
    bench.progress.say(format_args!("{phase}: {total} CSRs created in {create_seconds:.1}s"));
    let mut decisions = Decisions::watch(&admin);
    decisions.wait_synced(Duration::from_secs(600)).await?;

    let launch = storm_launch(bench, phase, control_plane.kubeconfig_path())?;
    let counters = scrape(&admin).await?;
    let mut approver = Approver::start(&launch)?;
    let ready = approver.wait_ready(READY_LIMIT).await?;
    bench.progress.say(format_args!("{phase}: ready after {:.1}s", ready.as_secs_f64()));
    let (relisted, outage) = if relist {
        decisions.wait_count((total as f64 * RELIST_AT) as usize, decide_limit(total)).await?;
        let (stopped, decided) = (Instant::now(), decisions.count());
        control_plane.restart_apiserver().await.context("restarting the apiserver")?;
        let outage = stopped.elapsed();
        bench.progress.say(format_args!(
            "{phase}: apiserver restarted at {decided} decisions seen, back after {:.1}s",
            outage.as_secs_f64()
        ));
        (Some(stopped), outage)
    } else {
        (None, Duration::ZERO)
    };
    decisions.wait_count(total, decide_limit(total)).await?;
    let last = decisions.snapshot().values().map(|s| s.at).max().unwrap_or_else(Instant::now);
    tokio::time::sleep(Duration::from_secs(3)).await;
    approver.check_alive()?;
    let spawned = approver.started();
    let relist_from = relisted.unwrap_or(last);
    let (peak, before, during) = (
        approver.peak_kib(spawned, last),
        approver.peak_kib(spawned, relist_from),
        relisted.map_or(0, |from| approver.peak_kib(from, last + SAMPLE_PERIOD)),
    );
    let after = approver.rss_now_kib();
    let cpu_seconds = approver.cpu_seconds().unwrap_or(0.0);
    approver.stop().await?;
    let apiserver = cost_since(&admin, &counters, total).await?;
    let counts = count(&admin).await?;
    let seconds = last.duration_since(spawned).as_secs_f64();
    let ratio = |s: f64| if limit_seconds > 0.0 { s / limit_seconds } else { 0.0 };
    let figures = Storm {
        nodes: requests.newest.len(),
        duplicated_nodes: requests.older.len() / 2,
        csrs: total,
        create_seconds,
        limit_seconds,
        idle_mib: mib(idle_kib),
        ready_seconds: ready.as_secs_f64(),
        seconds,
        ratio: ratio(seconds),
        outage_seconds: outage.as_secs_f64(),
        ratio_without_outage: ratio(seconds - outage_before(relisted, outage, last).as_secs_f64()),
        peak_mib: mib(peak),
        peak_before_relist_mib: mib(before),
        relist_peak_mib: mib(during),
        after_mib: mib(after),
        cpu_seconds,
        cpu_ms_per_decision: cpu_ms_per_decision(cpu_seconds, counts.approved + counts.denied),
        node_objects,
        apiserver,
        ..counts
    };
    bench.progress.say(format_args!(
        "{phase}: T_catchup = {seconds:.1}s ({:.2} x T_limit), peak {:.1} MiB (relist {:.1}), {} approved, {} denied",
        figures.ratio, figures.peak_mib, figures.relist_peak_mib, figures.approved, figures.denied
    ));
    Ok(figures)
}

/// How ours runs in the storm: with `--storm-nodes`, also `--verify-node-addresses` and, unless
/// `--storm-no-node-rule`, the rules file.
fn storm_launch(bench: &Bench, phase: &str, kubeconfig: &std::path::Path) -> Result<Launch> {
    let mut launch = launch(bench, &bench.ours, phase, false, kubeconfig);
    if bench.options.storm_nodes.is_some() {
        launch.extra_args.push("--verify-node-addresses".into());
        if bench.options.storm_node_rule {
            let rules = nodes::write_rules(&bench.logs)?;
            launch.extra_args.push(format!("--rules={}", rules.display()));
        }
    }
    Ok(launch)
}

/// The part of the apiserver's outage (from `stopped`, lasting `outage`) before the last
/// decision `last`: none when every CSR was decided before the restart took effect.
fn outage_before(stopped: Option<Instant>, outage: Duration, last: Instant) -> Duration {
    stopped.map_or(Duration::ZERO, |stopped| last.saturating_duration_since(stopped).min(outage))
}

/// `T_limit` at the storm's size and the controller's idle memory, on one fresh control plane:
/// the controller started against it empty (ready, 1 s, `VmRSS`), stopped; then every CSR of the
/// storm created and approved by the bare client, `--concurrency` at a time.
async fn limit_and_idle(bench: &Bench, requests: &StormRequests) -> Result<(f64, u64)> {
    let phase = "storm-limit";
    let (control_plane, admin) = control_plane(bench, phase).await?;
    let launch = storm_launch(bench, "storm-idle", control_plane.kubeconfig_path())?;
    let mut approver = Approver::start(&launch)?;
    approver.wait_ready(Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = approver.rss_now_kib();
    approver.stop().await?;

    let mut created = Vec::with_capacity(requests.total());
    for (i, generation) in requests.generations().into_iter().enumerate() {
        created.extend(create_generation(&admin, i, generation, bench.options.create_concurrency).await?);
    }
    let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let started = Instant::now();
    futures::stream::iter(created.iter())
        .map(|csr| approve(&api, csr))
        .buffer_unordered(usize::from(bench.options.concurrency.max(1)))
        .try_collect::<()>()
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    bench.progress.say(format_args!("{phase}: T_limit = {seconds:.2}s for {} CSRs", created.len()));
    Ok((seconds, idle))
}

/// Lists every CSR from the apiserver, a page at a time, and counts the decisions and the
/// approvals per requesting node.
async fn count(admin: &Client) -> Result<Storm> {
    let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let mut params = ListParams::default().limit(5000);
    let mut counts = Storm::default();
    let mut approvals: HashMap<String, usize> = HashMap::new();
    loop {
        let page = api.list(&params).await.context("listing the storm's CSRs")?;
        for csr in &page.items {
            let node = csr.spec.username.clone().unwrap_or_default();
            let conditions = csr.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
            let approvals = approvals.entry(node).or_default();
            if conditions.iter().any(|c| c.type_ == "Approved") {
                counts.approved += 1;
                *approvals += 1;
            } else if let Some(denied) = conditions.iter().find(|c| c.type_ == "Denied") {
                counts.denied += 1;
                counts.denied_superseded += usize::from(denied.reason.as_deref() == Some("Superseded"));
            } else {
                counts.pending += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    counts.approvals_per_node_max = approvals.values().copied().max().unwrap_or(0);
    counts.nodes_approved_more_than_once = approvals.values().filter(|&&a| a > 1).count();
    counts.nodes_not_approved = approvals.values().filter(|&&a| a == 0).count();
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_in_ten_is_duplicated_and_generations_keep_creation_order() {
        assert_eq!(StormRequests::duplicated(25), [0, 10, 20]);
        assert_eq!(StormRequests::duplicated(130_000).len(), 13_000);
        let node = |i: usize| NodeRequest {
            node: format!("node-{i}"),
            dns: String::new(),
            ip: crate::csrs::node_ip(i),
            pem: String::new(),
        };
        let requests =
            StormRequests { newest: (0..25).map(node).collect(), older: [0, 10, 20, 0, 10, 20].map(node).to_vec() };
        let generations = requests.generations();
        assert_eq!(requests.total(), 31);
        assert_eq!(generations.map(<[_]>::len), [3, 3, 25]);
        assert_eq!(generations[1][2].node, "node-20");
        // A node's later generation has the greater name, as it has the later creation time.
        let name = |generation: usize, i: usize| storm_csr_name(generation, &generations[generation][i].node);
        assert_eq!(name(0, 2), "bench-storm-0-node-20");
        assert!(name(0, 2) < name(1, 2) && name(1, 2) < name(2, 20));
    }
}
