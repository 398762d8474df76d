//! Prometheus metrics, served as OpenMetrics text by [`crate::admin`].
//!
//! Every metric of the approver is named `node_csr_approver_*`; the standard process metrics
//! (`process_*`) are read from `/proc` at scrape time. Labels only ever take values from small
//! fixed sets (decision kinds, reason codes, failure kinds, write results, audit states), never
//! CSR or node names, so the number of series is bounded; the one exception, the periodic audit's
//! per-Node series, is off unless `--audit-node-metrics` asks for it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

mod process;

use crate::audit::findings::Finding;
use crate::audit::metrics::AuditMetrics;
use crate::kubernetes::object_fields::ObjectKind;
use crate::policy::{DecisionKind, DnsFailure, Reason, Resolution, Resolver};
use process::ProcessCollector;

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
    /// Any other failure: an error status, a broken connection, no answer in time.
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

/// What started a pass over every undecided CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassTrigger {
    /// The CSR watch completed a list or relist.
    Relist,
    /// This replica became able to write.
    Writable,
    /// The resync period elapsed.
    Periodic,
}

impl PassTrigger {
    /// Every trigger, in label order.
    pub const ALL: [PassTrigger; 3] = [PassTrigger::Relist, PassTrigger::Writable, PassTrigger::Periodic];

    /// The `trigger` label value: `relist`, `writable` or `periodic`.
    pub fn as_str(self) -> &'static str {
        match self {
            PassTrigger::Relist => "relist",
            PassTrigger::Writable => "writable",
            PassTrigger::Periodic => "periodic",
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
struct TriggerLabels {
    trigger: &'static str,
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
    oldest_undecided: Gauge,
    passes: Family<TriggerLabels, Counter>,
    unaddressable_csrs: Counter,
    undecodable_objects: Family<KindLabels, Counter>,
    audit: AuditMetrics,
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
        let oldest_undecided = Gauge::default();
        registry.register_with_unit(
            "oldest_undecided_csr_age",
            "Age of the oldest CSR this replica must decide and has not (0 when none, and on standbys)",
            Unit::Seconds,
            oldest_undecided.clone(),
        );
        let passes = Family::<TriggerLabels, Counter>::default();
        for trigger in PassTrigger::ALL {
            passes.get_or_create_owned(&TriggerLabels { trigger: trigger.as_str() });
        }
        registry.register(
            "reconcile_passes",
            "Passes over every undecided CSR, by trigger (relist, writable, periodic)",
            passes.clone(),
        );
        let unaddressable_csrs = Counter::default();
        registry.register(
            "unaddressable_csrs",
            "CSRs whose name is longer than 253 bytes, which no write can address: kept cut, never decided",
            unaddressable_csrs.clone(),
        );

        let undecodable_objects = Family::<KindLabels, Counter>::default();
        for kind in ObjectKind::ALL {
            undecodable_objects.get_or_create_owned(&KindLabels { kind: kind.as_str() });
        }
        registry.register(
            "undecodable_objects",
            "Objects skipped because they could not be decoded, by kind, each time one is skipped (a list, a watch event, a read)",
            undecodable_objects.clone(),
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

        let findings: Vec<&'static str> = Finding::value_variants().iter().map(|finding| finding.as_str()).collect();
        let audit = AuditMetrics::register(registry, &findings);

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
            oldest_undecided,
            passes,
            unaddressable_csrs,
            undecodable_objects,
            audit,
        }
    }

    /// The periodic audit's metrics, registered with the rest.
    pub(crate) fn audit(&self) -> &AuditMetrics {
        &self.audit
    }

    /// Counts one CSR found with a name too long to be written (once per CSR).
    pub fn record_unaddressable_csr(&self) {
        self.unaddressable_csrs.inc();
    }

    /// Counts an object of `kind` skipped because it could not be decoded.
    pub fn record_undecodable(&self, kind: ObjectKind) {
        self.undecodable_objects.get_or_create(&KindLabels { kind: kind.as_str() }).inc();
    }

    /// Sets the age of the oldest CSR this replica must decide and has not.
    pub fn set_oldest_undecided(&self, age: Duration) {
        self.oldest_undecided.set(i64::try_from(age.as_secs()).unwrap_or(i64::MAX));
    }

    /// Counts one pass over every undecided CSR.
    pub fn record_pass(&self, trigger: PassTrigger) {
        self.passes.get_or_create(&TriggerLabels { trigger: trigger.as_str() }).inc();
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

    /// Keeps the leader gauge equal to what `changes` says (whether the Lease is held), until
    /// its sender is gone.
    pub async fn follow_leader(self, mut changes: tokio::sync::watch::Receiver<bool>) {
        while changes.changed().await.is_ok() {
            self.set_leader(*changes.borrow_and_update());
        }
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
}

impl<R: Resolver> Resolver for MeteredResolver<R> {
    async fn resolve(&self, name: &str) -> Resolution {
        let start = Instant::now();
        let resolution = self.inner.resolve(name).await;
        self.metrics.observe_dns_lookup(start.elapsed(), &resolution);
        resolution
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        let metrics = Metrics::new();
        metrics.record_decision(DecisionKind::Deny, Reason::HostnameMismatch);
        metrics.record_write(WriteResult::Conflict);
        metrics.set_leader(true);
        metrics.set_waiting_retry(3);
        metrics.set_oldest_undecided(Duration::from_millis(90_500));
        metrics.record_pass(PassTrigger::Writable);
        let text = metrics.encode().unwrap();
        assert!(text.contains("node_csr_approver_decisions_total{decision=\"deny\",reason=\"HostnameMismatch\"} 1\n"));
        assert!(text.contains("node_csr_approver_writes_total{result=\"conflict\"} 1\n"));
        assert!(text.contains("node_csr_approver_writes_total{result=\"success\"} 0\n"));
        assert!(text.contains("node_csr_approver_dns_failures_total{kind=\"timeout\"} 0\n"));
        assert!(text.contains("node_csr_approver_leader 1\n"));
        assert!(text.contains("node_csr_approver_csrs_waiting_retry 3\n"));
        assert!(text.contains("node_csr_approver_oldest_undecided_csr_age_seconds 90\n"), "{text}");
        assert!(text.contains("node_csr_approver_reconcile_passes_total{trigger=\"writable\"} 1\n"));
        assert!(text.contains("node_csr_approver_reconcile_passes_total{trigger=\"relist\"} 0\n"));
        assert!(!text.contains("unaddressable\"}"), "no write result the controller cannot reach: {text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("..\n"), "help texts end with exactly one period: {text}");
    }
}
