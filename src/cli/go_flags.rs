//! Go's spellings of the long flags, so a command line written for the Go kubelet-csr-approver
//! (parsed by Go's `flag` package) means the same here: `-name`, `-name=value` and `-name value`
//! are rewritten to clap's `--name`, `--name=value`; short options (`-o json`) are left alone.
//!
//! Like Go's `flag`, a flag that needs a value takes the next argument whatever it looks like
//! (`-provider-regex -x` sets `-x`), and a boolean flag takes a value only after `=`. Rewriting
//! stops at `--`. An argument that names no long flag is passed on unchanged, for clap to judge.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;

use clap::Command;

/// How a long flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// Never (`--help`, `--version`).
    Nothing,
    /// Only after `=` (the boolean flags: `--dry-run`, `--dry-run=false`).
    Attached,
    /// Always: attached, or the next argument.
    Value,
}

/// Rewrites the Go spellings in `args` (program name first, as `std::env::args_os` gives them) of
/// the long flags of `command` and its subcommands.
pub fn normalize(command: &Command, args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let flags = long_flags(command);
    let mut args = args.into_iter();
    let mut out: Vec<OsString> = args.next().into_iter().collect();
    while let Some(arg) = args.next() {
        let Some((name, value)) = arg.to_str().and_then(split_flag) else {
            let terminator = arg == "--";
            out.push(arg);
            if terminator {
                break;
            }
            continue;
        };
        let Some(&takes) = flags.get(name) else {
            out.push(arg);
            continue;
        };
        let mut long = OsString::from(format!("--{name}"));
        match (value, takes) {
            (Some(value), _) => long.push(format!("={value}")),
            (None, Takes::Value) => {
                if let Some(next) = args.next() {
                    long.push("=");
                    long.push(next);
                }
            }
            (None, Takes::Nothing | Takes::Attached) => {}
        }
        out.push(long);
    }
    out.extend(args);
    out
}

/// The names of the long flags that `args` (as [`normalize`] returns them) give, up to `--`.
pub fn given_long_flags(args: &[OsString]) -> HashSet<String> {
    args.iter()
        .skip(1)
        .map_while(|arg| (arg != "--").then(|| arg.to_str()))
        .flatten()
        .filter_map(|arg| arg.strip_prefix("--"))
        .map(|flag| flag.split_once('=').map_or(flag, |(name, _)| name).to_owned())
        .collect()
}

/// `-name[=value]` or `--name[=value]` as (name, value); `None` for anything else (short options
/// are caught later: their letters name no long flag).
fn split_flag(arg: &str) -> Option<(&str, Option<&str>)> {
    let rest = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    if rest.is_empty() || rest.starts_with(['-', '=']) {
        return None;
    }
    Some(match rest.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (rest, None),
    })
}

/// Every long flag of `command` and its subcommands, with how it takes its value.
fn long_flags(command: &Command) -> HashMap<String, Takes> {
    let mut command = command.clone();
    command.build();
    let mut flags = HashMap::new();
    collect(&command, &mut flags);
    flags
}

fn collect(command: &Command, flags: &mut HashMap<String, Takes>) {
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let takes = if !arg.get_action().takes_values() {
            Takes::Nothing
        } else if arg.get_num_args().is_some_and(|n| n.min_values() == 0) {
            Takes::Attached
        } else {
            Takes::Value
        };
        flags.insert(long.to_owned(), takes);
        for alias in arg.get_all_aliases().into_iter().flatten() {
            flags.insert(alias.to_owned(), takes);
        }
    }
    for sub in command.get_subcommands() {
        collect(sub, flags);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    fn rewrite(args: &[&str]) -> Vec<String> {
        let args = std::iter::once("node-csr-approver").chain(args.iter().copied()).map(OsString::from);
        normalize(&Cli::command(), args).into_iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn go_spellings_of_long_flags_become_clap_spellings() {
        assert_eq!(rewrite(&["-provider-regex", "x"]), ["--provider-regex=x"]);
        assert_eq!(rewrite(&["-provider-regex=x=y"]), ["--provider-regex=x=y"]);
        assert_eq!(rewrite(&["--provider-regex", "-x"]), ["--provider-regex=-x"]);
        assert_eq!(rewrite(&["-bypass-dns-resolution"]), ["--bypass-dns-resolution"]);
        assert_eq!(rewrite(&["-bypass-dns-resolution=F"]), ["--bypass-dns-resolution=F"]);
        assert_eq!(rewrite(&["-dry-run", "true"]), ["--dry-run", "true"], "a boolean takes only =value");
        assert_eq!(rewrite(&["-help"]), ["--help"]);
        assert_eq!(rewrite(&["check", "-now", "2026-01-01T00:00:00Z"]), ["check", "--now=2026-01-01T00:00:00Z"]);
    }

    #[test]
    fn short_options_unknown_names_and_arguments_after_the_terminator_stay() {
        assert_eq!(rewrite(&["check", "-o", "json", "-f", "-"]), ["check", "-o", "json", "-f", "-"]);
        assert_eq!(
            rewrite(&["-ojson", "-no-such-flag", "---dry-run", "-=x"]),
            ["-ojson", "-no-such-flag", "---dry-run", "-=x"]
        );
        assert_eq!(rewrite(&["--", "-dry-run"]), ["--", "-dry-run"]);
        assert_eq!(rewrite(&["-provider-regex"]), ["--provider-regex"], "a missing value is left for clap to refuse");
    }

    #[test]
    fn the_long_flags_given_are_named_up_to_the_terminator() {
        let args: Vec<OsString> =
            ["node-csr-approver", "check", "--dry-run", "--provider-regex=x=y", "-o", "--", "--level"]
                .into_iter()
                .map(OsString::from)
                .collect();
        let given = given_long_flags(&args);
        assert_eq!(given, HashSet::from(["dry-run".to_owned(), "provider-regex".to_owned()]));
    }

    #[test]
    fn no_long_flag_is_spelled_like_a_short_option() {
        let mut shorts = Vec::new();
        let mut command = Cli::command();
        command.build();
        let mut stack = vec![&command];
        while let Some(c) = stack.pop() {
            shorts.extend(c.get_arguments().filter_map(|a| a.get_short()));
            stack.extend(c.get_subcommands());
        }
        for name in long_flags(&Cli::command()).keys() {
            assert!(name.chars().count() > 1, "--{name} is one letter, like a short option");
            assert!(!shorts.iter().any(|s| name.as_str() == s.to_string()), "--{name}");
        }
    }
}
