//! The command line read as Go's `flag` package reads it (the Go kubelet-csr-approver parses its
//! flags with it): every root flag, in Go's spellings, against the real Go parser (the tool
//! `go-flags`). Whenever one side accepts a command line, the other accepts it too and reads the
//! same values; booleans read as Go's `strconv.ParseBool` reads them. And the flags the binary
//! takes as given on the command line (whose env vars it then does not read) are exactly the
//! flags clap reads from it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use clap::builder::ValueParser;
use clap::parser::ValueSource;
use clap::{Arg, CommandFactory};
use node_csr_approver::cli::{Cli, go_flags};
use node_csr_approver::values::go_bool;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

/// Go's `flag` package in a child process.
struct GoFlags {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl GoFlags {
    fn start() -> GoFlags {
        let tool = testenv::tools_dir().unwrap().join("go-flags");
        let mut child = Command::new(&tool).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        GoFlags { _child: child, stdin, stdout }
    }

    /// Go's reading of `args`: the values set, or `None` when it refuses them.
    fn read(&mut self, flags: &Flags, args: &[String]) -> Option<BTreeMap<String, String>> {
        let request = json!({"strings": flags.strings, "bools": flags.bools, "args": args});
        writeln!(self.stdin, "{request}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        if answer["ok"] != true {
            return None;
        }
        assert_eq!(answer.get("rest"), None, "every argument is a flag: {args:?}");
        let values = answer["values"].as_object().unwrap();
        Some(values.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect())
    }
}

/// The root flags, by how they take a value.
struct Flags {
    strings: Vec<String>,
    bools: Vec<String>,
}

impl Flags {
    fn of_the_binary() -> Flags {
        let mut command = Cli::command();
        command.build();
        let (mut strings, mut bools) = (Vec::new(), Vec::new());
        for arg in command.get_arguments().filter(|a| a.get_action().takes_values()) {
            let long = arg.get_long().unwrap().to_owned();
            if arg.get_num_args().is_some_and(|n| n.min_values() == 0) { bools.push(long) } else { strings.push(long) }
        }
        Flags { strings, bools }
    }

    fn is_bool(&self, name: &str) -> bool {
        self.bools.iter().any(|b| b == name)
    }
}

/// Our reading of `args`: the values the command line set (a boolean as `go_bool` reads it), or
/// `None` when we refuse them (clap, or a boolean `go_bool` does not read). Only how the command
/// line is cut into flags and values is compared: each value is taken as text, as the Go tool's
/// string flags take it, and judged afterwards (tests/cli.rs holds what each flag accepts).
fn ours(flags: &Flags, args: &[String]) -> Option<BTreeMap<String, String>> {
    let argv = std::iter::once("node-csr-approver".to_owned()).chain(args.iter().cloned()).map(OsString::from);
    let as_text =
        |arg: Arg| if arg.get_action().takes_values() { arg.value_parser(ValueParser::string()) } else { arg };
    let command = Cli::command().mut_args(as_text);
    let normalized = go_flags::normalize(&command, argv);
    let matches = command.clone().try_get_matches_from(&normalized).ok()?;
    // The binary drops the env var of each flag `given_long_flags` names: it must name exactly
    // the flags clap read from the command line.
    let from_command_line: HashSet<String> = command
        .get_arguments()
        .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect();
    assert_eq!(go_flags::given_long_flags(&normalized), from_command_line, "{args:?}");
    let mut values = BTreeMap::new();
    for arg in command.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else { continue };
        if matches.value_source(id) != Some(ValueSource::CommandLine) || !arg.get_action().takes_values() {
            continue;
        }
        let raw: Vec<String> = matches.get_raw(id)?.map(|v| v.to_string_lossy().into_owned()).collect();
        let value = raw.join(",");
        let value = if flags.is_bool(long) { go_bool(&value)?.to_string() } else { value };
        values.insert(long.to_owned(), value);
    }
    Some(values)
}

/// Values a string flag is given: ordinary ones and ones that look like flags or hold `=`.
const STRING_VALUES: &[&str] =
    &["x", "", "-x", "--dry-run", "-dry-run=true", "a=b", "=", "-", "10.0.0.0/8,fd00::/8", "^n-\\w+$", " s ", "é"];

