//! The report as aligned text tables.

use std::fmt::Write;

use crate::apiserver::ApiserverCost;
use crate::report::{Catchup, Mode, Report, Storm, cpu_ratio};

impl Report {
    /// The report as an aligned text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let n = if self.bursts_ran() { format!("N = {}", self.n) } else { "storm only".to_owned() };
        let _ = writeln!(
            out,
            "node-csr-approver burst benchmark: {n}, concurrency = {}; {} CPUs, {} MiB, {}",
            self.concurrency, m.nproc, m.memory_mib, m.cpu_model
        );
        let _ = writeln!(out, "release binary: {:.1} MiB", self.binary_bytes as f64 / (1024.0 * 1024.0));
        if let Some(storm) = &self.storm {
            storm_lines(storm, &mut out);
        }
        if !self.bursts_ran() {
            return out;
        }
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
        if self.live_ran() {
            self.live_table(&mut out);
        } else {
            let _ = writeln!(out, "live: not run (--no-live)");
        }
        let _ = writeln!(out);
        self.cpu_table(&mut out);
        let _ = writeln!(out);
        self.apiserver_table(&mut out);
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
        let f = &self.flood;
        let _ = writeln!(
            out,
            "flood: {} CSRs of one node decided {:.2}s after ready; {} other nodes' CSRs meanwhile: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} decided before the flood's last; {:.2} CPU ms per decision, peak RSS {:.1} MiB",
            f.flood_csrs,
            f.flood_seconds,
            f.other_csrs,
            f.others_latency_ms.p50,
            f.others_latency_ms.p99,
            f.others_latency_ms.max,
            f.others_decided_before_flood,
            f.cpu_ms_per_decision,
            f.peak_mib
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

    /// CPU milliseconds per decision, ours beside the peer's and ours over the peer's, for catch-up
    /// and (when it ran) live in each mode.
    fn cpu_table(&self, out: &mut String) {
        let _ = writeln!(out, "{:<20} {:>8} {:>8} {:>9}", "CPU ms per decision", "ours", "peer", "ours/peer");
        let peer = self.peer.as_ref();
        let mut rows = vec![
            ("catch-up dns", self.dns.catchup.cpu_ms_per_decision, peer.map(|p| p.dns.catchup.cpu_ms_per_decision)),
            (
                "catch-up bypass-dns",
                self.bypass_dns.catchup.cpu_ms_per_decision,
                peer.map(|p| p.bypass_dns.catchup.cpu_ms_per_decision),
            ),
        ];
        if self.live_ran() {
            rows.extend([
                ("live dns", self.dns.live.cpu_ms_per_decision, peer.map(|p| p.dns.live.cpu_ms_per_decision)),
                (
                    "live bypass-dns",
                    self.bypass_dns.live.cpu_ms_per_decision,
                    peer.map(|p| p.bypass_dns.live.cpu_ms_per_decision),
                ),
            ]);
        }
        for (name, ours, peer) in rows {
            let (theirs, ratio) = match peer {
                Some(p) => {
                    (format!("{p:.2}"), cpu_ratio(ours, p).map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")))
                }
                None => ("-".to_owned(), "-".to_owned()),
            };
            let _ = writeln!(out, "{name:<20} {ours:>8.2} {theirs:>8} {ratio:>9}");
        }
    }

    /// The apiserver's requests and read-response KiB per decision, ours beside the peer's, for
    /// catch-up and (when it ran) live in each mode.
    fn apiserver_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>9} {:>9}",
            "apiserver/decision", "ours req", "peer req", "ours KiB", "peer KiB"
        );
        let peer = self.peer.as_ref();
        let mut lines = vec![
            ("catch-up dns", self.dns.catchup.apiserver.as_ref(), peer.and_then(|p| p.dns.catchup.apiserver.as_ref())),
            (
                "catch-up bypass-dns",
                self.bypass_dns.catchup.apiserver.as_ref(),
                peer.and_then(|p| p.bypass_dns.catchup.apiserver.as_ref()),
            ),
        ];
        if self.live_ran() {
            lines.extend([
                ("live dns", self.dns.live.apiserver.as_ref(), peer.and_then(|p| p.dns.live.apiserver.as_ref())),
                (
                    "live bypass-dns",
                    self.bypass_dns.live.apiserver.as_ref(),
                    peer.and_then(|p| p.bypass_dns.live.apiserver.as_ref()),
                ),
            ]);
        }
        let mut closed = Vec::new();
        for (name, ours, theirs) in lines {
            let (ours_requests, ours_kib) = per_decision(ours);
            let (peer_requests, peer_kib) = per_decision(theirs);
            let _ = writeln!(out, "{name:<20} {ours_requests:>9} {peer_requests:>9} {ours_kib:>9} {peer_kib:>9}");
            for (who, cost) in [("ours", ours), ("peer", theirs)] {
                if let Some(n) = cost.map(|c| c.terminated_watchers).filter(|n| *n > 0) {
                    closed.push(format!("{name} {who}: {n}"));
                }
            }
        }
        if !closed.is_empty() {
            let _ = writeln!(out, "watchers the apiserver closed as too slow (any client's): {}", closed.join(", "));
        }
    }

    /// Whether the burst phases ran (not `--only-storm`).
    fn bursts_ran(&self) -> bool {
        self.storm.is_none() || self.limit.seconds > 0.0
    }

    /// Whether the live phases ran (not `--no-live`).
    fn live_ran(&self) -> bool {
        self.dns.live.achieved_rate > 0.0
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

/// Requests and KiB per decision of `cost` as text, `-` when not measured.
fn per_decision(cost: Option<&ApiserverCost>) -> (String, String) {
    match cost {
        Some(c) => (
            format!("{:.2}", c.requests_per_decision),
            c.bytes_per_decision.map_or_else(|| "-".to_owned(), |b| format!("{:.2}", b / 1024.0)),
        ),
        None => ("-".to_owned(), "-".to_owned()),
    }
}

/// The storm's figures as three lines, and its Nodes and apiserver cost when measured.
fn storm_lines(s: &Storm, out: &mut String) {
    let _ = writeln!(
        out,
        "storm: {} nodes ({} with three CSRs), {} CSRs created in {:.1} s; T_limit {:.2} s; ready {:.2} s; \
         T_catchup {:.2} s, ratio {:.2} ({:.2} without the {:.1} s apiserver restart)",
        s.nodes,
        s.duplicated_nodes,
        s.csrs,
        s.create_seconds,
        s.limit_seconds,
        s.ready_seconds,
        s.seconds,
        s.ratio,
        s.ratio_without_outage,
        s.outage_seconds
    );
    let _ = writeln!(
        out,
        "storm RSS MiB: idle {:.1}, peak {:.1} (before the relist {:.1}, during it {:.1}), after {:.1}; \
         {:.2} CPU s, {:.3} CPU ms per decision",
        s.idle_mib,
        s.peak_mib,
        s.peak_before_relist_mib,
        s.relist_peak_mib,
        s.after_mib,
        s.cpu_seconds,
        s.cpu_ms_per_decision
    );
    let _ = writeln!(
        out,
        "storm at the end: {} approved, {} denied ({} Superseded), {} pending; approvals per node max {}, \
         {} nodes approved more than once, {} not approved",
        s.approved,
        s.denied,
        s.denied_superseded,
        s.pending,
        s.approvals_per_node_max,
        s.nodes_approved_more_than_once,
        s.nodes_not_approved
    );
    if let Some(n) = &s.node_objects {
        let _ = writeln!(
            out,
            "storm Nodes: {} created in {:.1} s ({:.0}/s), {} bytes of JSON each; ours with --verify-node-addresses{}",
            n.nodes,
            n.seconds,
            n.per_second,
            n.node_json_bytes,
            if n.node_rule { " and a rule reading node" } else { " alone" }
        );
    }
    let (requests, kib) = per_decision(s.apiserver.as_ref());
    let _ = writeln!(out, "storm apiserver per decision: {requests} requests, {kib} KiB (read responses)");
}

#[cfg(test)]
mod tests {
    use crate::apiserver::ApiserverCost;
    use crate::report::{PeerReport, Report};

    /// The figures of the row `name` of `table`.
    fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
        table.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default().split_whitespace().collect()
    }

    #[test]
    fn cpu_per_decision_sits_beside_the_peers_with_their_ratio() {
        let mut report = Report::default();
        report.dns.catchup.cpu_ms_per_decision = 1.5;
        let alone = report.table();
        assert_eq!(row(&alone, "catch-up dns"), ["1.50", "-", "-"]);
        assert!(!alone.contains("live dns"), "{alone}");

        let mut peer = PeerReport::default();
        peer.dns.catchup.cpu_ms_per_decision = 3.0;
        report.peer = Some(peer);
        report.dns.live.achieved_rate = 100.0;
        let both = report.table();
        assert_eq!(row(&both, "catch-up dns"), ["1.50", "3.00", "0.50x"]);
        assert_eq!(row(&both, "catch-up bypass-dns"), ["0.00", "0.00", "-"]);
        assert_eq!(row(&both, "live dns"), ["0.00", "0.00", "-"]);

        let cost = |requests_per_decision, bytes: Option<f64>| ApiserverCost {
            requests_per_decision,
            bytes_per_decision: bytes,
            ..ApiserverCost::default()
        };
        report.dns.catchup.apiserver = Some(cost(1.25, Some(2048.0)));
        if let Some(peer) = report.peer.as_mut() {
            peer.dns.catchup.apiserver = Some(cost(3.0, None));
        }
        let measured = report.table();
        let apiserver = measured.split("apiserver/decision").nth(1).unwrap_or_default();
        assert_eq!(row(apiserver, "catch-up dns"), ["1.25", "3.00", "2.00", "-"]);
        assert_eq!(row(apiserver, "live bypass-dns"), ["-", "-", "-", "-"]);
    }
}
