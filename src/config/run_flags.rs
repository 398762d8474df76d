//! Flags of the controller (`run`): cluster access, concurrency, leader election, admin endpoints
//! and logging, validated into a [`RunConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::flags::{Checked, boolean, duration, given_path, is_dns_label, keyword, namespace_or_empty, number, path};
use super::{BindAddress, ConfigError};
use crate::policy::{DecisionKind, is_dns_subdomain};

/// Where the service account's namespace is mounted in a pod.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Controller flags; every flag also reads an env var.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig file; unset: in-cluster config, then the default kubeconfig
    #[arg(long, global = true, env = "KUBECONFIG", value_name = "PATH", value_parser = path())]
    pub kubeconfig: Option<PathBuf>,
    /// CSRs evaluated and written at once, 1..=1000
    #[arg(long, global = true, env = "CONCURRENCY", default_value = "32", value_parser = number::<u16>(1..=1000))]
    pub concurrency: u16,
    /// Which decisions are also published as Events: all; problems (denials, holds and retries, not approvals, whose Approved condition is their record); or none
    #[arg(long, global = true, env = "EVENTS", default_value = "problems", value_parser = keyword(EVENT_LEVELS))]
    pub events: EventLevel,
    /// Evaluate and record (events, metrics, logs) but write no condition
    #[arg(long, global = true, env = "DRY_RUN", default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub dry_run: bool,
    /// Elect a leader through a Lease; only the leader writes
    #[arg(long, global = true, env = "LEADER_ELECTION", default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub leader_election: bool,
    /// Name of the Lease
    #[arg(long, global = true, env = "LEADER_ELECTION_ID", default_value = "node-csr-approver", value_parser = lease_name())]
    pub leader_election_id: String,
    /// Namespace of the Lease [default: the pod's namespace]
    #[arg(long, global = true, env = "POD_NAMESPACE", value_parser = namespace_or_empty())]
    pub leader_election_namespace: Option<String>,
    /// How long a Lease is valid without renewal, whole seconds
    #[arg(long, global = true, env = "LEASE_DURATION", default_value = "15s", value_parser = whole_seconds(SECOND, MINUTE))]
    pub lease_duration: Duration,
    /// The leader stops writing when it could not renew for this long
    #[arg(long, global = true, env = "RENEW_DEADLINE", default_value = "10s", value_parser = duration(SECOND, MINUTE))]
    pub renew_deadline: Duration,
    /// Interval between renewals and acquisition attempts
    #[arg(long, global = true, env = "RETRY_PERIOD", default_value = "2s", value_parser = duration(Duration::from_millis(100), MINUTE))]
    pub retry_period: Duration,
    /// Every undecided CSR is evaluated again at this interval, besides after each list of the CSR watch and whenever this replica becomes able to write, 1s..=1h
    #[arg(long, global = true, env = "RESYNC_PERIOD", default_value = "1m", value_parser = duration(SECOND, HOUR))]
    pub resync_period: Duration,
    /// On SIGTERM/SIGINT, how long in-flight work may take to finish
    #[arg(long, global = true, env = "DRAIN_TIMEOUT", default_value = "20s", value_parser = duration(Duration::ZERO, HOUR))]
    pub drain_timeout: Duration,
    /// Address of /healthz and /readyz
    #[arg(long, global = true, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081", value_parser = health_address())]
    pub health_probe_bind_address: BindAddress,
    /// Address of /metrics; 0 disables it
    #[arg(long, global = true, env = "METRICS_BIND_ADDRESS", default_value = ":8080", value_parser = admin_address())]
    pub metrics_bind_address: AdminAddress,
    /// Log format: json or text
    #[arg(long, global = true, env = "LOG_FORMAT", default_value = "json", value_parser = keyword(LOG_FORMATS))]
    pub log_format: LogFormat,
    /// Log filter, an EnvFilter directive such as info or node_csr_approver=debug [default: what --level stands for]
    #[arg(long, global = true, env = "LOG_LEVEL", value_parser = log_filter())]
    pub log_level: Option<String>,
    /// The Go kubelet-csr-approver's -level, -5..=10: -5..=-2 error, -1 warn, 0 info, 1..=4 debug, 5..=10 trace; --log-level wins over it
    #[arg(long, global = true, env = "LEVEL", default_value = "0", allow_negative_numbers = true, value_parser = number::<i8>(-5..=10))]
    pub level: i8,
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// The keywords of `--events`.
const EVENT_LEVELS: &[(&str, EventLevel)] =
    &[("all", EventLevel::All), ("problems", EventLevel::Problems), ("none", EventLevel::None)];

