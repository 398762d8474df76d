//! Prometheus metrics, served as OpenMetrics text by [`crate::admin`].
//!
//! Every metric of the approver is named `node_csr_approver_*`; the standard process metrics
//! (`process_*`) are read from `/proc` at scrape time. Labels only ever take values from small
//! fixed sets (decision kinds, reason codes, failure kinds, write results), never CSR or node
//! names, so the number of series is bounded.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::policy::{DecisionKind, Reason};
use crate::policy::{DnsFailure, Resolution, Resolver};

/// Prefix of every approver metric.
pub const PREFIX: &str = "node_csr_approver";

/// Histogram buckets in seconds, from 100 µs to 10 s.
const DURATION_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The outcome of a write to a CSR's `approval` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteResult {
    /// The condition was written.
    Success,
    /// The resourceVersion precondition failed: another writer got there first.
    Conflict,
    /// The CSR was gone (deleted before the decision was written).
    NotFound,
    /// Any other failure.
    Error,
}

impl WriteResult {
    /// Every result, in label order.
    pub const ALL: [WriteResult; 4] =
        [WriteResult::Success, WriteResult::Conflict, WriteResult::NotFound, WriteResult::Error];

    /// The `result` label value: `success`, `conflict`, `not_found` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteResult::Success => "success",
            WriteResult::Conflict => "conflict",
            WriteResult::NotFound => "not_found",
            WriteResult::Error => "error",
        }
    }
}

/// The `kind` label value of `dns_failures_total` for a failure.
fn failure_kind(failure: &DnsFailure) -> &'static str {
    match failure {
        DnsFailure::Timeout => "timeout",
        DnsFailure::ServFail => "servfail",
        DnsFailure::Refused => "refused",
        DnsFailure::Other(_) => "other",
    }
}

