//! The figures of a run, serialized as JSON; [`Report::table`] prints them.

use std::time::Duration;

use serde::Serialize;

pub use crate::apiserver::ApiserverCost;
pub use crate::storm::Storm;
pub use crate::targets::Targets;

/// Everything one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// CSRs per phase.
    pub n: usize,
    /// Concurrency of the controller and of the bare client.
    pub concurrency: u16,
    /// The machine.
    pub machine: Machine,
    /// Size of the approver binary that ran, in bytes.
    pub binary_bytes: u64,
    /// The bare-client baseline.
    pub limit: Limit,
    /// Catch-up and live with DNS checks on.
    pub dns: Mode,
    /// Catch-up and live with `--bypass-dns-resolution`.
    pub bypass_dns: Mode,
    /// Catch-up with DNS checks and `--events=all` (an Event per approval too).
    pub events_all: Catchup,
    /// Memory with 100 pending CSRs at the apiserver's object size limit.
    pub hostile: Hostile,
    /// One node's N CSRs waiting, other nodes' CSRs created while they are decided.
    pub flood: Flood,
    /// The Go kubelet-csr-approver in the same run, when it ran.
    pub peer: Option<PeerReport>,
    /// The renewal storm, when it ran (`--storm N`).
    pub storm: Option<Storm>,
    /// The figures the targets name, gathered from the above for scripts.
    pub targets: Targets,
}

/// The Go kubelet-csr-approver measured exactly as ours, on its own fresh control planes with the
/// same CSRs, DNS server, regex and prefixes. It writes no Events, so its `events_seconds` is 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerReport {
    /// Its release.
    pub version: String,
    /// Catch-up and live with DNS checks on.
    pub dns: Mode,
    /// Catch-up and live with `--bypass-dns-resolution=true`.
    pub bypass_dns: Mode,
    /// The peer's `T_catchup` over ours, DNS checks on.
    pub speedup_dns: f64,
    /// The peer's `T_catchup` over ours, DNS bypassed.
    pub speedup_bypass_dns: f64,
    /// Our CPU per decision over the peer's, phase by phase.
    pub cpu_ratio: CpuRatio,
}

/// Our CPU milliseconds per decision over the peer's ([`cpu_ratio`]); `None` (null) where the
/// peer's figure is 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuRatio {
    /// Catch-up, DNS checks on.
    pub catchup_dns: Option<f64>,
    /// Catch-up, DNS bypassed.
    pub catchup_bypass_dns: Option<f64>,
    /// Live, DNS checks on.
    pub live_dns: Option<f64>,
    /// Live, DNS bypassed.
    pub live_bypass_dns: Option<f64>,
}

impl CpuRatio {
    /// The ratios of `ours` over the peer's modes.
    pub fn of(ours: (&Mode, &Mode), peer: (&Mode, &Mode)) -> CpuRatio {
        let ((dns, bypass), (peer_dns, peer_bypass)) = (ours, peer);
        CpuRatio {
            catchup_dns: cpu_ratio(dns.catchup.cpu_ms_per_decision, peer_dns.catchup.cpu_ms_per_decision),
            catchup_bypass_dns: cpu_ratio(bypass.catchup.cpu_ms_per_decision, peer_bypass.catchup.cpu_ms_per_decision),
            live_dns: cpu_ratio(dns.live.cpu_ms_per_decision, peer_dns.live.cpu_ms_per_decision),
            live_bypass_dns: cpu_ratio(bypass.live.cpu_ms_per_decision, peer_bypass.live.cpu_ms_per_decision),
        }
    }
}

/// `ours / peer`, `None` when the peer's figure is not positive.
pub fn cpu_ratio(ours: f64, peer: f64) -> Option<f64> {
    (peer > 0.0).then(|| ours / peer)
}

/// Where the run happened.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// `MemTotal` in MiB.
    pub memory_mib: u64,
    /// `model name` of the first CPU.
    pub cpu_model: String,
}

impl Machine {
    /// Reads `/proc`.
    pub fn current() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map(|p| p.get()).unwrap_or(0),
            memory_mib: meminfo
                .lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
                .map(|kib| kib / 1024)
                .unwrap_or(0),
            cpu_model: cpuinfo
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
                .unwrap_or_default(),
        }
    }
}

/// The bare client writing approvals as fast as the apiserver accepts them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Limit {
    /// `T_limit`: N approval writes.
    pub seconds: f64,
    /// N / `T_limit`.
    pub writes_per_second: f64,
    /// N approval writes, each followed by creating one Event (what the controller records).
    pub with_events_seconds: f64,
}

/// One DNS mode: catch-up and live.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Mode {
    /// N CSRs waiting, then the controller started.
    pub catchup: Catchup,
    /// N CSRs created while the controller runs.
    pub live: Live,
}

