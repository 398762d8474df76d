//! The periodic audit's metrics: Nodes by state and Nodes by finding (every state and finding
//! always present), the soonest notAfter of the certificates served, the last completed scan;
//! and, only when asked for (`--audit-node-metrics`), one series per Node, removed when the Node
//! is gone. The findings' names come in as values: the metrics root registers these metrics, and
//! the audit's metrics import nothing of the crate.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FindingLabels {
    finding: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeStateLabels {
    node: String,
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// One Node as a scan found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditedNode<'a> {
    /// The Node's name.
    pub node: &'a str,
    /// Its state: `compliant` or one of the findings' names.
    pub state: &'static str,
    /// The name of every finding it has (its state is the first).
    pub findings: &'a [&'static str],
    /// The notAfter of the certificate its kubelet serves, in seconds since the epoch, when read.
    pub not_after: Option<i64>,
}

/// What a scan in progress has counted: Nodes by state and by finding, the soonest notAfter, and
/// each Node's name, state and notAfter only when the per-Node series are exported
/// ([`AuditMetrics::tally`]): without them it holds nothing per Node.
#[derive(Debug, Default)]
pub(crate) struct ScanTally {
    states: HashMap<&'static str, usize>,
    findings: HashMap<&'static str, usize>,
    soonest_expiry: Option<i64>,
    per_node: Option<Vec<(String, &'static str, Option<i64>)>>,
}

impl ScanTally {
    /// Counts one Node as the scan found it.
    pub(crate) fn add(&mut self, node: AuditedNode<'_>) {
        *self.states.entry(node.state).or_default() += 1;
        for &finding in node.findings {
            *self.findings.entry(finding).or_default() += 1;
        }
        self.soonest_expiry = self.soonest_expiry.into_iter().chain(node.not_after).min();
        if let Some(nodes) = self.per_node.as_mut() {
            nodes.push((node.node.to_owned(), node.state, node.not_after));
        }
    }
}

/// The Nodes with series exported, and the state each series names.
type NodeSeries = HashMap<String, &'static str>;

/// The periodic audit's metrics. Cloning is cheap and every clone updates the same metrics.
#[derive(Debug, Clone)]
pub(crate) struct AuditMetrics {
    /// The name of every finding, most severe first.
    finding_names: Arc<[&'static str]>,
    nodes: Family<StateLabels, Gauge>,
    findings: Family<FindingLabels, Gauge>,
    soonest_expiry: Gauge,
    last_scan: Gauge,
    last_duration: Gauge<f64, AtomicU64>,
    period: Gauge,
    node_state: Family<NodeStateLabels, Gauge>,
    node_expiry: Family<NodeLabels, Gauge>,
    /// The per-Node series exported; `None` unless `--audit-node-metrics`.
    per_node: Arc<Mutex<Option<NodeSeries>>>,
}

impl AuditMetrics {
    /// Registers the audit's metrics in `registry` (prefixed), every state's and finding's count
    /// at 0: the states are `compliant` and the findings, named by `finding_names`.
    pub(crate) fn register(registry: &mut Registry, finding_names: &[&'static str]) -> AuditMetrics {
        let finding_names: Arc<[&'static str]> = finding_names.into();
        let nodes = Family::<StateLabels, Gauge>::default();
        for state in std::iter::once("compliant").chain(finding_names.iter().copied()) {
            nodes.get_or_create_owned(&StateLabels { state });
        }
        registry.register(
            "audit_nodes",
            "Periodic audit: Nodes by the state of the serving certificate their kubelet presents, as the last scan found them (0 on a replica that does not write)",
            nodes.clone(),
        );
        let findings = Family::<FindingLabels, Gauge>::default();
        for &finding in finding_names.iter() {
            findings.get_or_create_owned(&FindingLabels { finding });
        }
        registry.register(
            "audit_findings",
            "Periodic audit: Nodes with each finding, a Node counted under every finding it has, as the last scan found them (0 on a replica that does not write)",
            findings.clone(),
        );
        let soonest_expiry = Gauge::default();
        registry.register_with_unit(
            "audit_soonest_expiry_timestamp",
            "Periodic audit: the soonest notAfter among the serving certificates kubelets presented (0 when none was read)",
            Unit::Seconds,
            soonest_expiry.clone(),
        );
        let last_scan = Gauge::default();
        registry.register_with_unit(
            "audit_last_scan_timestamp",
            "Periodic audit: when this replica's last scan completed (0 before the first)",
            Unit::Seconds,
            last_scan.clone(),
        );
        let last_duration = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "audit_last_scan_duration",
            "Periodic audit: how long this replica's last completed scan took",
            Unit::Seconds,
            last_duration.clone(),
        );
        let period = Gauge::default();
        registry.register_with_unit(
            "audit_period",
            "Periodic audit: --audit-period (0 when off)",
            Unit::Seconds,
            period.clone(),
        );
        let node_state = Family::<NodeStateLabels, Gauge>::default();
        registry.register(
            "audit_node_state",
            "Periodic audit with --audit-node-metrics: 1 for each Node's state",
            node_state.clone(),
        );
        let node_expiry = Family::<NodeLabels, Gauge>::default();
        registry.register_with_unit(
            "audit_node_expiry_timestamp",
            "Periodic audit with --audit-node-metrics: the notAfter of the serving certificate each Node's kubelet presents",
            Unit::Seconds,
            node_expiry.clone(),
        );
        AuditMetrics {
            finding_names,
            nodes,
            findings,
            soonest_expiry,
            last_scan,
            last_duration,
            period,
            node_state,
            node_expiry,
            per_node: Arc::new(Mutex::new(None)),
        }
    }

    /// Every state a Node can be in: `compliant`, then each finding.
    fn states(&self) -> impl Iterator<Item = &'static str> + '_ {
        std::iter::once("compliant").chain(self.finding_names.iter().copied())
    }

    /// Turns the audit's metrics on: its period, and the per-Node series when `per_node`.
    pub(crate) fn enable(&self, period: Duration, per_node: bool) {
        self.period.set(i64::try_from(period.as_secs()).unwrap_or(i64::MAX));
        *self.series() = per_node.then(HashMap::new);
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Option<NodeSeries>> {
        self.per_node.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An empty tally of a scan: it keeps the Nodes' names and states only when the per-Node
    /// series are exported.
    pub(crate) fn tally(&self) -> ScanTally {
        ScanTally { per_node: self.series().as_ref().map(|_| Vec::new()), ..ScanTally::default() }
    }

    /// Sets the counts, the soonest notAfter and the per-Node series from the `tally` of one
    /// completed scan (every Node listed), which ended at `finished` (seconds since the epoch)
    /// after `took`.
    pub(crate) fn record_scan(&self, tally: ScanTally, finished: f64, took: Duration) {
        let count = |counts: &HashMap<&'static str, usize>, name| {
            i64::try_from(counts.get(name).copied().unwrap_or(0)).unwrap_or(i64::MAX)
        };
        for state in self.states() {
            self.nodes.get_or_create(&StateLabels { state }).set(count(&tally.states, state));
        }
        for &finding in self.finding_names.iter() {
            self.findings.get_or_create(&FindingLabels { finding }).set(count(&tally.findings, finding));
        }
        self.soonest_expiry.set(tally.soonest_expiry.unwrap_or(0));
        self.last_scan.set(finished as i64);
        self.last_duration.set(took.as_secs_f64());
        let mut series = self.series();
        let (Some(exported), Some(nodes)) = (series.as_mut(), tally.per_node) else { return };
        let mut now = HashMap::with_capacity(nodes.len());
        for (node, state, not_after) in nodes {
            if let Some(state) = exported.remove(&node).filter(|before| *before != state) {
                self.node_state.remove(&NodeStateLabels { node: node.clone(), state });
            }
            self.node_state.get_or_create(&NodeStateLabels { node: node.clone(), state }).set(1);
            let labels = NodeLabels { node: node.clone() };
            match not_after {
                Some(not_after) => drop(self.node_expiry.get_or_create(&labels).set(not_after)),
                None => drop(self.node_expiry.remove(&labels)),
            }
            now.insert(node, state);
        }
        self.remove_nodes(exported.drain());
        *exported = now;
    }

    /// Sets the counts and the soonest notAfter to 0 and removes every per-Node series: this
    /// replica no longer writes, and the one that does reports them.
    pub(crate) fn clear(&self) {
        for state in self.states() {
            self.nodes.get_or_create(&StateLabels { state }).set(0);
        }
        for &finding in self.finding_names.iter() {
            self.findings.get_or_create(&FindingLabels { finding }).set(0);
        }
        self.soonest_expiry.set(0);
        if let Some(exported) = self.series().as_mut() {
            self.remove_nodes(exported.drain());
        }
    }

    fn remove_nodes(&self, gone: impl Iterator<Item = (String, &'static str)>) {
        for (node, state) in gone {
            self.node_state.remove(&NodeStateLabels { node: node.clone(), state });
            self.node_expiry.remove(&NodeLabels { node });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use clap::ValueEnum;

    use super::*;
    use crate::audit::findings::Finding;
    use crate::metrics::Metrics;

    /// The names of `findings`, most severe first.
    fn set(findings: &[Finding]) -> Vec<&'static str> {
        let findings: BTreeSet<Finding> = findings.iter().copied().collect();
        findings.iter().map(|finding| finding.as_str()).collect()
    }

    fn node<'a>(node: &'a str, findings: &'a [&'static str], not_after: Option<i64>) -> AuditedNode<'a> {
        AuditedNode { node, state: findings.first().copied().unwrap_or("compliant"), findings, not_after }
    }

    /// Records a scan of `nodes` as the periodic audit does: tallied one at a time.
    fn record(metrics: &Metrics, nodes: &[AuditedNode<'_>], finished: f64, took: Duration) {
        let mut tally = metrics.audit().tally();
        for node in nodes {
            tally.add(*node);
        }
        metrics.audit().record_scan(tally, finished, took);
    }

    fn lines(metrics: &Metrics, prefix: &str) -> Vec<String> {
        let text = metrics.encode().unwrap();
        text.lines().filter(|line| line.starts_with(prefix)).map(str::to_owned).collect()
    }

    fn sorted(metrics: &Metrics) -> Vec<String> {
        let mut series = lines(metrics, "node_csr_approver_audit_node_");
        series.sort();
        series
    }

    #[test]
    fn every_state_is_counted_and_present_at_zero() {
        let metrics = Metrics::new();
        let counts = lines(&metrics, "node_csr_approver_audit_nodes{");
        assert_eq!(counts.len(), 10, "{counts:#?}");
        assert!(counts.iter().all(|line| line.ends_with(" 0")), "{counts:#?}");
        metrics.audit().enable(Duration::from_secs(3600), false);
        let (none, self_signed, unreachable) = (set(&[]), set(&[Finding::SelfSigned]), set(&[Finding::Unreachable]));
        let scan = [
            node("a", &none, Some(2_000)),
            node("b", &self_signed, Some(1_000)),
            node("c", &unreachable, None),
            node("d", &self_signed, Some(3_000)),
        ];
        record(&metrics, &scan, 1_700_000_000.5, Duration::from_millis(1500));
        let text = metrics.encode().unwrap();
        for expected in [
            "node_csr_approver_audit_nodes{state=\"compliant\"} 1\n",
            "node_csr_approver_audit_nodes{state=\"self-signed\"} 2\n",
            "node_csr_approver_audit_nodes{state=\"unreachable\"} 1\n",
            "node_csr_approver_audit_nodes{state=\"expiring\"} 0\n",
            "node_csr_approver_audit_soonest_expiry_timestamp_seconds 1000\n",
            "node_csr_approver_audit_last_scan_timestamp_seconds 1700000000\n",
            "node_csr_approver_audit_last_scan_duration_seconds 1.5\n",
            "node_csr_approver_audit_period_seconds 3600\n",
        ] {
            assert!(text.contains(expected), "{expected}{text}");
        }
        assert_eq!(lines(&metrics, "node_csr_approver_audit_node_"), Vec::<String>::new(), "off by default");
        metrics.audit().clear();
        assert!(lines(&metrics, "node_csr_approver_audit_nodes{").iter().all(|line| line.ends_with(" 0")));
        assert_eq!(
            lines(&metrics, "node_csr_approver_audit_soonest"),
            ["node_csr_approver_audit_soonest_expiry_timestamp_seconds 0"]
        );
        assert_eq!(
            lines(&metrics, "node_csr_approver_audit_last_scan_t"),
            ["node_csr_approver_audit_last_scan_timestamp_seconds 1700000000"],
            "kept"
        );
    }

    #[test]
    fn per_node_series_follow_the_nodes_and_their_states() {
        let metrics = Metrics::new();
        metrics.audit().enable(Duration::from_secs(60), true);
        let (none, self_signed) = (set(&[]), set(&[Finding::SelfSigned]));
        let (unreachable, expiring) = (set(&[Finding::Unreachable]), set(&[Finding::Expiring]));
        record(&metrics, &[node("a", &none, Some(2_000)), node("b", &unreachable, None)], 1.0, Duration::ZERO);
        assert_eq!(
            sorted(&metrics),
            [
                "node_csr_approver_audit_node_expiry_timestamp_seconds{node=\"a\"} 2000",
                "node_csr_approver_audit_node_state{node=\"a\",state=\"compliant\"} 1",
                "node_csr_approver_audit_node_state{node=\"b\",state=\"unreachable\"} 1",
            ]
        );
        record(&metrics, &[node("a", &self_signed, None), node("c", &expiring, Some(5))], 2.0, Duration::ZERO);
        assert_eq!(
            sorted(&metrics),
            [
                "node_csr_approver_audit_node_expiry_timestamp_seconds{node=\"c\"} 5",
                "node_csr_approver_audit_node_state{node=\"a\",state=\"self-signed\"} 1",
                "node_csr_approver_audit_node_state{node=\"c\",state=\"expiring\"} 1",
            ],
            "b is gone, a changed state and lost its certificate"
        );
        metrics.audit().clear();
        assert_eq!(lines(&metrics, "node_csr_approver_audit_node_"), Vec::<String>::new());
    }

    #[test]
    fn a_node_counts_under_every_finding_it_has() {
        let metrics = Metrics::new();
        let counts = lines(&metrics, "node_csr_approver_audit_findings{");
        assert_eq!(counts.len(), Finding::value_variants().len(), "one series per finding: {counts:#?}");
        assert!(counts.iter().all(|line| line.ends_with(" 0")), "{counts:#?}");
        assert!(!counts.iter().any(|line| line.contains("=\"compliant\"")), "no finding is `compliant`: {counts:#?}");
        metrics.audit().enable(Duration::from_secs(3600), false);
        let other_ca = set(&[Finding::Untrusted, Finding::NonCompliant]);
        let own = set(&[Finding::SelfSigned, Finding::NonCompliant, Finding::Expired]);
        let (none, unreachable) = (set(&[]), set(&[Finding::Unreachable]));
        let scan = [
            node("a", &other_ca, Some(2_000)),
            node("b", &own, Some(1_000)),
            node("c", &none, Some(3_000)),
            node("d", &unreachable, None),
        ];
        record(&metrics, &scan, 1.0, Duration::ZERO);
        let text = metrics.encode().unwrap();
        for expected in [
            "node_csr_approver_audit_nodes{state=\"untrusted\"} 1\n",
            "node_csr_approver_audit_nodes{state=\"self-signed\"} 1\n",
            "node_csr_approver_audit_nodes{state=\"non-compliant\"} 0\n",
            "node_csr_approver_audit_nodes{state=\"expired\"} 0\n",
            "node_csr_approver_audit_findings{finding=\"untrusted\"} 1\n",
            "node_csr_approver_audit_findings{finding=\"self-signed\"} 1\n",
            "node_csr_approver_audit_findings{finding=\"non-compliant\"} 2\n",
            "node_csr_approver_audit_findings{finding=\"expired\"} 1\n",
            "node_csr_approver_audit_findings{finding=\"unreachable\"} 1\n",
            "node_csr_approver_audit_findings{finding=\"expiring\"} 0\n",
            "node_csr_approver_audit_findings{finding=\"malformed\"} 0\n",
        ] {
            assert!(text.contains(expected), "{expected}{text}");
        }
        metrics.audit().clear();
        assert!(lines(&metrics, "node_csr_approver_audit_findings{").iter().all(|line| line.ends_with(" 0")));
    }
}
