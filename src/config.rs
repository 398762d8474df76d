//! Command-line flags and environment variables, validated into the [`Settings`] a command needs.
//! Every startup error is produced here and names the flag, its env var and the value; the rules
//! themselves are the policy's types ([`crate::policy::PolicyConfig`]).

mod bind_address;
mod flags;
mod machine_flags;
mod policy_flags;
mod regex_anchoring;
mod rules_file;
mod run_flags;

pub use bind_address::{BindAddress, BindAddressError};
pub use flags::go_bool;
pub use machine_flags::{Groups, MachineApi, MachineArgs, MachineSource};
pub use policy_flags::{DnsConfig, PolicyArgs, Prefixes, Warning};
pub use run_flags::{AdminAddress, EventLevel, LeaderConfig, LogFormat, RunArgs, RunConfig};

use crate::policy::PolicyConfig;

/// A configuration value that cannot be used; the program stops with exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("invalid value {value:?} for {flag} (env {env}): {problem}")]
pub struct ConfigError {
    /// The command-line flag, e.g. `--provider-regex`.
    pub flag: String,
    /// The environment variable read when the flag is absent.
    pub env: String,
    /// The offending value as given.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Everything `run` and `check` need, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The rules, machine mode's included.
    pub policy: PolicyConfig,
    /// The resolver.
    pub dns: DnsConfig,
    /// The controller.
    pub run: RunConfig,
    /// Where Machines are read from, in machine mode.
    pub machines: Option<MachineSource>,
    /// Valid but weaker than it could be: logged at startup.
    pub warnings: Vec<Warning>,
}

/// Validates every flag group; the first invalid value is returned as a [`ConfigError`].
pub fn validate(policy: &PolicyArgs, run: &RunArgs, machine: &MachineArgs) -> Result<Settings, ConfigError> {
    let (mut rules, dns, warnings) = policy.validate()?;
    let machine = machine.validate()?;
    let run = run.validate()?;
    let machines = machine.map(|(machine_rules, source)| {
        rules.machine = Some(machine_rules);
        MachineSource { keep_objects: rules.user_rules.read_machine(), ..source }
    });
    Ok(Settings { policy: rules, dns, run, machines, warnings })
}

#[cfg(test)]
mod tests {
    use super::flags::reading::read;
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
}