/// Every `kind` label value of `dns_failures_total`.
const FAILURE_KINDS: [&str; 4] = ["timeout", "servfail", "refused", "other"];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The approver's metrics and the registry they are served from. Cloning is cheap and every clone
/// updates the same metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    decisions: Family<DecisionLabels, Counter>,
    evaluation_duration: Histogram,
    dns_lookup_duration: Histogram,
    dns_failures: Family<KindLabels, Counter>,
    waiting_retry: Gauge,
    leader: Gauge,
    writes: Family<ResultLabels, Counter>,
    pending_node_csrs: Gauge,
    pending_limit: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a new registry (help texts get their final period from the
    /// registry). Failure kinds and write results start at zero so
    /// that rates and alerts work before the first event.
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let registry = root.sub_registry_with_prefix(PREFIX);

        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register("decisions", "CSR decisions by decision and reason code", decisions.clone());
        let evaluation_duration = Histogram::new(DURATION_BUCKETS);
        registry.register_with_unit(
            "evaluation_duration",
            "Time to evaluate one CSR, evidence gathering included",
            Unit::Seconds,
            evaluation_duration.clone(),
        );
        let dns_lookup_duration = Histogram::new(DURATION_BUCKETS);
        registry.register_with_unit(
            "dns_lookup_duration",
            "Time to resolve one DNS name (A and AAAA together), whatever the outcome",
            Unit::Seconds,
            dns_lookup_duration.clone(),
        );
        let dns_failures = Family::<KindLabels, Counter>::default();
        for kind in FAILURE_KINDS {
            dns_failures.get_or_create_owned(&KindLabels { kind });
        }
        registry.register(
            "dns_failures",
            "DNS lookups without a definitive answer, by kind (timeout, servfail, refused, other)",
            dns_failures.clone(),
        );
        let waiting_retry = Gauge::default();
        registry.register("csrs_waiting_retry", "CSRs waiting to be evaluated again", waiting_retry.clone());
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the leader lease, else 0", leader.clone());
        let writes = Family::<ResultLabels, Counter>::default();
        for result in WriteResult::ALL {
            writes.get_or_create_owned(&ResultLabels { result: result.as_str() });
        }
        registry.register(
            "writes",
            "Writes to the approval subresource, by result (success, conflict, not_found, error)",
            writes.clone(),
        );

        let pending_node_csrs = Gauge::default();
        registry.register(
            "pending_node_csrs",
            "Machine mode: pending node CSRs younger than an hour, as the pending brake counts them",
            pending_node_csrs.clone(),
        );
        let pending_limit = Gauge::default();
        registry.register(
            "pending_node_csrs_limit",
            "Machine mode: max(Machines, Nodes) + --max-pending-delta; approvals pause above it",
            pending_limit.clone(),
        );

        Self {
            registry: Arc::new(root),
            decisions,
            evaluation_duration,
            dns_lookup_duration,
            dns_failures,
            waiting_retry,
            leader,
            writes,
            pending_node_csrs,
            pending_limit,
        }
    }

    /// Sets the pending brake's count and limit (machine mode).
    pub fn set_pending_brake(&self, pending: usize, limit: usize) {
        self.pending_node_csrs.set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.pending_limit.set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    /// Counts one decision.
    pub fn record_decision(&self, kind: DecisionKind, reason: Reason) {
        self.decisions.get_or_create(&DecisionLabels { decision: kind.as_str(), reason: reason.as_str() }).inc();
    }

    /// Observes the duration of one evaluation.
    pub fn observe_evaluation(&self, elapsed: Duration) {
        self.evaluation_duration.observe(elapsed.as_secs_f64());
    }

    /// Observes one DNS lookup and counts it as a failure if it gave no definitive answer.
    pub fn observe_dns_lookup(&self, elapsed: Duration, resolution: &Resolution) {
        self.dns_lookup_duration.observe(elapsed.as_secs_f64());
        if let Resolution::Unavailable(failure) = resolution {
            self.dns_failures.get_or_create(&KindLabels { kind: failure_kind(failure) }).inc();
        }
    }

    /// Sets the number of CSRs waiting to be evaluated again.
    pub fn set_waiting_retry(&self, count: usize) {
        self.waiting_retry.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Sets whether this replica is the leader.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Counts one write to the approval subresource.
    pub fn record_write(&self, result: WriteResult) {
        self.writes.get_or_create(&ResultLabels { result: result.as_str() }).inc();
    }

    /// Every metric as OpenMetrics text, ending with `# EOF`.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// A [`Resolver`] that times every lookup and counts failures in [`Metrics`].
#[derive(Debug, Clone)]
pub struct MeteredResolver<R> {
    inner: R,
    metrics: Metrics,
}

impl<R> MeteredResolver<R> {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: R, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }

    /// The wrapped resolver.
    pub fn inner(&self) -> &R {
        &self.inner
    }
}

impl<R: Resolver> Resolver for MeteredResolver<R> {
    async fn resolve(&self, name: &str) -> Resolution {
        let start = Instant::now();
        let resolution = self.inner.resolve(name).await;
        self.metrics.observe_dns_lookup(start.elapsed(), &resolution);
        resolution
    }
}

/// Emits the standard process metrics, read from `/proc` on each scrape. A value that cannot be
/// read (another OS, a restricted `/proc`) is left out rather than failing the scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            let help = "Total user and system CPU time spent in seconds.";
            metric.encode(encoder.encode_descriptor(
                "process_cpu",
                help,
                Some(&Unit::Seconds),
                metric.metric_type(),
            )?)?;
        }
        if let Some(bytes) = stats.resident_memory_bytes {
            let metric = ConstGauge::new(bytes);
            let help = "Resident memory size in bytes.";
            let unit = Some(&Unit::Bytes);
            metric.encode(encoder.encode_descriptor("process_resident_memory", help, unit, metric.metric_type())?)?;
        }
        if let Some(fds) = stats.open_fds {
            let metric = ConstGauge::new(fds);
            let help = "Number of open file descriptors.";
            metric.encode(encoder.encode_descriptor("process_open_fds", help, None, metric.metric_type())?)?;
        }
        if let Some(seconds) = stats.start_time_seconds {
            let metric = ConstGauge::new(seconds);
            let help = "Start time of the process since unix epoch in seconds.";
            let unit = Some(&Unit::Seconds);
            metric.encode(encoder.encode_descriptor("process_start_time", help, unit, metric.metric_type())?)?;
        }
        Ok(())
    }
}

