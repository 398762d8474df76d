//! The periodic audit (`--audit-period`): the scan of `audit` (every Node's kubelet dialled where
//! serving renewal would dial it, its certificate judged), run by the replica that writes, one
//! scan at a time, the next a period after the last ended, streamed: each Node's report is counted
//! and dropped as it completes. The Nodes are read from the watched Nodes the decisions read
//! ([`NodeIndex`]); only when that watch is not live within [`WATCHED_NODES_WAIT`] are they listed. Each scan tells each Node whose state changed (an Event on the
//! Node, as `--events` says) and, once complete, sets the audit's metrics. A scan is
//! dropped at once when this replica stops writing, and the task ends with the controller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;

use super::NodeAudit;
use super::flags::AuditSchedule;
use super::metrics::{AuditMetrics, AuditedNode};
use super::scan::{Judge, ScanSettings};
use super::states::{StateChange, StateMemory};
use crate::events::{AuditRoom, Events, NodeChange};
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kubelet_endpoint::{dial_targets, kubelet_target};
use crate::kubernetes::leader::Leadership;
use crate::kubernetes::node_index::{Kept, NodeIndex};
use crate::kubernetes::node_object::NodeObject;
use crate::kubernetes::node_target::{NodeTarget, NotDialled};
use crate::policy::{ClusterView, KubeletDialRules, PolicyConfig, Resolver};

/// How long after the CSR watch synced the first scan starts: readiness and the first pass over
/// the CSRs come first.
const FIRST_SCAN_DELAY: Duration = Duration::from_secs(2);

/// How long a scan waits for the watched Nodes to be live (their first list, at the leader's start,
/// takes about a minute at 130,000 Nodes) before it lists the Nodes itself.
const WATCHED_NODES_WAIT: Duration = Duration::from_secs(120);

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
    /// The watched Nodes, which a scan reads.
    fn nodes(&self) -> &NodeIndex;
    /// The client the Nodes are listed with while their watch is not live.
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
            scanned = scan(ctx.as_ref(), &schedule, &nodes, &skipped, &mut memory) => if let Err(error) = scanned {
                tracing::warn!(%error, "periodic audit: listing the Nodes; next scan in a period");
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

/// One scan, streamed: the Nodes as the watch holds them (a handle on each, shared with the
/// index), or when it is not live their dial targets listed (a page at a time, each page reduced
/// to names, uids and addresses); dialled `--audit-dial-concurrency` at once, each report counted,
/// compared with its Node's last state (its change told at once) and dropped as it completes; the
/// metrics are set once every Node is done. Nothing is held per Node but that handle or target
/// until it is dialled and its entry in `memory` (with `--audit-node-metrics`, its series too).
async fn scan<H: Host>(
    ctx: &H,
    schedule: &AuditSchedule,
    nodes: &kube::Api<Decoded<NodeObject>>,
    skipped: &Skipped,
    memory: &mut StateMemory,
) -> Result<(), kube::Error> {
    let started = Instant::now();
    let rules = KubeletDialRules { prefixes: ctx.policy().ip_prefixes.clone(), port: schedule.kubelet_port };
    let (scanned, mut waiting): (usize, Box<dyn Iterator<Item = Waiting> + Send>) =
        match ctx.nodes().every_node(WATCHED_NODES_WAIT).await {
            Some(watched) => {
                (watched.len(), Box::new(watched.into_iter().map(|(name, kept)| Waiting::Watched(name, kept))))
            }
            None => {
                tracing::info!("periodic audit: the watched Nodes are not live; listing them");
                let listed = dial_targets(nodes, ctx.cluster(), &rules, skipped).await?;
                (listed.len(), Box::new(listed.into_iter().map(Waiting::Listed)))
            }
        };
    let settings = ScanSettings {
        ca: schedule.ca.clone(),
        dial_limit: schedule.dial_limit,
        concurrency: usize::from(schedule.dial_concurrency).max(1),
        expiring_within: schedule.expiring_within,
    };
    let judge = Judge {
        settings: &settings,
        policy: ctx.policy(),
        resolver: ctx.resolver(),
        cluster: ctx.cluster(),
        now: Timestamp::now(),
    };
    let (mut tally, mut pass) = (ctx.metrics().tally(), memory.pass());
    let mut changed = 0_usize;
    // A loop rather than `buffer_unordered` over a closure: the future stays `Send` for every
    // lifetime, so the controller can spawn it.
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < settings.concurrency {
            let Some(next) = waiting.next() else { break };
            running.push(audit(&judge, &rules, ctx.events(), next));
        }
        let Some((uid, room, report)) = running.next().await else { break };
        let findings: Vec<&'static str> = report.findings.iter().map(|finding| finding.as_str()).collect();
        let not_after = report.certificate.as_ref().map(|certificate| certificate.not_after.as_second());
        tally.add(AuditedNode { node: &report.node, state: report.state, findings: &findings, not_after });
        if let Some(change) = pass.observe(&report) {
            changed += 1;
            tell(ctx, &change, uid, room);
        }
    }
    pass.complete();
    let took = started.elapsed();
    if ctx.leadership().is_leader() {
        let finished = Timestamp::now().as_millisecond() as f64 / 1000.0;
        ctx.metrics().record_scan(tally, finished, took);
    }
    tracing::debug!(nodes = scanned, changed, took = ?took, "periodic audit: scan completed");
    Ok(())
}

/// A Node of a scan, not dialled yet.
enum Waiting {
    /// As the watched Nodes keep it.
    Watched(Arc<str>, Kept),
    /// Its dial target, listed.
    Listed(NodeTarget),
}

/// Audits one Node (its dial target chosen by `rules` first, when it was read from the watch)
/// once the audit's Event queue has room for its Event, so telling it never waits while other
/// dials run (their time limits running); its uid and that room come back with its report, for
/// the Event.
async fn audit<R: Resolver, C: ClusterView>(
    judge: &Judge<'_, R, C>,
    rules: &KubeletDialRules,
    events: &Events,
    waiting: Waiting,
) -> (Option<String>, Option<AuditRoom>, NodeAudit) {
    let room = events.audit_room().await;
    let target = match waiting {
        Waiting::Watched(name, Kept::Read(facts)) => NodeTarget {
            node: name.to_string(),
            uid: facts.uid.as_deref().map(str::to_owned),
            target: kubelet_target(judge.cluster, &name, facts.kubelet_port, &facts.info.addresses, rules).await,
        },
        Waiting::Watched(name, Kept::Undecodable(why)) => {
            NodeTarget { node: name.to_string(), uid: None, target: Err(NotDialled::Undecodable(why)) }
        }
        Waiting::Listed(target) => target,
    };
    let report = judge.scan_node(&target).await;
    (target.uid, room, report)
}

/// Tells a Node whose state changed, while this replica writes: a log line and an Event, in the
/// room held for it.
fn tell<H: Host>(ctx: &H, change: &StateChange, uid: Option<String>, room: Option<AuditRoom>) {
    if !ctx.leadership().is_leader() {
        return;
    }
    tracing::info!(node = %change.node, reason = change.reason, detail = %change.note, "periodic audit: state changed");
    let told = NodeChange { problem: change.problem, reason: change.reason, note: &change.note };
    if let Some(room) = room {
        room.publish(&change.node, uid, told);
    }
}