/// The catch-up phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Catchup {
    /// Process spawn to `/readyz` 200 (its watch listed N CSRs).
    pub ready_seconds: f64,
    /// `T_catchup`: process spawn to the last decision seen.
    pub seconds: f64,
    /// Process spawn to the last of the N approval events seen (events trail the decisions); 0
    /// when none are written (the default `--events=problems`, and the peer).
    pub events_seconds: f64,
    /// `T_catchup / T_limit`.
    pub ratio: f64,
    /// Approved CSRs.
    pub approved: usize,
    /// Denied CSRs.
    pub denied: usize,
    /// Resident memory.
    pub memory: Memory,
    /// CPU seconds from spawn until all was decided and settled.
    pub cpu_seconds: f64,
    /// [`cpu_ms_per_decision`] of this phase.
    pub cpu_ms_per_decision: f64,
    /// Requests and response bytes of the approver's, from the apiserver's counters, spawn to
    /// stop; `None` when they could not be told (the apiserver restarted).
    pub apiserver: Option<ApiserverCost>,
}

/// The live phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Live {
    /// Process spawn to `/readyz` 200 with no CSRs.
    pub ready_seconds: f64,
    /// Creates per second asked for.
    pub target_rate: f64,
    /// Creates per second achieved.
    pub achieved_rate: f64,
    /// First create to last decision.
    pub seconds: f64,
    /// Latency from create response to decision seen, in milliseconds.
    pub latency_ms: Latency,
    /// Approved CSRs.
    pub approved: usize,
    /// Denied CSRs.
    pub denied: usize,
    /// Resident memory.
    pub memory: Memory,
    /// CPU seconds spent from the first create until all was decided and settled.
    pub cpu_seconds: f64,
    /// [`cpu_ms_per_decision`] of this phase.
    pub cpu_ms_per_decision: f64,
    /// Requests and response bytes of the approver's, from the apiserver's counters, spawn to
    /// stop (the bench's CSR creates left out); `None` when they could not be told.
    pub apiserver: Option<ApiserverCost>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    /// Percentiles of `samples` (nearest rank).
    pub fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let at = |q: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Latency { p50: at(0.50), p90: at(0.90), p99: at(0.99), max: at(1.0) }
    }
}

/// Resident memory of the controller in MiB.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    /// Ready, before the burst (live phase only; 0 in catch-up, where the burst is waiting).
    pub idle_mib: f64,
    /// Largest sample during the burst.
    pub peak_mib: f64,
    /// After every CSR was decided and 3 s passed, with N decided CSRs in the cluster.
    pub after_mib: f64,
}

/// Resident memory of the controller around [`HOSTILE_CSRS`](crate::hostile::HOSTILE_CSRS)
/// oversized pending CSRs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Hostile {
    /// CSRs.
    pub csrs: usize,
    /// Bytes of each request.
    pub request_bytes: usize,
    /// Denied (all should be: `MalformedRequest`).
    pub denied: usize,
    /// Ready with an empty cluster, in MiB.
    pub idle_mib: f64,
    /// Largest sample from start until all were decided, with them pending at start, in MiB.
    pub peak_mib: f64,
    /// 3 s after the last decision, in MiB.
    pub after_mib: f64,
    /// `peak_mib - idle_mib`.
    pub growth_mib: f64,
}

/// The flood phase (ours, DNS checks on): how long other nodes wait behind one node's backlog.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Flood {
    /// CSRs of the flooding node, waiting when the controller started.
    pub flood_csrs: usize,
    /// Other nodes' CSRs, one each, created after the controller was ready.
    pub other_csrs: usize,
    /// From ready to the flood's last decision.
    pub flood_seconds: f64,
    /// The other nodes' CSRs, from create to decision.
    pub others_latency_ms: Latency,
    /// Other nodes' CSRs decided before the flood's last.
    pub others_decided_before_flood: usize,
    /// CPU milliseconds per decision over the whole phase.
    pub cpu_ms_per_decision: f64,
    /// Largest resident memory from start to the last decision, in MiB.
    pub peak_mib: f64,
}

/// KiB to MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// CPU milliseconds per decision of a phase: `cpu_seconds` over its decisions (approved + denied);
/// 0 when it made none.
pub fn cpu_ms_per_decision(cpu_seconds: f64, decisions: usize) -> f64 {
    if decisions == 0 { 0.0 } else { cpu_seconds * 1000.0 / decisions as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let latency = Latency::of(samples);
        assert_eq!((latency.p50, latency.p90, latency.p99, latency.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Latency::of(Vec::new()).max, 0.0);
    }

    #[test]
    fn cpu_per_decision_is_milliseconds_over_decisions() {
        assert_eq!(cpu_ms_per_decision(1.5, 1000), 1.5);
        assert_eq!(cpu_ms_per_decision(0.25, 50), 5.0);
        assert_eq!(cpu_ms_per_decision(0.3, 0), 0.0);
    }

    #[test]
    fn the_cpu_ratio_is_ours_over_the_peers_phase_by_phase() {
        let mode = |catchup, live| Mode {
            catchup: Catchup { cpu_ms_per_decision: catchup, ..Catchup::default() },
            live: Live { cpu_ms_per_decision: live, ..Live::default() },
        };
        let ratio = CpuRatio::of((&mode(1.0, 2.0), &mode(3.0, 4.0)), (&mode(4.0, 8.0), &mode(0.0, 2.0)));
        assert_eq!(ratio.catchup_dns, Some(0.25));
        assert_eq!(ratio.live_dns, Some(0.25));
        assert_eq!(ratio.catchup_bypass_dns, None, "the peer's figure is 0");
        assert_eq!(ratio.live_bypass_dns, Some(2.0));
    }
}
