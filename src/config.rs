//! Command-line flags and environment variables, read by clap into the typed values of three flag
//! groups, then checked across flags into the [`Settings`] a command needs. Every startup error
//! is produced here and names the flag, its env var and the value; the rules themselves are the
//! policy's types ([`crate::policy::PolicyConfig`]).

mod audit_flags;
mod bind_address;
mod check_args;
mod format;
mod machine_flags;
mod policy_flags;
mod regex_anchoring;
mod rules_file;
mod run_flags;
mod values;

use std::fmt::Display;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{Arg, Args, Command, ValueEnum};

#[cfg(test)]
pub(crate) use audit_flags::DEFAULT_EXPIRING_WITHIN_TEXT;
pub use audit_flags::{AuditScanArgs, AuditSchedule, DEFAULT_EXPIRING_WITHIN};
pub use bind_address::{BindAddress, BindAddressError};
pub use check_args::CheckArgs;
pub use format::Format;
pub use machine_flags::{MachineApi, MachineArgs, MachineSource};
pub use policy_flags::{DnsConfig, PolicyArgs, Warning};
use rules_file::RulesFileError;
pub use run_flags::{EventLevel, LeaderConfig, LogFormat, RunArgs};
pub(crate) use values::Checked;
pub use values::go_bool;

use crate::policy::PolicyConfig;

/// Everything `run` and `check` need, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The rules, machine mode's included.
    pub policy: PolicyConfig,
    /// The resolver.
    pub dns: DnsConfig,
    /// The controller's flags, as read.
    pub run: RunArgs,
    /// Leader election, when enabled.
    pub leader: Option<LeaderConfig>,
    /// Where Machines are read from, in machine mode.
    pub machines: Option<MachineSource>,
    /// The controller's periodic audit, when `--audit-period` turns it on.
    pub audit: Option<AuditSchedule>,
    /// Valid but weaker than it could be: logged at startup.
    pub warnings: Vec<Warning>,
}

/// Checks what spans flags or reads files; the first invalid value is returned as a [`ConfigError`].
pub fn validate(policy: PolicyArgs, run: RunArgs, machine: MachineArgs) -> Result<Settings, ConfigError> {
    let (mut rules, dns, warnings) = policy.validate()?;
    let audit = run.audit.schedule(machine.kubelet_serving_ca_file.clone(), machine.kubelet_port);
    let machines = machine.validate()?.map(|(machine_rules, source)| {
        rules.machine = Some(machine_rules);
        MachineSource { keep_objects: rules.user_rules.read_machine(), ..source }
    });
    let leader = run.leader.validate()?;
    Ok(Settings { policy: rules, dns, run: run.normalized(), leader, machines, audit, warnings })
}

/// A flag that a check made after clap read every value names: its variant's name, in kebab
/// case, is the long flag (`Flag::RenewDeadline` is `--renew-deadline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Flag {
    /// `--provider-regex`, required.
    ProviderRegex,
    /// `--rules`, the file of CEL rules.
    Rules,
    /// `--machine-approver-config`, OpenShift's file.
    MachineApproverConfig,
    /// `--leader-election-namespace`, the pod's own when not given.
    LeaderElectionNamespace,
    /// `--lease-duration`.
    LeaseDuration,
    /// `--renew-deadline`, shorter than `--lease-duration`.
    RenewDeadline,
    /// `--retry-period`, shorter than `--renew-deadline`.
    RetryPeriod,
}

impl Flag {
    /// The long flag, without its dashes.
    pub fn long(self) -> String {
        self.to_possible_value().map(|value| value.get_name().to_owned()).unwrap_or_default()
    }
}

impl Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}", self.long())
    }
}

/// A configuration value that cannot be used; the program stops with exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{}", described(&self.flag.long(), &self.value, &self.problem))]
pub struct ConfigError {
    /// The flag whose value it is.
    pub flag: Flag,
    /// The offending value as given.
    pub value: String,
    /// What is wrong with it.
    #[source]
    pub(crate) problem: ValueError,
}