/// The keywords of `--log-format`.
const LOG_FORMATS: &[(&str, LogFormat)] = &[("json", LogFormat::Json), ("text", LogFormat::Text)];

/// Where an admin endpoint listens, or that it is off (`0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminAddress {
    /// Not served.
    Off,
    /// Served at this address.
    At(BindAddress),
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
    /// The controller settings; the rules that span flags (the Lease's timings) or read the pod
    /// (its namespace) are checked here, the first broken one returned as a [`ConfigError`].
    pub fn validate(&self) -> Result<RunConfig, ConfigError> {
        Ok(RunConfig {
            kubeconfig: given_path(&self.kubeconfig),
            concurrency: self.concurrency,
            events: self.events,
            dry_run: self.dry_run,
            leader: if self.leader_election { Some(self.leader()?) } else { None },
            resync_period: self.resync_period,
            drain_timeout: self.drain_timeout,
            health_address: self.health_probe_bind_address,
            metrics_address: match self.metrics_bind_address {
                AdminAddress::Off => None,
                AdminAddress::At(address) => Some(address),
            },
            log_format: self.log_format,
            log_filter: match self.log_level.as_deref().filter(|directive| !directive.is_empty()) {
                Some(directive) => directive.to_owned(),
                None => go_level_directive(self.level).to_owned(),
            },
        })
    }

    fn leader(&self) -> Result<LeaderConfig, ConfigError> {
        let namespace = match self.leader_election_namespace.as_deref().filter(|namespace| !namespace.is_empty()) {
            Some(namespace) => namespace.to_owned(),
            None => pod_namespace(std::fs::read_to_string(POD_NAMESPACE_FILE))?,
        };
        let (lease_duration, renew_deadline, retry_period) =
            (self.lease_duration, self.renew_deadline, self.retry_period);
        if renew_deadline >= lease_duration {
            let value = humantime::format_duration(renew_deadline).to_string();
            return Err(ConfigError::of_field("renew_deadline", &value, "must be shorter than --lease-duration"));
        }
        if retry_period >= renew_deadline {
            let value = humantime::format_duration(retry_period).to_string();
            return Err(ConfigError::of_field("retry_period", &value, "must be shorter than --renew-deadline"));
        }
        Ok(LeaderConfig {
            lease_name: self.leader_election_id.clone(),
            namespace,
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// The namespace mounted into the pod (`mounted`: [`POD_NAMESPACE_FILE`] as read), which must be
/// a namespace name; unreadable: not in a pod, so `--leader-election-namespace` is required.
fn pod_namespace(mounted: std::io::Result<String>) -> Result<String, ConfigError> {
    let id = "leader_election_namespace";
    let mounted =
        mounted.map_err(|_| ConfigError::of_field(id, "", "required with --leader-election outside a pod"))?;
    let namespace = mounted.trim();
    if !is_dns_label(namespace) {
        return Err(ConfigError::of_field(id, namespace, format!("{POD_NAMESPACE_FILE} holds no namespace name")));
    }
    Ok(namespace.to_owned())
}

/// A Lease name: a lowercase DNS subdomain.
fn lease_name() -> Checked<impl Fn(&str) -> Result<String, String> + Clone> {
    Checked(|text: &str| {
        if is_dns_subdomain(text) { Ok(text.to_owned()) } else { Err("expected a lowercase DNS subdomain name".into()) }
    })
}

/// A duration in whole seconds from `min` to `max`, as a Lease holds it.
fn whole_seconds(min: Duration, max: Duration) -> Checked<impl Fn(&str) -> Result<Duration, String> + Clone> {
    let read = duration(min, max).0;
    Checked(move |text: &str| {
        let duration = read(text)?;
        if duration.subsec_nanos() == 0 { Ok(duration) } else { Err("whole seconds only".into()) }
    })
}

/// A Go-style bind address ([`BindAddress::parse`]) that cannot be turned off.
fn health_address() -> Checked<impl Fn(&str) -> Result<BindAddress, String> + Clone> {
    let read = admin_address().0;
    Checked(move |text: &str| match read(text)? {
        AdminAddress::At(address) => Ok(address),
        AdminAddress::Off => Err("the health endpoints cannot be disabled".into()),
    })
}

/// A Go-style bind address ([`BindAddress::parse`]), or `0`: off.
fn admin_address() -> Checked<impl Fn(&str) -> Result<AdminAddress, String> + Clone> {
    Checked(|text: &str| match text.trim() {
        "0" => Ok(AdminAddress::Off),
        address => BindAddress::parse(address).map(AdminAddress::At).map_err(|e| e.to_string()),
    })
}

/// The EnvFilter directive the Go tool's `-level` stands for.
fn go_level_directive(level: i8) -> &'static str {
    match level {
        ..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1..=4 => "debug",
        5.. => "trace",
    }
}

/// An EnvFilter directive, trimmed; empty when given empty (then `--level` decides).
fn log_filter() -> Checked<impl Fn(&str) -> Result<String, String> + Clone> {
    Checked(|text: &str| {
        let directive = text.trim();
        if directive.is_empty() {
            return Ok(String::new());
        }
        tracing_subscriber::EnvFilter::builder()
            .parse(directive)
            .map(|_| directive.to_owned())
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::super::flags::reading::read;
    use super::*;

    fn validated(args: &[&str]) -> Result<RunConfig, String> {
        read::<RunArgs>(args)?.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn events_default_to_problems_and_approvals_are_published_only_with_all() {
        assert_eq!(validated(&[]).unwrap().events, EventLevel::Problems);
        for (text, want) in [("all", EventLevel::All), (" Problems ", EventLevel::Problems), ("NONE", EventLevel::None)]
        {
            assert_eq!(validated(&[&format!("--events={text}")]).unwrap().events, want, "{text}");
        }
        for bad in ["", "some", "approvals"] {
            let error = validated(&[&format!("--events={bad}")]).unwrap_err();
            assert!(error.contains("--events (env EVENTS)"), "{bad}: {error}");
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
        let period = |value: &str| validated(&[&format!("--resync-period={value}")]).map(|c| c.resync_period);
        assert_eq!(validated(&[]).unwrap().resync_period, Duration::from_secs(60));
        assert_eq!(period("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(period("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0s", "999ms", "61m", "often"] {
            let error = period(bad).unwrap_err();
            assert!(error.contains("--resync-period (env RESYNC_PERIOD)"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_go_level_stands_for_a_filter() {
        assert_eq!(validated(&[]).unwrap().log_filter, "info");
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
            assert_eq!(validated(&["--level", level]).unwrap().log_filter, filter, "{level}");
        }
    }

    #[test]
    fn the_go_level_is_a_number_from_minus_5_to_10_and_log_level_wins_over_it() {
        for bad in ["-6", "11", "x", ""] {
            let error = validated(&[&format!("--level={bad}")]).unwrap_err();
            assert!(error.contains("--level (env LEVEL)"), "{bad}: {error}");
        }
        let both = validated(&["--log-level", "warn,node_csr_approver=debug", "--level", "5"]).unwrap();
        assert_eq!(both.log_filter, "warn,node_csr_approver=debug");
        assert_eq!(validated(&["--log-level=", "--level=5"]).unwrap().log_filter, "trace", "empty is not given");
        let invalid_level = validated(&["--log-level=info", "--level=11"]).unwrap_err();
        assert!(invalid_level.contains("--level"), "{invalid_level}");
    }

    #[test]
    fn the_lease_timings_are_ordered_and_whole_seconds() {
        let leader = |args: &[&str]| {
            let all = [&["--leader-election", "--leader-election-namespace=ns"][..], args].concat();
            validated(&all).map(|config| config.leader.map(|leader| leader.lease_duration))
        };
        assert_eq!(leader(&[]), Ok(Some(Duration::from_secs(15))));
        assert!(leader(&["--lease-duration=1500ms"]).unwrap_err().contains("whole seconds only"));
        let late = leader(&["--renew-deadline=15s"]).unwrap_err();
        assert!(late.contains("--renew-deadline") && late.contains("shorter than --lease-duration"), "{late}");
        let slow = leader(&["--retry-period=10s"]).unwrap_err();
        assert!(slow.contains("--retry-period") && slow.contains("shorter than --renew-deadline"), "{slow}");
    }

    #[test]
    fn the_lease_namespace_is_the_pods_own_unless_given() {
        assert_eq!(pod_namespace(Ok("kube-system\n".into())).unwrap(), "kube-system");
        let outside = pod_namespace(Err(std::io::ErrorKind::NotFound.into())).unwrap_err();
        assert_eq!((outside.flag.as_str(), outside.env.as_str()), ("--leader-election-namespace", "POD_NAMESPACE"));
        assert!(outside.problem.contains("outside a pod"), "{outside}");
        assert!(pod_namespace(Ok("Not_A_Namespace".into())).unwrap_err().problem.contains("no namespace name"));
    }

    #[test]
    fn the_metrics_endpoint_can_be_turned_off_and_the_health_endpoints_cannot() {
        assert!(validated(&["--metrics-bind-address=0"]).unwrap().metrics_address.is_none());
        assert!(validated(&[]).unwrap().metrics_address.is_some());
        let error = validated(&["--health-probe-bind-address=0"]).unwrap_err();
        assert!(error.contains("cannot be disabled"), "{error}");
    }
}
