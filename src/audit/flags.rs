//! Flags of the controller's periodic audit: the `audit` scan run by the replica that writes, on a
//! period, reported as metrics and as Events on the Nodes whose state changes.

use std::sync::LazyLock;
use std::time::Duration;

use clap::Args;

use crate::kubelet_tls::KubeletServingCa;
use crate::values::{Checked, ValueError, duration, number, shared};

/// Periodic-audit flags; every flag also reads an env var. Setting `--audit-period` turns it on.
#[derive(Debug, Clone, Args)]
#[command(mut_args(shared))]
pub struct AuditScanArgs {
    /// The controller audits every Node's kubelet serving certificate (as `audit` does) at this interval, 1s..=7d, while it writes (holds the Lease); empty: off [default: off]
    #[arg(long, env = "AUDIT_PERIOD", value_name = "DURATION", value_parser = Checked(audit_period))]
    pub audit_period: Option<Duration>,
    /// The periodic audit finds a serving certificate expiring when its notAfter is closer than this, 1m..=3650d
    #[arg(long, env = "AUDIT_EXPIRING_WITHIN", value_name = "DURATION", default_value = DEFAULT_EXPIRING_WITHIN_TEXT.as_str(), value_parser = duration(MINUTE, TEN_YEARS))]
    pub audit_expiring_within: Duration,
    /// The periodic audit also exports one series per Node (its state, its certificate's notAfter)
    #[arg(long, env = "AUDIT_NODE_METRICS", default_value = "false")]
    pub audit_node_metrics: bool,
    /// How long the periodic audit gives the connection and the TLS handshake with one kubelet together, 10ms..=60s
    #[arg(long, env = "AUDIT_DIAL_TIMEOUT", value_name = "DURATION", default_value = "3s", value_parser = duration(TEN_MILLISECONDS, MINUTE))]
    pub audit_dial_timeout: Duration,
    /// How many kubelets the periodic audit dials at once, 1..=256; a scan of N Nodes none of whose kubelets answers takes at most ceil(N / this) × --audit-dial-timeout, plus listing the Nodes
    #[arg(long, env = "AUDIT_DIAL_CONCURRENCY", value_name = "N", default_value_t = DIAL_CONCURRENCY, value_parser = number::<u16>(1..=256))]
    pub audit_dial_concurrency: u16,
}

const TEN_MILLISECONDS: Duration = Duration::from_millis(10);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(24 * 3600);
const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
const TEN_YEARS: Duration = Duration::from_secs(3650 * 24 * 3600);

/// How long before notAfter a certificate counts as expiring unless `--audit-expiring-within`
/// (or `audit --fail-on expiring=DURATION`) says otherwise.
pub const DEFAULT_EXPIRING_WITHIN: Duration = WEEK;

/// How many kubelets a scan dials at once, unless `--dial-concurrency` (`audit`) or
/// `--audit-dial-concurrency` (the periodic audit) says otherwise.
pub const DIAL_CONCURRENCY: u16 = 16;

/// [`DEFAULT_EXPIRING_WITHIN`] as `--help` shows it, in whole days (`7d`).
pub(crate) static DEFAULT_EXPIRING_WITHIN_TEXT: LazyLock<String> =
    LazyLock::new(|| format!("{}d", DEFAULT_EXPIRING_WITHIN.as_secs() / DAY.as_secs()));

/// The periodic audit, when `--audit-period` turns it on.
#[derive(Debug, Clone)]
pub struct AuditSchedule {
    /// `--audit-period`.
    pub period: Duration,
    /// `--audit-expiring-within`.
    pub expiring_within: Duration,
    /// `--audit-node-metrics`.
    pub node_metrics: bool,
    /// `--kubelet-serving-ca-file`: the bundle chains are checked against, when given.
    pub ca: Option<KubeletServingCa>,
    /// `--kubelet-port`.
    pub kubelet_port: u16,
    /// `--audit-dial-timeout`: how long one kubelet's connection and handshake may take together.
    pub dial_limit: Duration,
    /// `--audit-dial-concurrency`: how many kubelets are dialled at once.
    pub dial_concurrency: u16,
}

impl AuditScanArgs {
    /// The schedule, when `--audit-period` is given and not empty; the kubelet flags are machine
    /// mode's, read whether it is on or not.
    pub(crate) fn schedule(&self, ca: Option<KubeletServingCa>, kubelet_port: u16) -> Option<AuditSchedule> {
        let period = self.audit_period.filter(|period| !period.is_zero())?;
        let (expiring_within, node_metrics) = (self.audit_expiring_within, self.audit_node_metrics);
        let (dial_limit, dial_concurrency) = (self.audit_dial_timeout, self.audit_dial_concurrency);
        Some(AuditSchedule { period, expiring_within, node_metrics, ca, kubelet_port, dial_limit, dial_concurrency })
    }
}

/// A period from a second to a week, or empty: off (zero).
fn audit_period(text: &str) -> Result<Duration, ValueError> {
    if text.trim().is_empty() {
        return Ok(Duration::ZERO);
    }
    (duration(SECOND, WEEK).0)(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::reading::read;

    fn schedule(args: &[&str]) -> Result<Option<AuditSchedule>, String> {
        read::<AuditScanArgs>(args).map(|flags| flags.schedule(None, 10250))
    }

    #[test]
    fn the_periodic_audit_is_off_unless_a_period_is_given() {
        assert!(schedule(&[]).unwrap().is_none());
        assert!(schedule(&["--audit-period="]).unwrap().is_none(), "empty is off");
        let on = schedule(&["--audit-period=6h"]).unwrap().unwrap();
        assert_eq!(
            (on.period, on.expiring_within, on.node_metrics, on.dial_limit, on.dial_concurrency),
            (Duration::from_secs(6 * 3600), DEFAULT_EXPIRING_WITHIN, false, crate::kubelet_tls::DIAL_LIMIT, 16)
        );
        let tuned = schedule(&[
            "--audit-period=10s",
            "--audit-expiring-within=30d",
            "--audit-node-metrics",
            "--audit-dial-timeout=150ms",
            "--audit-dial-concurrency=256",
        ]);
        let tuned = tuned.unwrap().unwrap();
        assert_eq!(
            (tuned.period, tuned.expiring_within, tuned.node_metrics, tuned.dial_limit, tuned.dial_concurrency),
            (Duration::from_secs(10), WEEK * 30 / 7, true, Duration::from_millis(150), 256)
        );
        for (flag, env, bad) in [
            ("--audit-period", "AUDIT_PERIOD", "999ms"),
            ("--audit-period", "AUDIT_PERIOD", "8d"),
            ("--audit-period", "AUDIT_PERIOD", "often"),
            ("--audit-expiring-within", "AUDIT_EXPIRING_WITHIN", "59s"),
            ("--audit-expiring-within", "AUDIT_EXPIRING_WITHIN", "soon"),
            ("--audit-node-metrics", "AUDIT_NODE_METRICS", "yes"),
            ("--audit-dial-timeout", "AUDIT_DIAL_TIMEOUT", "9ms"),
            ("--audit-dial-timeout", "AUDIT_DIAL_TIMEOUT", "61s"),
            ("--audit-dial-concurrency", "AUDIT_DIAL_CONCURRENCY", "0"),
            ("--audit-dial-concurrency", "AUDIT_DIAL_CONCURRENCY", "257"),
        ] {
            let error = read::<AuditScanArgs>(&[&format!("{flag}={bad}")]).unwrap_err();
            assert!(error.contains(&format!("{flag} (env {env})")), "{bad}: {error}");
        }
    }
}