/// What is wrong with a flag's or an argument's value; each variant's message says it (an
/// argument's names the value too: clap's line of a command's own argument does not).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("expected a boolean as Go reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False")]
    NotBoolean,
    #[error("expected a whole number from {0} to {1}")]
    Number(i64, i64),
    #[error("expected a duration such as 500ms, 2s or 5m, from {} to {}", humantime::format_duration(*.0), humantime::format_duration(*.1))]
    Duration(Duration, Duration),
    #[error("whole seconds only")]
    NotWholeSeconds,
    #[error("expected {}", one_of(.0))]
    Keyword(Vec<&'static str>),
    #[error("empty entry in the comma-separated list")]
    EmptyEntry,
    #[error("empty entry in the list")]
    EmptyServer,
    #[error("expected a namespace name")]
    NotNamespace,
    #[error("expected a lowercase DNS subdomain name")]
    NotLeaseName,
    #[error("not a DNS name such as cluster.local")]
    NotDomain,
    #[error("{0:?} is not ip[:port], e.g. 10.96.0.10 or [fd00::a]:53")]
    NotServer(String),
    #[error("{0:?} is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8")]
    NotPrefix(String),
    #[error("{0:?} is not machine.openshift.io/v1beta1 or cluster.x-k8s.io/v1beta1")]
    NotMachineApi(String),
    #[error("required, and must not be empty")]
    Required,
    #[error("{}", one_line(&.0.to_string()))]
    Regex(#[from] regex::Error),
    #[error("must not match node identities (system:node:<name>)")]
    NodeIdentity,
    #[error(
        "the prefix {0:?} also matches node identities (system:node:<name>); name the bootstrap identity more \
         narrowly, e.g. system:bootstrap:*"
    )]
    NodePrefix(String),
    #[error("a prefix must end with ':' before the '*', e.g. system:bootstrap:*")]
    PrefixWithoutColon,
    #[error("expected a username or a prefix ending in :*")]
    NotBootstrapper,
    #[error(transparent)]
    KubeletServingCa(#[from] crate::kubelet_tls::PemError),
    #[error(transparent)]
    BindAddress(#[from] BindAddressError),
    #[error("the health endpoints cannot be disabled")]
    HealthOff,
    #[error(transparent)]
    LogFilter(#[from] tracing_subscriber::filter::ParseError),
    #[error("cannot read: {0}")]
    Unreadable(#[from] std::io::Error),
    #[error("{0}")]
    ApproverConfig(Box<serde_saphyr::Error>),
    #[error(transparent)]
    RulesFile(#[from] RulesFileError),
    #[error("must be shorter than {0}")]
    NotShorterThan(Flag),
    #[error("required with --leader-election outside a pod")]
    OutsidePod,
    #[error("{} holds no namespace name", run_flags::POD_NAMESPACE_FILE)]
    PodNamespace,
    #[error("{0:?} is not NODE=PEMFILE")]
    NotNodeCertificate(String),
    #[error("{0:?} is not an RFC 3339 time such as 2026-01-02T15:04:05Z")]
    NotTime(String, #[source] jiff::Error),
    #[error(
        "{0:?} is not a finding (unreachable, not-dialled, malformed, self-signed, untrusted, non-compliant, undetermined, expired, expiring[=DURATION])"
    )]
    NotFinding(String),
    #[error("only expiring takes a duration, not {0:?}")]
    DurationNotAllowed(String),
    #[error("{0:?} is not a duration from {1:?} to {2:?} such as 7d or 12h")]
    NotDurationWithin(String, Duration, Duration),
}

/// Every argument the flag groups declare, as clap sees them.
static ARGUMENTS: LazyLock<Command> = LazyLock::new(|| {
    let command = PolicyArgs::augment_args(Command::new("node-csr-approver"));
    MachineArgs::augment_args(RunArgs::augment_args(command))
});

/// The one line of a bad `value` of `--long`: it names the flag and its env var as the flag
/// groups declare them (also when the command line at hand dropped the env var: see
/// `Cli::parse_go_style`).
fn described(long: &str, value: &str, problem: &dyn Display) -> String {
    let env = ARGUMENTS.get_arguments().find(|arg| arg.get_long() == Some(long)).and_then(Arg::get_env);
    let env = env.map(|env| env.to_string_lossy()).unwrap_or_default();
    format!("invalid value {value:?} for --{long} (env {env}): {problem}")
}

/// `a`, `a or b`, `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `text` with every run of blanks and line breaks made one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::values::reading::read;
    use super::*;

    /// testkit's configuration is "the documented defaults": it must be what the flags give.
    #[test]
    fn the_defaults_testkit_decides_with_are_the_flags_defaults() {
        let prefixes = format!("--provider-ip-prefixes={},fd00::/64", testkit::policy::PREFIXES);
        let regex = format!("--provider-regex={}", testkit::policy::REGEX);
        let args = read::<PolicyArgs>(&[&regex, &prefixes, "--bypass-dns-resolution"]).unwrap();
        let (policy, _, _) = args.validate().unwrap();
        assert_eq!(format!("{policy:?}"), format!("{:?}", testkit::policy::config()));
    }

    #[test]
    fn every_flag_an_error_names_is_a_flag_with_an_env_var() {
        for flag in Flag::value_variants() {
            let arg = ARGUMENTS.get_arguments().find(|arg| arg.get_long() == Some(&flag.long()));
            assert!(arg.is_some_and(|arg| arg.get_env().is_some()), "{flag}");
        }
        let error =
            ConfigError { flag: Flag::LeaderElectionNamespace, value: "x".into(), problem: ValueError::OutsidePod };
        assert!(
            error.to_string().starts_with(r#"invalid value "x" for --leader-election-namespace (env POD_NAMESPACE): "#)
        );
    }

    #[test]
    fn every_declared_argument_has_a_long_flag_and_an_env_var() {
        for arg in ARGUMENTS.get_arguments().filter(|arg| arg.get_id() != "help") {
            assert!(arg.get_long().is_some() && arg.get_env().is_some(), "{}", arg.get_id());
        }
    }
}
