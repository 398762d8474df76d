//! How clap reads one flag's or argument's value into its type, shared by the configuration and
//! the audit: [`Checked`] runs a reading function and prints its [`ValueError`] as the one line
//! that names the flag, its env var and the value (a command's own argument, which has no env var,
//! as clap's line); [`shared`] gives every flag of the groups its common shape (global, booleans
//! as Go's `flag` reads them); and the readings the flag groups share (bounded numbers and
//! durations, keywords, lists), the bind address and the reports' [`Format`].
//! Each default is written once, as the flag's `default_value`; clap shows it in `--help`.

mod bind_address;
mod error;
mod format;

use std::ffi::{OsStr, OsString};
use std::fmt::Display;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{ArgExt, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Command};

pub use bind_address::{BindAddress, BindAddressError};
pub(crate) use error::{ValueError, one_line};
pub use format::Format;

use crate::policy::is_dns_subdomain;

/// A value parser for clap made of a reading function: what it returns is the flag's value, and
/// its [`ValueError`] is the line clap prints before exiting with code 2.
#[derive(Clone)]
pub(crate) struct Checked<F>(pub F);

impl<T, F> TypedValueParser for Checked<F>
where
    T: Clone + Send + Sync + 'static,
    F: Fn(&str) -> Result<T, ValueError> + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(&self, command: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        if !arg.is_some_and(Arg::is_global_set) {
            // A command's own argument, which has no env var: clap's line names it as the usage
            // does (`'--now <RFC3339>'`), and the problem names the value.
            return TypedValueParser::parse_ref(&self.0, command, arg, value);
        }
        let long = arg.and_then(Arg::get_long).unwrap_or_default();
        let env = arg.and_then(env_of).map(OsStr::to_string_lossy).unwrap_or_default();
        let error = |text: &str, problem: ValueError| {
            clap::Error::raw(ErrorKind::ValueValidation, format!("{}\n", described(long, &env, text, &problem)))
        };
        let text = value.to_str().ok_or_else(|| error(&value.to_string_lossy(), ValueError::NotUtf8))?;
        (self.0)(text).map_err(|problem| error(text, problem))
    }
}

/// The env var a flag reads, also when the command line at hand dropped it ([`without_env`]).
fn env_of(arg: &Arg) -> Option<&OsStr> {
    arg.get_env().or_else(|| arg.get::<DroppedEnv>().map(|dropped| dropped.0.as_os_str()))
}

/// The env var of a flag whose env var is not read, kept for its error line.
#[derive(Debug, Clone)]
struct DroppedEnv(OsString);

impl ArgExt for DroppedEnv {}

/// `arg` without its env var, which is then not read; its errors still name it.
pub(crate) fn without_env(arg: Arg) -> Arg {
    match arg.get_env().map(OsStr::to_owned) {
        Some(env) => arg.env(None).add(DroppedEnv(env)),
        None => arg,
    }
}

/// The one line of a bad `value` of `--long`, whose env var is `env`.
pub(crate) fn described(long: &str, env: &str, value: &str, problem: &dyn Display) -> String {
    format!("invalid value {value:?} for --{long} (env {env}): {problem}")
}

/// The shape every flag of the groups shares: global, so it may follow a subcommand; and a
/// boolean (a `bool` field) read as Go's `flag` reads one: `--flag` alone, or a value after `=`
/// spelled as [`go_bool`] reads it.
pub(crate) fn shared(arg: Arg) -> Arg {
    let arg = arg.global(true);
    if arg.get_value_parser().type_id() != clap::builder::ValueParser::bool().type_id() {
        return arg;
    }
    let boolean = |text: &str| go_bool(text).ok_or(ValueError::NotBoolean);
    arg.action(ArgAction::Set)
        .num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .value_parser(Checked(boolean))
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
pub(crate) fn number<T: TryFrom<i64>>(
    range: RangeInclusive<i64>,
) -> Checked<impl Fn(&str) -> Result<T, ValueError> + Clone> {
    Checked(move |text: &str| {
        let problem = || ValueError::Number(*range.start(), *range.end());
        let number: i64 = text.trim().parse().map_err(|_| problem())?;
        if !range.contains(&number) {
            return Err(problem());
        }
        T::try_from(number).map_err(|_| problem())
    })
}

/// The smallest rate above 0: one request every 100 s. A smaller one would make the wait for a
/// token longer than a `Duration` holds.
pub(crate) const MIN_RATE: f64 = 0.01;

/// A rate of requests a second, a decimal number (`20`, `0.5`): 0, or from [`MIN_RATE`] to `max`.
pub(crate) fn rate(max: u32) -> Checked<impl Fn(&str) -> Result<f64, ValueError> + Clone> {
    Checked(move |text: &str| match text.trim().parse::<f64>() {
        Ok(rate) if rate == 0.0 || (MIN_RATE..=f64::from(max)).contains(&rate) => Ok(rate),
        _ => Err(ValueError::Rate(max)),
    })
}

/// A duration such as `500ms` or `5m` from `min` to `max`.
pub(crate) fn duration(min: Duration, max: Duration) -> Checked<impl Fn(&str) -> Result<Duration, ValueError> + Clone> {
    Checked(move |text: &str| match humantime::parse_duration(text.trim()) {
        Ok(duration) if (min..=max).contains(&duration) => Ok(duration),
        _ => Err(ValueError::Duration(min, max)),
    })
}

/// One of `choices` (a keyword and its value), in any case and with surrounding blanks.
pub(crate) fn keyword<T: Clone + Send + Sync + 'static>(
    choices: &'static [(&'static str, T)],
) -> Checked<impl Fn(&str) -> Result<T, ValueError> + Clone> {
    Checked(move |text: &str| {
        let wanted = text.trim().to_ascii_lowercase();
        let found = choices.iter().find(|(name, _)| *name == wanted).map(|(_, value)| value.clone());
        found.ok_or_else(|| ValueError::Keyword(choices.iter().map(|(name, _)| *name).collect()))
    })
}

