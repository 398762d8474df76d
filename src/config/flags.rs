//! How clap reads one flag's value into its type: [`Checked`] runs a reading function and turns its
//! complaint into the one-line [`ConfigError`] that names the flag, its env var and the value, and
//! the readings the flag groups share (Go's booleans, bounded numbers and durations, keywords).
//! Each default is written once, as the flag's `default_value`; clap shows it in `--help`.

use std::ffi::OsStr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Arg, Args, Command};

use super::{ConfigError, MachineArgs, PolicyArgs, RunArgs};
use crate::policy::is_dns_subdomain;

/// Every argument the flag groups declare, as clap sees them.
static ARGUMENTS: LazyLock<Command> = LazyLock::new(|| {
    let command = PolicyArgs::augment_args(Command::new("node-csr-approver"));
    MachineArgs::augment_args(RunArgs::augment_args(command))
});

impl ConfigError {
    /// The error for `value` of the flag declared as `arg`: `problem` says what is wrong.
    fn of(arg: &Arg, value: &str, problem: impl Into<String>) -> ConfigError {
        let flag = arg.get_long().unwrap_or(arg.get_id().as_str());
        ConfigError {
            flag: format!("--{flag}"),
            env: arg.get_env().map(|env| env.to_string_lossy().into_owned()).unwrap_or_default(),
            value: value.to_owned(),
            problem: problem.into(),
        }
    }

    /// The error for `value` of the flag whose field is `id`, named as the flag groups declare it
    /// (also when the command line at hand dropped its env var: see `Cli::parse_go_style`): for
    /// the values clap reads, and for the rules checked afterwards (across flags, or in files).
    pub(super) fn of_field(id: &str, value: &str, problem: impl Into<String>) -> ConfigError {
        match ARGUMENTS.get_arguments().find(|arg| arg.get_id() == id) {
            Some(arg) => ConfigError::of(arg, value, problem),
            None => ConfigError {
                flag: format!("--{id}"),
                env: String::new(),
                value: value.into(),
                problem: problem.into(),
            },
        }
    }
}

/// A value parser for clap made of a reading function: what it returns is the flag's value, and
/// its complaint becomes a [`ConfigError`] that clap prints before exiting with code 2.
#[derive(Clone)]
pub(super) struct Checked<F>(pub F);

impl<T, F> TypedValueParser for Checked<F>
where
    T: Clone + Send + Sync + 'static,
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(&self, _: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        let error = |text: &str, problem: String| {
            let error = match arg {
                Some(arg) => ConfigError::of_field(arg.get_id().as_str(), text, problem),
                None => ConfigError { flag: String::new(), env: String::new(), value: text.into(), problem },
            };
            clap::Error::raw(ErrorKind::ValueValidation, format!("{error}\n"))
        };
        let text = value.to_str().ok_or_else(|| error(&value.to_string_lossy(), "not UTF-8".into()))?;
        (self.0)(text).map_err(|problem| error(text, problem))
    }
}

/// A boolean as [`go_bool`] reads it.
pub(super) fn boolean() -> Checked<impl Fn(&str) -> Result<bool, String> + Clone> {
    Checked(|text: &str| {
        go_bool(text).ok_or_else(|| {
            "expected a boolean as Go reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False".to_owned()
        })
    })
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

/// A whole number within `range`, as a `T` (which holds every number of the range).
pub(super) fn number<T: TryFrom<i64>>(
    range: RangeInclusive<i64>,
) -> Checked<impl Fn(&str) -> Result<T, String> + Clone> {
    Checked(move |text: &str| {
        let problem = || format!("expected a whole number from {} to {}", range.start(), range.end());
        let number: i64 = text.trim().parse().map_err(|_| problem())?;
        if !range.contains(&number) {
            return Err(problem());
        }
        T::try_from(number).map_err(|_| problem())
    })
}

/// A duration such as `500ms` or `5m` from `min` to `max`.
pub(super) fn duration(min: Duration, max: Duration) -> Checked<impl Fn(&str) -> Result<Duration, String> + Clone> {
    Checked(move |text: &str| {
        let problem = || {
            format!(
                "expected a duration such as 500ms, 2s or 5m, from {} to {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            )
        };
        let duration = humantime::parse_duration(text.trim()).map_err(|_| problem())?;
        if (min..=max).contains(&duration) { Ok(duration) } else { Err(problem()) }
    })
}

/// One of `choices` (a keyword and its value), in any case and with surrounding blanks.
pub(super) fn keyword<T: Clone + Send + Sync + 'static>(
    choices: &'static [(&'static str, T)],
) -> Checked<impl Fn(&str) -> Result<T, String> + Clone> {
    Checked(move |text: &str| {
        let wanted = text.trim().to_ascii_lowercase();
        choices.iter().find(|(name, _)| *name == wanted).map(|(_, value)| value.clone()).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            match names.split_last() {
                Some((last, [])) => format!("expected {last}"),
                Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
                None => "no value is accepted".to_owned(),
            }
        })
    })
}

