//! The periodic audit (`--audit-period`): the scan of `audit` (every Node's kubelet dialled where
//! serving renewal would dial it, its certificate judged), run by the replica that writes, one
//! scan at a time, the next a period after the last ended. Each scan sets the audit's metrics and
//! tells each Node whose state changed (an Event on the Node, as `--events` says). A scan is
//! dropped at once when this replica stops writing, and the task ends with the controller.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::audit::NodeAudit;
use crate::audit::args::{DIAL_CONCURRENCY, DIAL_TIMEOUT};
use crate::audit::metrics::AuditedNode;
use crate::audit::scan::{Judge, ScanSettings};
use crate::audit::states::StateMemory;
use crate::config::AuditSchedule;
use crate::controller::Context;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kubelet_endpoint::dial_targets;
use crate::kubernetes::node_object::NodeObject;
use crate::policy::{ClusterView, KubeletDialRules, Resolver};

/// How long after the CSR watch synced the first scan starts: readiness and the first pass over
/// the CSRs come first.
const FIRST_SCAN_DELAY: Duration = Duration::from_secs(2);

/// How often, between scans and during one, whether this replica writes is looked at.
const LEADERSHIP_POLL: Duration = Duration::from_millis(250);

/// Scans on `schedule` while this replica writes, from [`FIRST_SCAN_DELAY`] on; runs until dropped.
pub(super) async fn run<R, C>(ctx: Arc<Context<R, C>>, schedule: AuditSchedule)
where
    R: Resolver,
    C: ClusterView,
{
    ctx.metrics.enable_audit(schedule.period, schedule.node_metrics);
    let nodes = kube::Api::<Decoded<NodeObject>>::all(ctx.api.clone().into_client());
    let skipped = ctx.skipped.clone();
    let mut memory = StateMemory::default();
    let earliest = Instant::now() + FIRST_SCAN_DELAY;
    let mut due = earliest;
    let mut writing = false;
    loop {
        let now = Instant::now();
        match (writing, ctx.leadership.is_leader()) {
            (true, false) => {
                writing = false;
                stop_telling(&ctx, &mut memory, "this replica stopped writing");
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
            scanned = scan(&ctx, &schedule, &nodes, &skipped) => match scanned {
                Ok((reports, uids)) if ctx.leadership.is_leader() => {
                    report(&ctx, &mut memory, &reports, &uids, now.elapsed()).await;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "periodic audit: listing the Nodes; next scan in a period"),
            },
            () = stops_writing(&ctx) => {}
        }
        due = Instant::now() + schedule.period;
    }
}

/// Forgets every Node's state and clears the metrics: another replica scans and tells now.
fn stop_telling<R, C>(ctx: &Context<R, C>, memory: &mut StateMemory, why: &str) {
    memory.forget();
    ctx.metrics.clear_audit();
    tracing::info!("periodic audit paused: {why}");
}

/// Resolves when this replica stops writing.
async fn stops_writing<R, C>(ctx: &Context<R, C>) {
    while ctx.leadership.is_leader() {
        tokio::time::sleep(LEADERSHIP_POLL).await;
    }
}

/// Every Node's audit, and the uid of each Node listed.
async fn scan<R: Resolver, C: ClusterView>(
    ctx: &Context<R, C>,
    schedule: &AuditSchedule,
    nodes: &kube::Api<Decoded<NodeObject>>,
    skipped: &Skipped,
) -> Result<(Vec<NodeAudit>, HashMap<String, String>), kube::Error> {
    let rules = KubeletDialRules { prefixes: ctx.policy.ip_prefixes.clone(), port: schedule.kubelet_port };
    let targets = dial_targets(nodes, &ctx.cluster, &rules, skipped).await?;
    let uids = targets.iter().filter_map(|target| Some((target.node.clone(), target.uid.clone()?))).collect();
    let settings = ScanSettings {
        ca: schedule.ca.clone(),
        dial_limit: DIAL_TIMEOUT,
        concurrency: usize::from(DIAL_CONCURRENCY),
        expiring_within: schedule.expiring_within,
    };
    let judge = Judge {
        settings: &settings,
        policy: &ctx.policy,
        resolver: &ctx.resolver,
        cluster: &ctx.cluster,
        now: Timestamp::now(),
    };
    Ok((judge.scan(targets).await, uids))
}

/// Sets the metrics from a completed scan of `reports` that took `took`, and tells each Node
/// whose state changed: a log line and an Event.
async fn report<R, C>(
    ctx: &Context<R, C>,
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
    ctx.metrics.record_audit_scan(&audited, finished, took);
    let changes = memory.update(reports);
    tracing::debug!(nodes = reports.len(), changed = changes.len(), took = ?took, "periodic audit: scan completed");
    for change in &changes {
        tracing::info!(node = %change.node, reason = change.reason, detail = %change.note, "periodic audit: state changed");
        ctx.events.publish_audit(&change.node, uids.get(&change.node).cloned(), change).await;
    }
}
