//! The figures of a run, as JSON and as a table.

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

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
    /// The Go kubelet-csr-approver in the same run, when it ran.
    pub peer: Option<PeerReport>,
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

/// KiB to MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Report {
    /// The report as an aligned text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "node-csr-approver burst benchmark: N = {}, concurrency = {}; {} CPUs, {} MiB, {}",
            self.n, self.concurrency, m.nproc, m.memory_mib, m.cpu_model
        );
        let _ = writeln!(out, "release binary: {:.1} MiB", self.binary_bytes as f64 / (1024.0 * 1024.0));
        let l = &self.limit;
        let _ = writeln!(
            out,
            "limit (bare client, approval writes):  T_limit = {:.2} s ({:.0} writes/s); with one Event each: {:.2} s",
            l.seconds, l.writes_per_second, l.with_events_seconds
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<15} {:>8} {:>10} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8}",
            "catch-up", "ready s", "T_catchup", "ratio", "decided", "peak MiB", "after MiB", "CPU s", "events s"
        );
        for (name, c) in self.catchups() {
            let _ = writeln!(
                out,
                "{:<15} {:>8.2} {:>10.2} {:>7.2} {:>9} {:>9.1} {:>9.1} {:>8.2} {:>8.2}",
                name,
                c.ready_seconds,
                c.seconds,
                c.ratio,
                c.approved + c.denied,
                c.memory.peak_mib,
                c.memory.after_mib,
                c.cpu_seconds,
                c.events_seconds
            );
        }
        let _ = writeln!(out);
        if self.dns.live.achieved_rate > 0.0 {
            self.live_table(&mut out);
        } else {
            let _ = writeln!(out, "live: not run (--no-live)");
        }
        let _ = writeln!(
            out,
            "\nheadline T_catchup / T_limit: {:.2} (dns), {:.2} (bypass-dns)",
            self.dns.catchup.ratio, self.bypass_dns.catchup.ratio
        );
        let h = &self.hostile;
        let _ = writeln!(
            out,
            "hostile: {} pending CSRs of {:.1} MiB each ({} denied): RSS {:.1} MiB idle, {:.1} MiB peak (+{:.1}), {:.1} MiB after",
            h.csrs,
            h.request_bytes as f64 / (1024.0 * 1024.0),
            h.denied,
            h.idle_mib,
            h.peak_mib,
            h.growth_mib,
            h.after_mib
        );
        match &self.peer {
            Some(peer) => {
                let _ = writeln!(
                    out,
                    "peer kubelet-csr-approver {}: its T_catchup / ours: {:.2}x (dns), {:.2}x (bypass-dns)",
                    peer.version, peer.speedup_dns, peer.speedup_bypass_dns
                );
            }
            None => {
                let _ = writeln!(out, "peer kubelet-csr-approver: not run");
            }
        }
        out
    }

    /// The live phases' rows.
    fn live_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<15} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6}",
            "live",
            "rate/s",
            "ready s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "idle MiB",
            "peak MiB",
            "after MiB",
            "CPU s"
        );
        for (name, mode) in self.modes() {
            let v = &mode.live;
            let _ = writeln!(
                out,
                "{:<15} {:>7.0} {:>8.2} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>6.2}",
                name,
                v.achieved_rate,
                v.ready_seconds,
                v.latency_ms.p50,
                v.latency_ms.p90,
                v.latency_ms.p99,
                v.latency_ms.max,
                v.memory.idle_mib,
                v.memory.peak_mib,
                v.memory.after_mib,
                v.cpu_seconds
            );
        }
    }

    /// The rows of the catch-up table: ours with and without DNS checks and with `--events=all`,
    /// then the peer's.
    fn catchups(&self) -> Vec<(&'static str, &Catchup)> {
        let mut rows = vec![
            ("dns", &self.dns.catchup),
            ("bypass-dns", &self.bypass_dns.catchup),
            ("dns events=all", &self.events_all),
        ];
        if let Some(peer) = &self.peer {
            rows.extend([("peer dns", &peer.dns.catchup), ("peer bypass-dns", &peer.bypass_dns.catchup)]);
        }
        rows
    }

    /// The rows of the live table: ours with and without DNS checks, then the peer's.
    fn modes(&self) -> Vec<(&'static str, &Mode)> {
        let mut rows = vec![("dns", &self.dns), ("bypass-dns", &self.bypass_dns)];
        if let Some(peer) = &self.peer {
            rows.extend([("peer dns", &peer.dns), ("peer bypass-dns", &peer.bypass_dns)]);
        }
        rows
    }
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
}