/// Values a boolean flag is given after `=`: Go's spellings and others.
const BOOL_VALUES: &[&str] = &[
    "1", "0", "t", "f", "T", "F", "true", "false", "TRUE", "FALSE", "True", "False", "", "yes", "no", "tRUE", "fALSE",
    " true", "true ", "2", "on", "-1", "truee",
];

/// One flag of `name` in a random Go or clap spelling.
fn spell(rng: &mut StdRng, flags: &Flags, name: &str) -> Vec<String> {
    let dashes = if rng.random_bool(0.7) { "-" } else { "--" };
    if flags.is_bool(name) {
        if rng.random_bool(0.3) {
            return vec![format!("{dashes}{name}")];
        }
        let value = BOOL_VALUES[rng.random_range(0..BOOL_VALUES.len())];
        return vec![format!("{dashes}{name}={value}")];
    }
    let value = STRING_VALUES[rng.random_range(0..STRING_VALUES.len())];
    if rng.random_bool(0.5) {
        vec![format!("{dashes}{name}={value}")]
    } else {
        vec![format!("{dashes}{name}"), value.into()]
    }
}

/// Reads `args` both ways; the reason they disagree, if they do.
fn disagreement(go: &mut GoFlags, flags: &Flags, args: &[String]) -> Option<String> {
    let (theirs, ours) = (go.read(flags, args), ours(flags, args));
    (theirs != ours).then(|| format!("{args:?}: Go read {theirs:?}, we read {ours:?}"))
}

#[test]
fn a_corpus_of_go_command_lines_reads_as_go_reads_it() {
    let flags = Flags::of_the_binary();
    let mut go = GoFlags::start();
    let lines: &[&[&str]] = &[
        // As the Go tool's README and hand-written Deployments pass them.
        &["-provider-regex=^node-\\w+\\.example\\.com$", "-provider-ip-prefixes=10.0.0.0/8", "-bypass-dns-resolution"],
        &["-provider-regex", "^node-\\w+$", "-max-expiration-sec", "86400", "-skip-deny-step=true"],
        &["--provider-regex=x", "--bypass-hostname-check=True", "-ignore-non-system-node=1", "-leader-election=F"],
        &["-metrics-bind-address", ":8080", "-health-probe-bind-address=:8081", "-allowed-dns-names", "2"],
        &["-provider-regex", "-looks-like-a-flag"],
        // Both refuse.
        &["-provider-regex"],
        &["-bypass-dns-resolution=yes"],
        &["-no-such-flag"],
        &["---provider-regex=x"],
    ];
    let mut accepted = 0;
    for line in lines {
        let args: Vec<String> = line.iter().map(|a| (*a).to_owned()).collect();
        if let Some(problem) = disagreement(&mut go, &flags, &args) {
            panic!("{problem}");
        }
        accepted += usize::from(ours(&flags, &args).is_some());
    }
    assert_eq!(accepted, 5, "the first five lines are accepted");
}

#[test]
fn random_command_lines_read_as_go_reads_them() {
    let flags = Flags::of_the_binary();
    assert!(flags.bools.len() >= 5 && flags.strings.len() >= 10, "{:?} {:?}", flags.bools, flags.strings);
    let mut go = GoFlags::start();
    let mut rng = StdRng::seed_from_u64(0x60_f1a9);
    let all: Vec<&String> = flags.strings.iter().chain(&flags.bools).collect();
    let (mut both_accept, mut both_refuse) = (0, 0);
    for _ in 0..10_000 {
        let count = rng.random_range(1..=5);
        let mut chosen: Vec<&String> = Vec::new();
        while chosen.len() < count {
            let name = all[rng.random_range(0..all.len())];
            if !chosen.contains(&name) {
                chosen.push(name);
            }
        }
        let args: Vec<String> = chosen.iter().flat_map(|name| spell(&mut rng, &flags, name)).collect();
        if let Some(problem) = disagreement(&mut go, &flags, &args) {
            panic!("{problem}");
        }
        if ours(&flags, &args).is_some() { both_accept += 1 } else { both_refuse += 1 }
    }
    // Both outcomes are exercised, so agreement is not agreement on refusing everything.
    assert!(both_accept > 2_000 && both_refuse > 1_000, "accepted {both_accept}, refused {both_refuse}");
}