/// A file path as given; an empty one is read as not given (see [`given`]).
pub(crate) fn path(text: &str) -> Result<PathBuf, ValueError> {
    Ok(PathBuf::from(text))
}

/// `value` unless it is empty: an empty path or name counts as not given, as Go's flag defaults do.
pub(crate) fn given<T: AsRef<OsStr>>(value: Option<T>) -> Option<T> {
    value.filter(|value| !value.as_ref().is_empty())
}

/// A namespace name (one lowercase DNS label), trimmed; empty when given empty.
pub(crate) fn namespace_or_empty(text: &str) -> Result<String, ValueError> {
    let namespace = text.trim();
    if namespace.is_empty() || is_dns_label(namespace) {
        Ok(namespace.to_owned())
    } else {
        Err(ValueError::NotNamespace)
    }
}

/// A comma-separated list, each entry trimmed and read by `entry`; an empty entry is an error.
pub(crate) fn list<T>(text: &str, entry: impl Fn(&str) -> Result<T, ValueError>) -> Result<Vec<T>, ValueError> {
    text.split(',')
        .map(str::trim)
        .map(|item| if item.is_empty() { Err(ValueError::EmptyEntry) } else { entry(item) })
        .collect()
}

/// Whether `name` is a DNS label, as namespace names must be.
pub(crate) fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

/// Test support: the flag groups read from a command line and an environment, as the binary
/// reads them.
#[cfg(test)]
pub(crate) mod reading {
    use clap::{Args, FromArgMatches};

    use super::without_env;

    /// `A` read from `args` alone: the env vars are not read, so the environment the tests run
    /// in cannot change what they see (errors still name them); the error is the line clap
    /// would print.
    pub fn read<A: Args + FromArgMatches>(args: &[&str]) -> Result<A, String> {
        let command = A::augment_args(clap::Command::new("node-csr-approver").no_binary_name(true));
        let command = command.mut_args(without_env);
        let matches = command.try_get_matches_from(args).map_err(|e| e.to_string())?;
        A::from_arg_matches(&matches).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_path_counts_as_not_given() {
        assert_eq!(given(Some(PathBuf::new())), None);
        assert_eq!(given(Some(PathBuf::from("/etc/kubeconfig"))), Some(PathBuf::from("/etc/kubeconfig")));
        assert_eq!(given(None::<PathBuf>), None);
    }

    #[test]
    fn keywords_are_read_in_any_case_and_name_every_choice_when_wrong() {
        let read = keyword(&[("json", 1), ("text", 2), ("yaml", 3)]).0;
        assert_eq!(read(" TEXT ").unwrap(), 2);
        assert_eq!(read("xml").unwrap_err().to_string(), "expected json, text or yaml");
        assert_eq!(keyword(&[("json", 1)]).0("xml").unwrap_err().to_string(), "expected json");
    }

    #[test]
    fn numbers_and_durations_stay_within_their_bounds() {
        let count = number::<u8>(1..=10).0;
        assert_eq!((count(" 1").unwrap(), count("10").unwrap()), (1, 10));
        for bad in ["0", "11", "x", ""] {
            assert!(count(bad).is_err(), "{bad}");
        }
        let span = duration(Duration::from_secs(1), Duration::from_secs(60)).0;
        assert_eq!(span("1m").unwrap(), Duration::from_secs(60));
        assert!(span("999ms").is_err() && span("61s").is_err() && span("soon").is_err());
    }

    #[test]
    fn rates_are_decimal_numbers_within_their_bound() {
        let qps = rate(100).0;
        assert_eq!((qps("0").unwrap(), qps(" 0.5").unwrap(), qps("100").unwrap()), (0.0, 0.5, 100.0));
        assert_eq!(qps("0.01").unwrap(), MIN_RATE);
        for bad in ["-1", "100.5", "NaN", "inf", "x", "", "0.009", "1e-300"] {
            assert!(qps(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_refuse_empty_entries() {
        assert_eq!(list("a, b", |s| Ok(s.to_owned())).unwrap(), vec!["a".to_owned(), "b".to_owned()]);
        assert!(list("a,,b", |s| Ok(s.to_owned())).is_err());
    }
}
