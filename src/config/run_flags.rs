//! Flags of the controller (`run`): cluster access, concurrency, leader election, admin endpoints
//! and logging, validated into a [`RunConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::flags::{Field, field, is_dns_label};
use super::{BindAddress, ConfigError};
use crate::policy::{DecisionKind, is_dns_subdomain};

/// Where the service account's namespace is mounted in a pod.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Controller flags; every flag also reads an env var.
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Kubeconfig file; unset: in-cluster config, then the default kubeconfig
    #[arg(long, global = true, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// CSRs evaluated and written at once, 1..=1000 [default: 32]
    #[arg(long, global = true, env = "CONCURRENCY")]
    pub concurrency: Option<String>,
    /// Which decisions are also published as Events: all; problems (denials, holds and retries, not approvals, whose Approved condition is their record); or none [default: problems]
    #[arg(long, global = true, env = "EVENTS")]
    pub events: Option<String>,
    /// Evaluate and record (events, metrics, logs) but write no condition [default: false]
    #[arg(long, global = true, env = "DRY_RUN", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub dry_run: Option<String>,
    /// Elect a leader through a Lease; only the leader writes [default: false]
    #[arg(long, global = true, env = "LEADER_ELECTION", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_election: Option<String>,
    /// Name of the Lease [default: node-csr-approver]
    #[arg(long, global = true, env = "LEADER_ELECTION_ID")]
    pub leader_election_id: Option<String>,
    /// Namespace of the Lease [default: the pod's namespace]
    #[arg(long, global = true, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// How long a Lease is valid without renewal, whole seconds [default: 15s]
    #[arg(long, global = true, env = "LEASE_DURATION")]
    pub lease_duration: Option<String>,
    /// The leader stops writing when it could not renew for this long [default: 10s]
    #[arg(long, global = true, env = "RENEW_DEADLINE")]
    pub renew_deadline: Option<String>,
    /// Interval between renewals and acquisition attempts [default: 2s]
    #[arg(long, global = true, env = "RETRY_PERIOD")]
    pub retry_period: Option<String>,
    /// Every undecided CSR is evaluated again at this interval, besides after each list of the CSR watch and whenever this replica becomes able to write, 1s..=1h [default: 1m]
    #[arg(long, global = true, env = "RESYNC_PERIOD")]
    pub resync_period: Option<String>,
    /// On SIGTERM/SIGINT, how long in-flight work may take to finish [default: 20s]
    #[arg(long, global = true, env = "DRAIN_TIMEOUT")]
    pub drain_timeout: Option<String>,
    /// Address of /healthz and /readyz [default: :8081]
    #[arg(long, global = true, env = "HEALTH_PROBE_BIND_ADDRESS")]
    pub health_probe_bind_address: Option<String>,
    /// Address of /metrics; 0 disables it [default: :8080]
    #[arg(long, global = true, env = "METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: Option<String>,
    /// Log format: json or text [default: json]
    #[arg(long, global = true, env = "LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Log filter, an EnvFilter directive such as info or node_csr_approver=debug [default: info]
    #[arg(long, global = true, env = "LOG_LEVEL")]
    pub log_level: Option<String>,
    /// The Go kubelet-csr-approver's -level, -5..=10: -5..=-2 error, -1 warn, 0 info, 1..=4 debug, 5..=10 trace; --log-level wins over it [default: 0]
    #[arg(long, global = true, env = "LEVEL", allow_negative_numbers = true)]
    pub level: Option<String>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Which decisions are also published as Events (logs and metrics record every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLevel {
    /// Every decision.
    All,
    /// Every decision but approvals: an approval's Approved condition already carries its reason
    /// and message, and its Event would double the writes of a burst.
    Problems,
    /// None.
    None,
}

impl EventLevel {
    /// Whether a decision of `kind` is published.
    pub fn publishes(self, kind: DecisionKind) -> bool {
        match self {
            EventLevel::All => true,
            EventLevel::Problems => kind != DecisionKind::Approve,
            EventLevel::None => false,
        }
    }
}

/// Leader-election settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's holder identity.
    pub identity: String,
    /// Lease validity without renewal.
    pub lease_duration: Duration,
    /// The holder stops writing when it could not renew for this long.
    pub renew_deadline: Duration,
    /// Interval between renewals and acquisition attempts.
    pub retry_period: Duration,
}