/// A file path as given; an empty one is read as not given (see [`given_path`]).
pub(super) fn path() -> Checked<impl Fn(&str) -> Result<PathBuf, String> + Clone> {
    Checked(|text: &str| Ok(PathBuf::from(text)))
}

/// `path` unless it is empty: an empty path counts as not given, as Go's flag defaults do.
pub(super) fn given_path(path: &Option<PathBuf>) -> Option<PathBuf> {
    path.clone().filter(|path| !path.as_os_str().is_empty())
}

/// A namespace name (one lowercase DNS label), trimmed; empty when given empty.
pub(super) fn namespace_or_empty() -> Checked<impl Fn(&str) -> Result<String, String> + Clone> {
    Checked(|text: &str| {
        let namespace = text.trim();
        if namespace.is_empty() || is_dns_label(namespace) {
            Ok(namespace.to_owned())
        } else {
            Err("expected a namespace name".to_owned())
        }
    })
}

/// A comma-separated list, each entry trimmed and read by `entry`; an empty entry is an error.
pub(super) fn list<T>(text: &str, entry: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            if item.is_empty() { Err("empty entry in the comma-separated list".to_owned()) } else { entry(item) }
        })
        .collect()
}

/// Whether `name` is a DNS label, as namespace names must be.
pub(super) fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

/// Test support: the flag groups read from a command line and an environment, as the binary
/// reads them.
#[cfg(test)]
pub(super) mod reading {
    use clap::{Args, FromArgMatches};

    /// `A` read from `args` alone: the env vars are not read, so the environment the tests run
    /// in cannot change what they see (errors still name them); the error is the line clap
    /// would print.
    pub fn read<A: Args + FromArgMatches>(args: &[&str]) -> Result<A, String> {
        let command = A::augment_args(clap::Command::new("node-csr-approver").no_binary_name(true));
        let command = command.mut_args(|arg| arg.env(None));
        let matches = command.try_get_matches_from(args).map_err(|e| e.to_string())?;
        A::from_arg_matches(&matches).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::reading::read;
    use super::*;

    #[test]
    fn errors_name_the_flag_and_env_var_clap_declares() {
        let error = read::<PolicyArgs>(&["--dns-server=x"]).unwrap_err();
        assert!(error.contains("--dns-server (env DNS_SERVERS)"), "{error}");
        let error = ConfigError::of_field("leader_election_namespace", "x", "bad");
        assert_eq!((error.flag.as_str(), error.env.as_str()), ("--leader-election-namespace", "POD_NAMESPACE"));
    }

    #[test]
    fn an_empty_path_counts_as_not_given() {
        assert_eq!(given_path(&Some(PathBuf::new())), None);
        assert_eq!(given_path(&Some("/etc/kubeconfig".into())), Some(PathBuf::from("/etc/kubeconfig")));
        assert_eq!(given_path(&None), None);
    }

    #[test]
    fn keywords_are_read_in_any_case_and_name_every_choice_when_wrong() {
        let read = keyword(&[("json", 1), ("text", 2), ("yaml", 3)]).0;
        assert_eq!(read(" TEXT "), Ok(2));
        assert_eq!(read("xml"), Err("expected json, text or yaml".to_owned()));
    }

    #[test]
    fn numbers_and_durations_stay_within_their_bounds() {
        let count = number::<u8>(1..=10).0;
        assert_eq!((count(" 1"), count("10")), (Ok(1), Ok(10)));
        for bad in ["0", "11", "x", ""] {
            assert!(count(bad).is_err(), "{bad}");
        }
        let span = duration(Duration::from_secs(1), Duration::from_secs(60)).0;
        assert_eq!(span("1m"), Ok(Duration::from_secs(60)));
        assert!(span("999ms").is_err() && span("61s").is_err() && span("soon").is_err());
    }

    #[test]
    fn lists_refuse_empty_entries() {
        assert_eq!(list("a, b", |s| Ok(s.to_owned())), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert!(list("a,,b", |s| Ok(s.to_owned())).is_err());
    }

    #[test]
    fn every_declared_argument_has_a_long_flag_and_an_env_var() {
        for arg in ARGUMENTS.get_arguments().filter(|arg| arg.get_id() != "help") {
            assert!(arg.get_long().is_some() && arg.get_env().is_some(), "{}", arg.get_id());
        }
    }
}
