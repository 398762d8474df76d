//! The figures the performance targets name, gathered in one flat place of the JSON report
//! (`targets`) so a script reads them without knowing the phases' layout.

use serde::Serialize;

use crate::apiserver::ApiserverCost;
use crate::report::{Catchup, Live, Mode, Report, cpu_ratio};

/// The targets' figures of one run; 0 (or null) for what did not run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Targets {
    /// CPU milliseconds per decision, ours beside the peer's.
    pub cpu_ms_per_decision: PerPhase,
    /// The apiserver's requests per decision (its own counters), ours beside the peer's; 0 for ours
    /// and null for the peer's when not measured.
    pub apiserver_requests_per_decision: PerPhase,
    /// The apiserver's read-response bytes per decision, likewise.
    pub apiserver_bytes_per_decision: PerPhase,
    /// Idle resident memory (ready, no CSRs: the live phase with DNS checks; else the storm's),
    /// MiB.
    pub idle_mib: f64,
    /// Peak resident memory with N pending (catch-up, DNS checks on), MiB.
    pub peak_mib_n_pending: f64,
    /// `T_catchup / T_limit` with DNS checks on.
    pub catchup_ratio_dns: f64,
    /// `T_catchup / T_limit` with DNS checks bypassed.
    pub catchup_ratio_bypass_dns: f64,
    /// The storm's figures, when it ran.
    pub storm: Option<StormTargets>,
}

/// A per-decision figure of each phase the targets name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PerPhase {
    /// Catch-up, DNS checks on.
    pub catchup_dns: Versus,
    /// Catch-up, DNS bypassed.
    pub catchup_bypass_dns: Versus,
    /// Live, DNS checks on.
    pub live_dns: Versus,
    /// Live, DNS bypassed.
    pub live_bypass_dns: Versus,
}

/// Ours, the peer's and ours over the peer's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Versus {
    /// Ours.
    pub ours: f64,
    /// The peer's; null when it did not run.
    pub peer: Option<f64>,
    /// `ours / peer`; null when the peer did not run or its figure is 0.
    pub ratio: Option<f64>,
}

impl Versus {
    fn of(ours: f64, peer: Option<f64>) -> Versus {
        Versus { ours, peer, ratio: peer.and_then(|p| cpu_ratio(ours, p)) }
    }
}

/// The storm's figures the targets name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StormTargets {
    /// Nodes.
    pub nodes: usize,
    /// CSRs created (nodes and duplicates).
    pub csrs: usize,
    /// Peak resident memory, MiB.
    pub peak_mib: f64,
    /// Peak resident memory during the forced relist, MiB.
    pub relist_peak_mib: f64,
    /// Approved + denied, counted from the apiserver.
    pub decided: usize,
    /// Neither, counted from the apiserver.
    pub pending: usize,
    /// The most approvals of one node.
    pub approvals_per_node_max: usize,
    /// Nodes approved more than once.
    pub nodes_approved_more_than_once: usize,
    /// Denied `Superseded`.
    pub denied_superseded: usize,
    /// `T_catchup / T_limit` at the storm's size.
    pub ratio: f64,
    /// The same with the apiserver's outage taken off `T_catchup`.
    pub ratio_without_outage: f64,
    /// Creating the storm, s.
    pub create_seconds: f64,
    /// Node objects created before the CSRs (`--storm-nodes`).
    pub node_objects: usize,
    /// Nodes created per second.
    pub nodes_per_second: f64,
    /// The apiserver's requests per decision; null when not measured (the forced relist).
    pub apiserver_requests_per_decision: Option<f64>,
    /// The apiserver's read-response bytes per decision; null when not measured.
    pub apiserver_bytes_per_decision: Option<f64>,
}