/// The validated controller settings.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Kubeconfig file, if given.
    pub kubeconfig: Option<PathBuf>,
    /// Bound on concurrent evaluations and writes.
    pub concurrency: u16,
    /// Which decisions are published as Events.
    pub events: EventLevel,
    /// Write no condition.
    pub dry_run: bool,
    /// Leader election, when enabled.
    pub leader: Option<LeaderConfig>,
    /// How often every undecided CSR is evaluated again, whatever else happened.
    pub resync_period: Duration,
    /// How long shutdown waits for in-flight work.
    pub drain_timeout: Duration,
    /// Address of the health endpoints, Go-style (`:8081`).
    pub health_address: BindAddress,
    /// Address of the metrics endpoint, Go-style; `None` disables it.
    pub metrics_address: Option<BindAddress>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter directive, already checked to parse.
    pub log_filter: String,
}

impl RunArgs {
    /// Validates every value; the first invalid one is returned as a [`ConfigError`].
    pub fn validate(&self) -> Result<RunConfig, ConfigError> {
        let concurrency = field!(self.concurrency).number(1..=1000, 32)?;
        let leader = if field!(self.leader_election).boolean(false)? { Some(self.leader()?) } else { None };
        Ok(RunConfig {
            kubeconfig: field!(self.kubeconfig).path(),
            concurrency: u16::try_from(concurrency).unwrap_or(u16::MAX),
            events: match self.events.as_deref().map(|f| f.trim().to_ascii_lowercase()).as_deref() {
                None | Some("problems") => EventLevel::Problems,
                Some("all") => EventLevel::All,
                Some("none") => EventLevel::None,
                Some(_) => {
                    return Err(field!(self.events)
                        .error(self.events.as_deref().unwrap_or_default(), "expected all, problems or none"));
                }
            },
            dry_run: field!(self.dry_run).boolean(false)?,
            leader,
            resync_period: field!(self.resync_period)
                .duration((Duration::from_secs(1), Duration::from_secs(3600)), Duration::from_secs(60))?,
            drain_timeout: field!(self.drain_timeout)
                .duration((Duration::ZERO, Duration::from_secs(3600)), Duration::from_secs(20))?,
            health_address: bind_address(field!(self.health_probe_bind_address), ":8081")?.ok_or_else(|| {
                field!(self.health_probe_bind_address).error("0", "the health endpoints cannot be disabled")
            })?,
            metrics_address: bind_address(field!(self.metrics_bind_address), ":8080")?,
            log_format: match self.log_format.as_deref().map(|f| f.trim().to_ascii_lowercase()).as_deref() {
                None | Some("json") => LogFormat::Json,
                Some("text") => LogFormat::Text,
                Some(_) => {
                    return Err(field!(self.log_format)
                        .error(self.log_format.as_deref().unwrap_or_default(), "expected json or text"));
                }
            },
            log_filter: self.log_filter()?,
        })
    }

    /// `--log-level`, else the directive `--level` stands for (each validated when given).
    fn log_filter(&self) -> Result<String, ConfigError> {
        let level = field!(self.level).number(-5..=10, 0)?;
        if self.log_level.is_none() && self.level.is_some() {
            return Ok(go_level_directive(level).to_owned());
        }
        log_filter(field!(self.log_level))
    }

    fn leader(&self) -> Result<LeaderConfig, ConfigError> {
        let lease_name = self.leader_election_id.clone().unwrap_or_else(|| "node-csr-approver".into());
        if !is_dns_subdomain(&lease_name) {
            return Err(field!(self.leader_election_id).error(&lease_name, "expected a lowercase DNS subdomain name"));
        }
        let namespace = match &self.leader_election_namespace {
            Some(namespace) => namespace.trim().to_owned(),
            None => std::fs::read_to_string(POD_NAMESPACE_FILE).map(|ns| ns.trim().to_owned()).map_err(|_| {
                field!(self.leader_election_namespace).error("", "required with --leader-election outside a pod")
            })?,
        };
        if !is_dns_label(&namespace) {
            return Err(field!(self.leader_election_namespace).error(&namespace, "expected a namespace name"));
        }
        let second = Duration::from_secs(1);
        let minute = Duration::from_secs(60);
        let lease_duration = field!(self.lease_duration).duration((second, minute), Duration::from_secs(15))?;
        if lease_duration.subsec_nanos() != 0 {
            return Err(field!(self.lease_duration)
                .error(self.lease_duration.as_deref().unwrap_or_default(), "whole seconds only"));
        }
        let renew_deadline = field!(self.renew_deadline).duration((second, minute), Duration::from_secs(10))?;
        let retry_period =
            field!(self.retry_period).duration((Duration::from_millis(100), minute), Duration::from_secs(2))?;
        if renew_deadline >= lease_duration {
            let value = humantime::format_duration(renew_deadline).to_string();
            return Err(field!(self.renew_deadline).error(&value, "must be shorter than --lease-duration"));
        }
        if retry_period >= renew_deadline {
            let value = humantime::format_duration(retry_period).to_string();
            return Err(field!(self.retry_period).error(&value, "must be shorter than --renew-deadline"));
        }
        Ok(LeaderConfig { lease_name, namespace, identity: identity(), lease_duration, renew_deadline, retry_period })
    }
}

