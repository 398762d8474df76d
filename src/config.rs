//! Command-line flags and environment variables, read by clap into the typed values of three flag
//! groups, then checked across flags into the [`Settings`] a command needs. Every startup error
//! is produced here and names the flag, its env var and the value; the rules themselves are the
//! policy's types ([`crate::policy::PolicyConfig`]).

mod check_args;
mod machine_flags;
mod policy_flags;
mod regex_anchoring;
mod rules_file;
mod run_flags;

use std::fmt::Display;
use std::sync::LazyLock;

use clap::{Arg, Args, Command, ValueEnum};

pub use check_args::CheckArgs;
pub use machine_flags::MachineArgs;
pub use policy_flags::{DnsConfig, PolicyArgs, Warning};
use rules_file::RulesFileError;
pub use run_flags::{LogFormat, RunArgs};

use crate::audit::flags::AuditSchedule;
use crate::kubernetes::leader::LeaderConfig;
use crate::kubernetes::machines::MachineSource;
use crate::policy::PolicyConfig;
use crate::values::ValueError;

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
    pub(crate) problem: Problem,
}

/// What is wrong with a flag's value: what reading it found, or what a check across flags or
/// of a file it names found after clap read every value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    #[error(transparent)]
    Value(#[from] ValueError),
    #[error(transparent)]
    RulesFile(#[from] RulesFileError),
    #[error("must be shorter than {0}")]
    NotShorterThan(Flag),
    #[error("{} holds no namespace name", run_flags::POD_NAMESPACE_FILE)]
    PodNamespace,
}

/// Every argument the flag groups declare, as clap sees them.
static ARGUMENTS: LazyLock<Command> = LazyLock::new(|| {
    let command = PolicyArgs::augment_args(Command::new("node-csr-approver"));
    MachineArgs::augment_args(RunArgs::augment_args(command))
});

/// The one line of a bad `value` of `--long`: it names the flag and its env var as the flag
/// groups declare them.
fn described(long: &str, value: &str, problem: &dyn Display) -> String {
    let env = ARGUMENTS.get_arguments().find(|arg| arg.get_long() == Some(long)).and_then(Arg::get_env);
    crate::values::described(long, &env.map(|env| env.to_string_lossy()).unwrap_or_default(), value, problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::reading::read;

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
        let error = ConfigError {
            flag: Flag::LeaderElectionNamespace,
            value: "x".into(),
            problem: ValueError::OutsidePod.into(),
        };
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

    #[test]
    fn errors_name_the_flag_and_env_var_clap_declares() {
        let error = read::<PolicyArgs>(&["--dns-server=x"]).unwrap_err();
        assert!(error.contains("--dns-server (env DNS_SERVERS)"), "{error}");
        let error = described("leader-election-namespace", "x", &"bad");
        assert!(error.contains("--leader-election-namespace (env POD_NAMESPACE)"), "{error}");
    }

    #[test]
    fn booleans_are_read_as_go_reads_them_and_only_after_an_equals_sign() {
        let skip = |args: &[&str]| read::<PolicyArgs>(args).map(|args| args.skip_deny_step);
        assert_eq!(skip(&[]), Ok(false));
        assert_eq!(skip(&["--skip-deny-step"]), Ok(true));
        assert_eq!(skip(&["--skip-deny-step=F"]), Ok(false));
        assert!(skip(&["--skip-deny-step", "true"]).is_err(), "a boolean takes a value only after =");
        assert!(skip(&["--skip-deny-step=yes"]).unwrap_err().contains("expected a boolean as Go reads it"));
    }
}
