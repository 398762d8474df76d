//! Flags of the controller (`run`): cluster access, concurrency, leader election, admin endpoints
//! and logging; the leader-election flags are checked together into a [`LeaderConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ConfigError, Flag, Problem};
use crate::audit::flags::AuditScanArgs;
use crate::events::EventLevel;
use crate::kubernetes::leader::LeaderConfig;
use crate::kubernetes::request_budget::RequestBudget;
use crate::policy::is_dns_subdomain;
use crate::values::{
    BindAddress, Checked, ValueError, duration, given, is_dns_label, keyword, namespace_or_empty, number, path, rate,
    shared,
};

/// Where the service account's namespace is mounted in a pod.
pub(super) const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Controller flags; every flag also reads an env var.
#[derive(Debug, Clone, Args)]
#[command(mut_args(shared))]
pub struct RunArgs {
    /// Kubeconfig file; unset: in-cluster config, then the default kubeconfig
    #[arg(long, env = "KUBECONFIG", value_name = "PATH", value_parser = Checked(path))]
    pub kubeconfig: Option<PathBuf>,
    /// The most requests a second the client sends the apiserver on average (a token bucket every request takes from), as client-go's; 0 sets no limit, else 0.01..=100000
    #[arg(long, env = "KUBE_API_QPS", default_value = "0", value_parser = rate(100_000))]
    pub kube_api_qps: f64,
    /// The most requests the client sends at once above --kube-api-qps (the bucket's size), 1..=100000
    #[arg(long, env = "KUBE_API_BURST", default_value = "30", value_parser = number::<u32>(1..=100_000))]
    pub kube_api_burst: u32,
    /// CSRs evaluated and written at once, 1..=1000
    #[arg(long, env = "CONCURRENCY", default_value = "32", value_parser = number::<u16>(1..=1000))]
    pub concurrency: u16,
    /// Which decisions are also published as Events: all; problems (denials, holds and retries, not approvals, whose Approved condition is their record, nor a node's older serving CSRs denied Superseded or waiting for its newer one); or none
    #[arg(long, env = "EVENTS", default_value = "problems", value_parser = keyword(EVENT_LEVELS))]
    pub events: EventLevel,
    /// Evaluate and record (events, metrics, logs) but write no condition
    #[arg(long, env = "DRY_RUN", default_value = "false")]
    pub dry_run: bool,
    /// The leader-election flags.
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// The periodic audit's flags.
    #[command(flatten)]
    pub audit: AuditScanArgs,
    /// Every undecided CSR is evaluated again at this interval, besides after each list of the CSR watch and whenever this replica becomes able to write, 1s..=1h
    #[arg(long, env = "RESYNC_PERIOD", default_value = "1m", value_parser = duration(SECOND, HOUR))]
    pub resync_period: Duration,
    /// While the CSR cache holds fewer CSRs than this, a pending CSR keeps its PKCS#10 request in memory (about 0.3 KiB); from this many on, its request is read from the apiserver when it is decided (one GET), which bounds the memory of a renewal storm, 0..=1000000
    #[arg(long, env = "CACHE_REQUESTS_BELOW", default_value = "10000", value_parser = number::<u32>(0..=1_000_000))]
    pub cache_requests_below: u32,
    /// The most bytes the PKCS#10 requests kept in the CSR cache may take; a pending CSR whose request does not fit has it read from the apiserver when it is decided (one GET), which bounds the memory of oversized requests, 0..=1073741824
    #[arg(long, env = "CACHE_REQUEST_BYTES", default_value = "4194304", value_parser = number::<u32>(0..=1_073_741_824))]
    pub cache_request_bytes: u32,
    /// On SIGTERM/SIGINT, how long in-flight work may take to finish
    #[arg(long, env = "DRAIN_TIMEOUT", default_value = "20s", value_parser = duration(Duration::ZERO, HOUR))]
    pub drain_timeout: Duration,
    /// Address of /healthz and /readyz
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081", value_parser = Checked(health_address))]
    pub health_probe_bind_address: BindAddress,
    /// Address of /metrics; 0 disables it
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080", value_parser = Checked(metrics_address))]
    pub metrics_bind_address: std::option::Option<BindAddress>,
    /// Log format: json or text
    #[arg(long, env = "LOG_FORMAT", default_value = "json", value_parser = keyword(LOG_FORMATS))]
    pub log_format: LogFormat,
    /// Log filter, an EnvFilter directive such as info or node_csr_approver=debug [default: what --level stands for]
    #[arg(long, env = "LOG_LEVEL", value_parser = Checked(log_filter))]
    pub log_level: Option<String>,
    /// The Go kubelet-csr-approver's -level, -5..=10: -5..=-2 error, -1 warn, 0 info, 1..=4 debug, 5..=10 trace; --log-level wins over it
    #[arg(long, env = "LEVEL", default_value = "0", allow_negative_numbers = true, value_parser = number::<i8>(-5..=10))]
    pub level: i8,
}

