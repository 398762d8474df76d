//! The periodic audit (`--audit-period`): the scan of `audit` (every Node's kubelet dialled where
//! serving renewal would dial it, its certificate judged), run by the replica that writes, one
//! scan at a time, the next a period after the last ended. Each scan sets the audit's metrics and
//! tells each Node whose state changed (an Event on the Node, as `--events` says). A scan is
//! dropped at once when this replica stops writing, and the task ends with the controller.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::NodeAudit;
use super::flags::{AuditSchedule, DIAL_CONCURRENCY};
use super::metrics::{AuditMetrics, AuditedNode};
use super::scan::{Judge, ScanSettings};
use super::states::StateMemory;
use crate::events::{Events, NodeChange};
use crate::kubelet_tls::DIAL_LIMIT;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kubelet_endpoint::dial_targets;
use crate::kubernetes::leader::Leadership;
use crate::kubernetes::node_object::NodeObject;
use crate::policy::{ClusterView, KubeletDialRules, PolicyConfig, Resolver};

/// How long after the CSR watch synced the first scan starts: readiness and the first pass over
/// the CSRs come first.
const FIRST_SCAN_DELAY: Duration = Duration::from_secs(2);

/// How often, between scans and during one, whether this replica writes is looked at.
const LEADERSHIP_POLL: Duration = Duration::from_millis(250);

/// What the periodic audit uses of the application it runs in (the controller's shared state):
/// the policy with its ports, so a scan judges as a reconcile does; whether this replica writes;
/// and where a scan is reported. The audit names nothing of the application.
pub(crate) trait Host: Send + Sync + 'static {
    /// The policy's DNS port.
    type Resolver: Resolver;
    /// The policy's cluster port.
    type Cluster: ClusterView;
    /// Today's policy.
    fn policy(&self) -> &PolicyConfig;
    /// The DNS port.
    fn resolver(&self) -> &Self::Resolver;
    /// The cluster port.
    fn cluster(&self) -> &Self::Cluster;
    /// Whether this replica may write.
    fn leadership(&self) -> &Leadership;
    /// Where a change of a Node's state is published.
    fn events(&self) -> &Events;
    /// Where the scans are counted.
    fn metrics(&self) -> &AuditMetrics;
    /// Where what the list of Nodes cannot decode is reported.
    fn skipped(&self) -> &Skipped;
    /// The client the Nodes are listed with.
    fn client(&self) -> kube::Client;
}

/// Scans on `schedule` while this replica writes, from [`FIRST_SCAN_DELAY`] on; runs until dropped.
pub(crate) async fn run<H: Host>(ctx: Arc<H>, schedule: AuditSchedule) {
    ctx.metrics().enable(schedule.period, schedule.node_metrics);
    let nodes = kube::Api::<Decoded<NodeObject>>::all(ctx.client());
    let skipped = ctx.skipped().clone();
    let mut memory = StateMemory::default();
    let earliest = Instant::now() + FIRST_SCAN_DELAY;
    let mut due = earliest;
    let mut writing = false;
    loop {
        let now = Instant::now();
        match (writing, ctx.leadership().is_leader()) {
            (true, false) => {
                writing = false;
                stop_telling(ctx.as_ref(), &mut memory, "this replica stopped writing");
            }
            // A replica that starts writing scans at once: until then the metrics say nothing.
            (false, true) => {
                writing = true;
                due = due.min(now).max(earliest);
            }
            _ => {}
        }
        if !writing || now < due {
            let wait = if writing { LEADERSHIP_POLL.min(due - now) } else { LEADERSHIP_POLL };
            tokio::time::sleep(wait).await;
            continue;
        }
        tokio::select! {
            scanned = scan(ctx.as_ref(), &schedule, &nodes, &skipped) => match scanned {
                Ok((reports, uids)) if ctx.leadership().is_leader() => {
                    report(ctx.as_ref(), &mut memory, &reports, &uids, now.elapsed()).await;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "periodic audit: listing the Nodes; next scan in a period"),
            },
            () = stops_writing(ctx.as_ref()) => {}
        }
        due = Instant::now() + schedule.period;
    }
}

/// Forgets every Node's state and clears the metrics: another replica scans and tells now.
fn stop_telling<H: Host>(ctx: &H, memory: &mut StateMemory, why: &str) {
    memory.forget();
    ctx.metrics().clear();
    tracing::info!("periodic audit paused: {why}");
}

/// Resolves when this replica stops writing.
async fn stops_writing<H: Host>(ctx: &H) {
    while ctx.leadership().is_leader() {
        tokio::time::sleep(LEADERSHIP_POLL).await;
    }
}

/// Every Node's audit, and the uid of each Node listed.
async fn scan<H: Host>(
    ctx: &H,
    schedule: &AuditSchedule,
    nodes: &kube::Api<Decoded<NodeObject>>,
    skipped: &Skipped,
) -> Result<(Vec<NodeAudit>, HashMap<String, String>), kube::Error> {
    let rules = KubeletDialRules { prefixes: ctx.policy().ip_prefixes.clone(), port: schedule.kubelet_port };
    let targets = dial_targets(nodes, ctx.cluster(), &rules, skipped).await?;
    let uids = targets.iter().filter_map(|target| Some((target.node.clone(), target.uid.clone()?))).collect();
    let settings = ScanSettings {
        ca: schedule.ca.clone(),
        dial_limit: DIAL_LIMIT,
        concurrency: usize::from(DIAL_CONCURRENCY),
        expiring_within: schedule.expiring_within,
    };
    let judge = Judge {
        settings: &settings,
        policy: ctx.policy(),
        resolver: ctx.resolver(),
        cluster: ctx.cluster(),
        now: Timestamp::now(),
    };
    Ok((judge.scan(targets).await, uids))
}

/// Sets the metrics from a completed scan of `reports` that took `took`, and tells each Node
/// whose state changed: a log line and an Event.
async fn report<H: Host>(
    ctx: &H,
    memory: &mut StateMemory,
    reports: &[NodeAudit],
    uids: &HashMap<String, String>,
    took: Duration,
) {
    let findings: Vec<Vec<&'static str>> =
        reports.iter().map(|report| report.findings.iter().map(|finding| finding.as_str()).collect()).collect();
    let audited: Vec<AuditedNode<'_>> = reports
        .iter()
        .zip(&findings)
        .map(|(report, findings)| AuditedNode {
            node: &report.node,
            state: report.state,
            findings,
            not_after: report.certificate.as_ref().map(|certificate| certificate.not_after.as_second()),
        })
        .collect();
    let finished = Timestamp::now().as_millisecond() as f64 / 1000.0;
    ctx.metrics().record_scan(&audited, finished, took);
    let changes = memory.update(reports);
    tracing::debug!(nodes = reports.len(), changed = changes.len(), took = ?took, "periodic audit: scan completed");
    for change in &changes {
        tracing::info!(node = %change.node, reason = change.reason, detail = %change.note, "periodic audit: state changed");
        let told = NodeChange { problem: change.problem, reason: change.reason, note: &change.note };
        ctx.events().publish_audit(&change.node, uids.get(&change.node).cloned(), told).await;
    }
}