impl PerPhase {
    /// `figure` of the apiserver's cost in each phase, ours beside the peer's.
    fn apiserver(report: &Report, figure: impl Fn(&ApiserverCost) -> Option<f64>) -> PerPhase {
        let peer = report.peer.as_ref();
        let of = |mode: fn(&Mode) -> Option<&ApiserverCost>, ours: &Mode, theirs: Option<&Mode>| {
            Versus::of(mode(ours).and_then(&figure).unwrap_or(0.0), theirs.and_then(mode).and_then(&figure))
        };
        PerPhase {
            catchup_dns: of(catchup, &report.dns, peer.map(|p| &p.dns)),
            catchup_bypass_dns: of(catchup, &report.bypass_dns, peer.map(|p| &p.bypass_dns)),
            live_dns: of(live, &report.dns, peer.map(|p| &p.dns)),
            live_bypass_dns: of(live, &report.bypass_dns, peer.map(|p| &p.bypass_dns)),
        }
    }
}

/// The catch-up's cost of a mode.
fn catchup(mode: &Mode) -> Option<&ApiserverCost> {
    mode.catchup.apiserver.as_ref()
}

/// The live phase's cost of a mode.
fn live(mode: &Mode) -> Option<&ApiserverCost> {
    mode.live.apiserver.as_ref()
}