impl RunArgs {
    /// `--kube-api-qps` and `--kube-api-burst`.
    pub fn request_budget(&self) -> RequestBudget {
        RequestBudget { qps: self.kube_api_qps, burst: self.kube_api_burst }
    }
}

/// Leader-election flags.
#[derive(Debug, Clone, Args)]
#[command(mut_args(shared))]
pub struct LeaderArgs {
    /// Elect a leader through a Lease; only the leader writes
    #[arg(long, env = "LEADER_ELECTION", default_value = "false")]
    pub leader_election: bool,
    /// Name of the Lease
    #[arg(long, env = "LEADER_ELECTION_ID", default_value = "node-csr-approver", value_parser = Checked(lease_name))]
    pub leader_election_id: String,
    /// Namespace of the Lease [default: the pod's namespace]
    #[arg(long, env = "POD_NAMESPACE", value_parser = Checked(namespace_or_empty))]
    pub leader_election_namespace: Option<String>,
    /// How long a Lease is valid without renewal, whole seconds
    #[arg(long, env = "LEASE_DURATION", default_value = "15s", value_parser = whole_seconds(SECOND, MINUTE))]
    pub lease_duration: Duration,
    /// The leader stops writing when it could not renew for this long
    #[arg(long, env = "RENEW_DEADLINE", default_value = "10s", value_parser = duration(SECOND, MINUTE))]
    pub renew_deadline: Duration,
    /// Interval between renewals and acquisition attempts
    #[arg(long, env = "RETRY_PERIOD", default_value = "2s", value_parser = duration(Duration::from_millis(100), MINUTE))]
    pub retry_period: Duration,
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// The keywords of `--events`.
const EVENT_LEVELS: &[(&str, EventLevel)] =
    &[("all", EventLevel::All), ("problems", EventLevel::Problems), ("none", EventLevel::None)];

/// The keywords of `--log-format`.
const LOG_FORMATS: &[(&str, LogFormat)] = &[("json", LogFormat::Json), ("text", LogFormat::Text)];

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

impl RunArgs {
    /// The log filter directive: `--log-level` when given, else what `--level` stands for.
    pub fn log_filter(&self) -> &str {
        match self.log_level.as_deref().filter(|directive| !directive.is_empty()) {
            Some(directive) => directive,
            None => go_level_directive(self.level),
        }
    }