/// Linux's `USER_HZ`: the unit of the times in `/proc/<pid>/stat`, 100 on every architecture
/// Kubernetes runs on.
const USER_HZ: f64 = 100.0;

/// Process statistics from `/proc`; `None` where a value could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    resident_memory_bytes: Option<u64>,
    open_fds: Option<u64>,
    start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads this process's statistics (Linux only): CPU time and start time from
    /// `/proc/self/stat` (start time relative to `btime` in `/proc/stat`), resident memory from
    /// `VmRSS` in `/proc/self/status` (in kB, so no page-size assumption), open descriptors by
    /// counting `/proc/self/fd`.
    fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let times = stat.as_deref().and_then(parse_stat);
        let boot_time = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(parse_boot_time);
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|entries| entries.count() as u64);
        Self {
            cpu_seconds: times.map(|t| (t.utime + t.stime) as f64 / USER_HZ),
            resident_memory_bytes: status.as_deref().and_then(parse_vm_rss),
            open_fds,
            start_time_seconds: times.zip(boot_time).map(|(t, boot)| boot as f64 + t.starttime as f64 / USER_HZ),
        }
    }
}

/// Clock-tick fields of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatTimes {
    utime: u64,
    stime: u64,
    starttime: u64,
}

/// Parses `utime` (field 14), `stime` (15) and `starttime` (22) of `/proc/<pid>/stat`. Fields are
/// counted after the last `)`, since the command name may hold spaces and parentheses.
fn parse_stat(stat: &str) -> Option<StatTimes> {
    let (_, after_comm) = stat.rsplit_once(')')?;
    // Field 3 (state) is the first after the command name.
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(StatTimes { utime: field(14)?, stime: field(15)?, starttime: field(22)? })
}

/// Parses the `btime` line of `/proc/stat`: the boot time in seconds since the epoch.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix("btime ")).and_then(|value| value.trim().parse().ok())
}

/// Parses the `VmRSS:` line of `/proc/<pid>/status` (in kB) into bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let value = status.lines().find_map(|line| line.strip_prefix("VmRSS:"))?;
    let kilobytes: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kilobytes.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 75 0 0 20 0 9 0 123456 \
                    1000000 3000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(stat), Some(StatTimes { utime: 150, stime: 75, starttime: 123456 }));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
        assert_eq!(parse_vm_rss("Name:\tx\nVmRSS:\t   2048 kB\nThreads:\t3\n"), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let stats = ProcessStats::read();
        assert!(stats.cpu_seconds.is_some());
        assert!(stats.resident_memory_bytes.is_some_and(|bytes| bytes > 0));
        assert!(stats.open_fds.is_some_and(|fds| fds >= 3));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(stats.start_time_seconds.is_some_and(|start| start > now - 3600.0 && start <= now + 1.0));
    }

    #[test]
    fn labels_are_bounded() {
        let metrics = Metrics::new();
        metrics.record_decision(DecisionKind::Deny, Reason::HostnameMismatch);
        metrics.record_write(WriteResult::Conflict);
        metrics.set_leader(true);
        metrics.set_waiting_retry(3);
        let text = metrics.encode().unwrap();
        assert!(text.contains("node_csr_approver_decisions_total{decision=\"deny\",reason=\"HostnameMismatch\"} 1\n"));
        assert!(text.contains("node_csr_approver_writes_total{result=\"conflict\"} 1\n"));
        assert!(text.contains("node_csr_approver_writes_total{result=\"success\"} 0\n"));
        assert!(text.contains("node_csr_approver_dns_failures_total{kind=\"timeout\"} 0\n"));
        assert!(text.contains("node_csr_approver_leader 1\n"));
        assert!(text.contains("node_csr_approver_csrs_waiting_retry 3\n"));
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("..\n"), "help texts end with exactly one period: {text}");
    }
}