/// `POD_NAME` when set, else the host name, plus a random suffix so two processes never share one.
fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| "node-csr-approver".into());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// A namespace name: one lowercase DNS label.
/// A Go-style bind address ([`BindAddress::parse`]); `0` disables when allowed.
fn bind_address(field: Field<'_, Option<String>>, default: &str) -> Result<Option<BindAddress>, ConfigError> {
    let text = field.text().unwrap_or(default).trim();
    if text == "0" {
        return Ok(None);
    }
    BindAddress::parse(text).map(Some).map_err(|e| field.error(text, e.to_string()))
}

/// The EnvFilter directive the Go tool's `-level` stands for.
fn go_level_directive(level: i64) -> &'static str {
    match level {
        ..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1..=4 => "debug",
        5.. => "trace",
    }
}

fn log_filter(field: Field<'_, Option<String>>) -> Result<String, ConfigError> {
    let directive = field.text().map(str::trim).filter(|v| !v.is_empty()).unwrap_or("info");
    tracing_subscriber::EnvFilter::builder()
        .parse(directive)
        .map(|_| directive.to_owned())
        .map_err(|e| field.error(directive, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_level(level: &str) -> RunArgs {
        RunArgs { level: Some(level.into()), ..RunArgs::default() }
    }

    #[test]
    fn events_default_to_problems_and_approvals_are_published_only_with_all() {
        let level = |value: Option<&str>| RunArgs { events: value.map(Into::into), ..RunArgs::default() }.validate();
        assert_eq!(level(None).unwrap().events, EventLevel::Problems);
        for (text, want) in [("all", EventLevel::All), (" Problems ", EventLevel::Problems), ("NONE", EventLevel::None)]
        {
            assert_eq!(level(Some(text)).unwrap().events, want, "{text}");
        }
        for bad in ["", "some", "approvals"] {
            let error = level(Some(bad)).unwrap_err();
            assert_eq!((error.flag.as_str(), error.env.as_str()), ("--events", "EVENTS"), "{bad}");
        }
        use DecisionKind::{Approve, Deny, Hold, Ignore, Retry};
        for kind in [Approve, Deny, Hold, Retry, Ignore] {
            assert!(EventLevel::All.publishes(kind), "{kind:?}");
            assert_eq!(EventLevel::Problems.publishes(kind), kind != Approve, "{kind:?}");
            assert!(!EventLevel::None.publishes(kind), "{kind:?}");
        }
    }

    #[test]
    fn the_resync_period_defaults_to_a_minute_and_stays_within_a_second_and_an_hour() {
        let period =
            |value: Option<&str>| RunArgs { resync_period: value.map(Into::into), ..RunArgs::default() }.validate();
        assert_eq!(period(None).unwrap().resync_period, Duration::from_secs(60));
        assert_eq!(period(Some("1s")).unwrap().resync_period, Duration::from_secs(1));
        assert_eq!(period(Some("1h")).unwrap().resync_period, Duration::from_secs(3600));
        for bad in ["0s", "999ms", "61m", "often"] {
            let error = period(Some(bad)).unwrap_err();
            assert_eq!((error.flag.as_str(), error.env.as_str()), ("--resync-period", "RESYNC_PERIOD"), "{bad}");
        }
    }

    #[test]
    fn the_go_level_stands_for_a_filter() {
        assert_eq!(RunArgs::default().validate().unwrap().log_filter, "info");
        for (level, filter) in [
            ("-5", "error"),
            ("-2", "error"),
            ("-1", "warn"),
            ("0", "info"),
            ("1", "debug"),
            ("4", "debug"),
            ("5", "trace"),
            ("10", "trace"),
        ] {
            assert_eq!(with_level(level).validate().unwrap().log_filter, filter, "{level}");
        }
    }

    #[test]
    fn the_go_level_is_a_number_from_minus_5_to_10_and_log_level_wins_over_it() {
        for bad in ["-6", "11", "x", ""] {
            let error = with_level(bad).validate().unwrap_err();
            assert_eq!((error.flag.as_str(), error.env.as_str()), ("--level", "LEVEL"), "{bad}");
        }
        let both = RunArgs { log_level: Some("warn,node_csr_approver=debug".into()), ..with_level("5") };
        assert_eq!(both.validate().unwrap().log_filter, "warn,node_csr_approver=debug");
        let invalid_level = RunArgs { log_level: Some("info".into()), ..with_level("11") };
        assert_eq!(invalid_level.validate().unwrap_err().flag, "--level");
    }
}