impl Targets {
    /// Gathers the targets' figures of `report`.
    pub fn of(report: &Report) -> Targets {
        let peer = report.peer.as_ref();
        let catchup = |ours: &Catchup, theirs: Option<&Catchup>| {
            Versus::of(ours.cpu_ms_per_decision, theirs.map(|c| c.cpu_ms_per_decision))
        };
        let live = |ours: &Live, theirs: Option<&Live>| {
            Versus::of(ours.cpu_ms_per_decision, theirs.map(|l| l.cpu_ms_per_decision))
        };
        let storm = report.storm.as_ref();
        let live_idle = report.dns.live.memory.idle_mib;
        Targets {
            cpu_ms_per_decision: PerPhase {
                catchup_dns: catchup(&report.dns.catchup, peer.map(|p| &p.dns.catchup)),
                catchup_bypass_dns: catchup(&report.bypass_dns.catchup, peer.map(|p| &p.bypass_dns.catchup)),
                live_dns: live(&report.dns.live, peer.map(|p| &p.dns.live)),
                live_bypass_dns: live(&report.bypass_dns.live, peer.map(|p| &p.bypass_dns.live)),
            },
            apiserver_requests_per_decision: PerPhase::apiserver(report, |c| Some(c.requests_per_decision)),
            apiserver_bytes_per_decision: PerPhase::apiserver(report, |c| c.bytes_per_decision),
            idle_mib: if live_idle > 0.0 { live_idle } else { storm.map_or(0.0, |s| s.idle_mib) },
            peak_mib_n_pending: report.dns.catchup.memory.peak_mib,
            catchup_ratio_dns: report.dns.catchup.ratio,
            catchup_ratio_bypass_dns: report.bypass_dns.catchup.ratio,
            storm: storm.map(|s| StormTargets {
                nodes: s.nodes,
                csrs: s.csrs,
                peak_mib: s.peak_mib,
                relist_peak_mib: s.relist_peak_mib,
                decided: s.approved + s.denied,
                pending: s.pending,
                approvals_per_node_max: s.approvals_per_node_max,
                nodes_approved_more_than_once: s.nodes_approved_more_than_once,
                denied_superseded: s.denied_superseded,
                ratio: s.ratio,
                ratio_without_outage: s.ratio_without_outage,
                create_seconds: s.create_seconds,
                node_objects: s.node_objects.map_or(0, |n| n.nodes),
                nodes_per_second: s.node_objects.map_or(0.0, |n| n.per_second),
                apiserver_requests_per_decision: s.apiserver.as_ref().map(|c| c.requests_per_decision),
                apiserver_bytes_per_decision: s.apiserver.as_ref().and_then(|c| c.bytes_per_decision),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{PeerReport, Storm};

    #[test]
    fn the_json_holds_every_targets_figure_where_a_script_reads_it() {
        let mut report = Report::default();
        report.dns.catchup.cpu_ms_per_decision = 0.5;
        report.dns.catchup.memory.peak_mib = 33.5;
        report.dns.catchup.ratio = 1.4;
        report.dns.live.memory.idle_mib = 12.9;
        let cost = |requests_per_decision, bytes_per_decision| ApiserverCost {
            requests_per_decision,
            bytes_per_decision,
            ..ApiserverCost::default()
        };
        report.dns.catchup.apiserver = Some(cost(1.5, Some(3000.0)));
        let mut peer = PeerReport::default();
        peer.dns.catchup.cpu_ms_per_decision = 2.0;
        peer.dns.catchup.apiserver = Some(cost(3.0, Some(1500.0)));
        report.peer = Some(peer);
        report.storm = Some(Storm {
            nodes: 100,
            csrs: 120,
            approved: 100,
            denied: 20,
            denied_superseded: 20,
            approvals_per_node_max: 1,
            peak_mib: 40.0,
            relist_peak_mib: 41.0,
            ratio: 1.5,
            apiserver: Some(cost(0.25, None)),
            ..Storm::default()
        });
        report.targets = Targets::of(&report);
        let json = serde_json::to_value(&report).unwrap_or_default();
        let at = |pointer: &str| json.pointer(pointer).cloned().unwrap_or_else(|| panic!("no {pointer} in {json}"));
        assert_eq!(at("/targets/cpu_ms_per_decision/catchup_dns/ours"), 0.5);
        assert_eq!(at("/targets/cpu_ms_per_decision/catchup_dns/peer"), 2.0);
        assert_eq!(at("/targets/cpu_ms_per_decision/catchup_dns/ratio"), 0.25);
        assert_eq!(at("/targets/cpu_ms_per_decision/catchup_bypass_dns/ratio"), serde_json::Value::Null);
        for phase in ["catchup_bypass_dns", "live_dns", "live_bypass_dns"] {
            at(&format!("/targets/cpu_ms_per_decision/{phase}/ours"));
        }
        assert_eq!(at("/targets/apiserver_requests_per_decision/catchup_dns/ratio"), 0.5);
        assert_eq!(at("/targets/apiserver_bytes_per_decision/catchup_dns/peer"), 1500.0);
        assert_eq!(at("/targets/apiserver_bytes_per_decision/catchup_dns/ratio"), 2.0);
        assert_eq!(at("/targets/apiserver_requests_per_decision/live_dns/peer"), serde_json::Value::Null);
        assert_eq!(at("/targets/storm/apiserver_requests_per_decision"), 0.25);
        assert_eq!(at("/targets/storm/apiserver_bytes_per_decision"), serde_json::Value::Null);
        assert_eq!(at("/targets/storm/node_objects"), 0);
        assert_eq!(at("/targets/idle_mib"), 12.9);
        assert_eq!(at("/targets/peak_mib_n_pending"), 33.5);
        assert_eq!(at("/targets/catchup_ratio_dns"), 1.4);
        assert_eq!(at("/targets/storm/decided"), 120);
        assert_eq!(at("/targets/storm/pending"), 0);
        assert_eq!(at("/targets/storm/approvals_per_node_max"), 1);
        assert_eq!(at("/targets/storm/denied_superseded"), 20);
        assert_eq!(at("/targets/storm/peak_mib"), 40.0);
        assert_eq!(at("/targets/storm/relist_peak_mib"), 41.0);
        assert_eq!(at("/targets/storm/ratio"), 1.5);
        at("/targets/storm/create_seconds");
        assert_eq!(at("/storm/nodes"), 100);
        at("/storm/idle_mib");
        at("/peer/cpu_ratio/catchup_dns");

        report.peer = None;
        report.storm = None;
        let alone = serde_json::to_value(Targets::of(&report)).unwrap_or_default();
        assert_eq!(alone.pointer("/cpu_ms_per_decision/catchup_dns/peer"), Some(&serde_json::Value::Null));
        assert_eq!(alone.pointer("/storm"), Some(&serde_json::Value::Null));
    }
}