    /// The same flags with an empty `--kubeconfig` read as not given.
    pub(super) fn normalized(self) -> RunArgs {
        RunArgs { kubeconfig: given(self.kubeconfig), ..self }
    }
}

impl LeaderArgs {
    /// The Lease, when leader election is on: its namespace (the pod's own unless given) and its
    /// timings, each shorter than the one it must fit in; the first broken rule is returned.
    pub(super) fn validate(&self) -> Result<Option<LeaderConfig>, ConfigError> {
        if !self.leader_election {
            return Ok(None);
        }
        let namespace = match given(self.leader_election_namespace.clone()) {
            Some(namespace) => namespace,
            None => pod_namespace(std::fs::read_to_string(POD_NAMESPACE_FILE))?,
        };
        let (lease_duration, renew_deadline, retry_period) =
            (self.lease_duration, self.renew_deadline, self.retry_period);
        for (flag, duration, limit, longest) in [
            (Flag::RenewDeadline, renew_deadline, Flag::LeaseDuration, lease_duration),
            (Flag::RetryPeriod, retry_period, Flag::RenewDeadline, renew_deadline),
        ] {
            if duration >= longest {
                let value = humantime::format_duration(duration).to_string();
                return Err(ConfigError { flag, value, problem: Problem::NotShorterThan(limit) });
            }
        }
        let lease_name = self.leader_election_id.clone();
        Ok(Some(LeaderConfig { lease_name, namespace, lease_duration, renew_deadline, retry_period }))
    }
}

/// The namespace mounted into the pod (`mounted`: [`POD_NAMESPACE_FILE`] as read), which must be
/// a namespace name; unreadable: not in a pod, so `--leader-election-namespace` is required.
fn pod_namespace(mounted: std::io::Result<String>) -> Result<String, ConfigError> {
    let error =
        |value: &str, problem| ConfigError { flag: Flag::LeaderElectionNamespace, value: value.into(), problem };
    let mounted = mounted.map_err(|_| error("", ValueError::OutsidePod.into()))?;
    let namespace = mounted.trim();
    if is_dns_label(namespace) { Ok(namespace.to_owned()) } else { Err(error(namespace, Problem::PodNamespace)) }
}

/// A Lease name: a lowercase DNS subdomain.
fn lease_name(text: &str) -> Result<String, ValueError> {
    if is_dns_subdomain(text) { Ok(text.to_owned()) } else { Err(ValueError::NotLeaseName) }
}

/// A duration in whole seconds from `min` to `max`, as a Lease holds it.
fn whole_seconds(min: Duration, max: Duration) -> Checked<impl Fn(&str) -> Result<Duration, ValueError> + Clone> {
    let read = duration(min, max).0;
    Checked(move |text: &str| {
        let duration = read(text)?;
        if duration.subsec_nanos() == 0 { Ok(duration) } else { Err(ValueError::NotWholeSeconds) }
    })
}

/// A Go-style bind address ([`BindAddress::parse`]) that cannot be turned off.
fn health_address(text: &str) -> Result<BindAddress, ValueError> {
    metrics_address(text)?.ok_or(ValueError::HealthOff)
}

/// A Go-style bind address ([`BindAddress::parse`]), or `0`: off.
fn metrics_address(text: &str) -> Result<Option<BindAddress>, ValueError> {
    match text.trim() {
        "0" => Ok(None),
        address => Ok(Some(BindAddress::parse(address)?)),
    }
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
fn log_filter(text: &str) -> Result<String, ValueError> {
    let directive = text.trim();
    if !directive.is_empty() {
        tracing_subscriber::EnvFilter::builder().parse(directive)?;
    }
    Ok(directive.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DecisionKind, Reason};
    use crate::values::reading::read;

    #[test]
    fn events_default_to_problems_and_approvals_are_published_only_with_all() {
        assert_eq!(read::<RunArgs>(&[]).unwrap().events, EventLevel::Problems);
        for (text, want) in [("all", EventLevel::All), (" Problems ", EventLevel::Problems), ("NONE", EventLevel::None)]
        {
            assert_eq!(read::<RunArgs>(&[&format!("--events={text}")]).unwrap().events, want, "{text}");
        }
        for bad in ["", "some", "approvals"] {
            let error = read::<RunArgs>(&[&format!("--events={bad}")]).unwrap_err();
            assert!(error.contains("--events (env EVENTS)"), "{bad}: {error}");
        }
        use DecisionKind::{Approve, Deny, Hold, Ignore, Retry};
        for kind in [Approve, Deny, Hold, Retry, Ignore] {
            for reason in [Reason::AutoApproved, Reason::HostnameMismatch, Reason::DNSUnavailable] {
                assert!(EventLevel::All.publishes(kind, reason), "{kind:?}");
                assert_eq!(EventLevel::Problems.publishes(kind, reason), kind != Approve, "{kind:?} {reason}");
                assert!(!EventLevel::None.publishes(kind, reason), "{kind:?}");
            }
        }
    }

    #[test]
    fn audit_state_changes_are_published_as_problems_and_back_to_compliant_only_with_all() {
        for problem in [true, false] {
            assert!(EventLevel::All.publishes_audit(problem));
            assert_eq!(EventLevel::Problems.publishes_audit(problem), problem);
            assert!(!EventLevel::None.publishes_audit(problem));
        }
    }

    #[test]
    fn a_node_s_superseded_and_waiting_serving_csrs_are_published_only_with_all() {
        use DecisionKind::{Deny, Hold, Retry};
        for routine in [(Deny, Reason::Superseded), (Retry, Reason::NewerServingCSRPending)] {
            assert!(EventLevel::All.publishes(routine.0, routine.1), "{routine:?}");
            assert!(!EventLevel::Problems.publishes(routine.0, routine.1), "{routine:?}");
        }
        // Held for a human (--skip-deny-step): a human acts on it, so it is a problem.
        assert!(EventLevel::Problems.publishes(Hold, Reason::Superseded));
        assert!(EventLevel::Problems.publishes(Retry, Reason::ClusterUnavailable));
    }

    #[test]
    fn the_resync_period_defaults_to_a_minute_and_stays_within_a_second_and_an_hour() {
        let period = |value: &str| read::<RunArgs>(&[&format!("--resync-period={value}")]).map(|c| c.resync_period);
        assert_eq!(read::<RunArgs>(&[]).unwrap().resync_period, Duration::from_secs(60));
        assert_eq!(period("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(period("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0s", "999ms", "61m", "often"] {
            let error = period(bad).unwrap_err();
            assert!(error.contains("--resync-period (env RESYNC_PERIOD)"), "{bad}: {error}");
        }
    }

    #[test]
    fn requests_are_cached_below_ten_thousand_csrs_by_default_and_up_to_a_million() {
        let below = |value: &str| {
            read::<RunArgs>(&[&format!("--cache-requests-below={value}")]).map(|c| c.cache_requests_below)
        };
        assert_eq!(read::<RunArgs>(&[]).unwrap().cache_requests_below, 10_000);
        assert_eq!(below("0"), Ok(0));
        assert_eq!(below("1000000"), Ok(1_000_000));
        for bad in ["1000001", "-1", "many"] {
            let error = below(bad).unwrap_err();
            assert!(error.contains("--cache-requests-below (env CACHE_REQUESTS_BELOW)"), "{bad}: {error}");
        }
    }

    #[test]
    fn requests_are_cached_up_to_four_mebibytes_by_default_and_up_to_a_gibibyte() {
        let bytes =
            |value: &str| read::<RunArgs>(&[&format!("--cache-request-bytes={value}")]).map(|c| c.cache_request_bytes);
        assert_eq!(read::<RunArgs>(&[]).unwrap().cache_request_bytes, 4 * 1024 * 1024);
        assert_eq!(bytes("0"), Ok(0));
        assert_eq!(bytes("1073741824"), Ok(1 << 30));
        for bad in ["1073741825", "-1", "4MiB"] {
            let error = bytes(bad).unwrap_err();
            assert!(error.contains("--cache-request-bytes (env CACHE_REQUEST_BYTES)"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_go_level_stands_for_a_filter() {
        assert_eq!(read::<RunArgs>(&[]).unwrap().log_filter(), "info");
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
            assert_eq!(read::<RunArgs>(&["--level", level]).unwrap().log_filter(), filter, "{level}");
        }
    }

    #[test]
    fn the_go_level_is_a_number_from_minus_5_to_10_and_log_level_wins_over_it() {
        for bad in ["-6", "11", "x", ""] {
            let error = read::<RunArgs>(&[&format!("--level={bad}")]).unwrap_err();
            assert!(error.contains("--level (env LEVEL)"), "{bad}: {error}");
        }
        let both = read::<RunArgs>(&["--log-level", "warn,node_csr_approver=debug", "--level", "5"]).unwrap();
        assert_eq!(both.log_filter(), "warn,node_csr_approver=debug");
        assert_eq!(
            read::<RunArgs>(&["--log-level=", "--level=5"]).unwrap().log_filter(),
            "trace",
            "empty is not given"
        );
        let invalid_level = read::<RunArgs>(&["--log-level=info", "--level=11"]).unwrap_err();
        assert!(invalid_level.contains("--level"), "{invalid_level}");
    }

    #[test]
    fn the_lease_timings_are_ordered_and_whole_seconds() {
        let leader = |args: &[&str]| {
            let all = [&["--leader-election", "--leader-election-namespace=ns"][..], args].concat();
            let validated = read::<RunArgs>(&all)?.leader.validate().map_err(|e| e.to_string());
            validated.map(|leader| leader.map(|leader| leader.lease_duration))
        };
        assert_eq!(leader(&[]), Ok(Some(Duration::from_secs(15))));
        assert!(leader(&["--lease-duration=1500ms"]).unwrap_err().contains("whole seconds only"));
        let late = leader(&["--renew-deadline=15s"]).unwrap_err();
        assert!(late.contains("--renew-deadline") && late.contains("shorter than --lease-duration"), "{late}");
        let slow = leader(&["--retry-period=10s"]).unwrap_err();
        assert!(slow.contains("--retry-period") && slow.contains("shorter than --renew-deadline"), "{slow}");
        assert_eq!(read::<RunArgs>(&[]).unwrap().leader.validate().unwrap(), None, "off unless asked for");
    }

    #[test]
    fn the_lease_namespace_is_the_pods_own_unless_given() {
        assert_eq!(pod_namespace(Ok("kube-system\n".into())).unwrap(), "kube-system");
        let outside = pod_namespace(Err(std::io::ErrorKind::NotFound.into())).unwrap_err();
        assert_eq!(outside.flag, Flag::LeaderElectionNamespace);
        assert!(outside.to_string().contains("--leader-election-namespace (env POD_NAMESPACE)"), "{outside}");
        assert!(outside.problem.to_string().contains("outside a pod"), "{outside}");
        let not_a_name = pod_namespace(Ok("Not_A_Namespace".into())).unwrap_err();
        assert!(not_a_name.problem.to_string().contains("no namespace name"));
    }

    #[test]
    fn the_metrics_endpoint_can_be_turned_off_and_the_health_endpoints_cannot() {
        assert!(read::<RunArgs>(&["--metrics-bind-address=0"]).unwrap().metrics_bind_address.is_none());
        assert!(read::<RunArgs>(&[]).unwrap().metrics_bind_address.is_some());
        let error = read::<RunArgs>(&["--health-probe-bind-address=0"]).unwrap_err();
        assert!(error.contains("cannot be disabled"), "{error}");
    }

    #[test]
    fn an_empty_kubeconfig_is_not_given() {
        assert_eq!(read::<RunArgs>(&["--kubeconfig="]).unwrap().normalized().kubeconfig, None);
        let given = read::<RunArgs>(&["--kubeconfig=/etc/k"]).unwrap().normalized().kubeconfig;
        assert_eq!(given, Some(PathBuf::from("/etc/k")));
    }
}
