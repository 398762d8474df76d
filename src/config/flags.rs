//! Reading one flag's value. A [`Field`] pairs the value with its argument id (the field name, by
//! [`field!`]); errors take the flag's and env var's names from clap's own declaration, so each
//! name is written once, in its `#[arg]`.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{Args, Command};

use super::{ConfigError, MachineArgs, PolicyArgs, RunArgs};
use crate::policy::is_dns_subdomain;

/// Every argument the flag groups declare, as clap sees them.
static ARGUMENTS: LazyLock<Command> = LazyLock::new(|| {
    let command = PolicyArgs::augment_args(Command::new("node-csr-approver"));
    MachineArgs::augment_args(RunArgs::augment_args(command))
});

/// A flag's value as given, and the id clap knows the flag by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field<'a, T> {
    /// The argument id: the field's name.
    pub id: &'static str,
    /// The value as given (on the command line or in the env var).
    pub value: &'a T,
}

/// The [`Field`] `args.name`, named after the field itself.
macro_rules! field {
    ($args:ident . $name:ident) => {
        $crate::config::flags::Field { id: stringify!($name), value: &$args.$name }
    };
}
pub(super) use field;

impl<T> Field<'_, T> {
    /// The error for `value` of this flag: `problem` says what is wrong.
    pub fn error(&self, value: &str, problem: impl Into<String>) -> ConfigError {
        let declared = ARGUMENTS.get_arguments().find(|arg| arg.get_id() == self.id);
        let flag = declared.and_then(|arg| arg.get_long()).unwrap_or(self.id);
        let env = declared.and_then(|arg| arg.get_env()).map(|env| env.to_string_lossy().into_owned());
        ConfigError {
            flag: format!("--{flag}"),
            env: env.unwrap_or_default(),
            value: value.to_owned(),
            problem: problem.into(),
        }
    }
}

impl<'a> Field<'a, Option<String>> {
    /// The value as text, when given.
    pub fn text(&self) -> Option<&'a str> {
        self.value.as_deref()
    }

    /// A file path; an empty value counts as not given, as Go's flag defaults do.
    pub fn path(&self) -> Option<PathBuf> {
        self.text().filter(|text| !text.is_empty()).map(PathBuf::from)
    }

    /// A boolean as [`go_bool`] reads it; `default` when not given.
    pub fn boolean(&self, default: bool) -> Result<bool, ConfigError> {
        let Some(text) = self.text() else { return Ok(default) };
        go_bool(text).ok_or_else(|| {
            self.error(
                text,
                "expected a boolean as Go reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False",
            )
        })
    }

    /// A whole number within `range`; `default` when not given.
    pub fn number(&self, range: RangeInclusive<i64>, default: i64) -> Result<i64, ConfigError> {
        let Some(text) = self.text() else { return Ok(default) };
        let problem = || format!("expected a whole number from {} to {}", range.start(), range.end());
        let number: i64 = text.trim().parse().map_err(|_| self.error(text, problem()))?;
        if range.contains(&number) { Ok(number) } else { Err(self.error(text, problem())) }
    }

    /// A duration such as `500ms` or `5m` from `min` to `max`; `default` when not given.
    pub fn duration(&self, (min, max): (Duration, Duration), default: Duration) -> Result<Duration, ConfigError> {
        let Some(text) = self.text() else { return Ok(default) };
        let problem = || {
            format!(
                "expected a duration such as 500ms, 2s or 5m, from {} to {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            )
        };
        let duration = humantime::parse_duration(text.trim()).map_err(|_| self.error(text, problem()))?;
        if (min..=max).contains(&duration) { Ok(duration) } else { Err(self.error(text, problem())) }
    }
}

/// A boolean spelled as Go's `strconv.ParseBool` accepts it (the Go kubelet-csr-approver reads its
/// boolean flags and env vars with it): exactly `1 t T TRUE true True` or `0 f F FALSE false False`.
pub fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Whether `name` is a DNS label, as namespace names must be.
pub(super) fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_flag_and_env_var_clap_declares() {
        let args = PolicyArgs::default();
        let error = field!(args.dns_servers).error("x", "bad");
        assert_eq!((error.flag.as_str(), error.env.as_str()), ("--dns-server", "DNS_SERVERS"));
        let run = RunArgs::default();
        let error = field!(run.leader_election_namespace).error("x", "bad");
        assert_eq!((error.flag.as_str(), error.env.as_str()), ("--leader-election-namespace", "POD_NAMESPACE"));
    }

    #[test]
    fn an_empty_path_counts_as_not_given() {
        let mut args = RunArgs { kubeconfig: Some(String::new()), ..RunArgs::default() };
        assert_eq!(field!(args.kubeconfig).path(), None);
        args.kubeconfig = Some("/etc/kubeconfig".into());
        assert_eq!(field!(args.kubeconfig).path(), Some(std::path::PathBuf::from("/etc/kubeconfig")));
    }

    #[test]
    fn every_declared_argument_has_a_long_flag_and_an_env_var() {
        for arg in ARGUMENTS.get_arguments().filter(|arg| arg.get_id() != "help") {
            assert!(arg.get_long().is_some() && arg.get_env().is_some(), "{}", arg.get_id());
        }
    }
}
