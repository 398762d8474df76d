//! The documentation against the code: docs/configuration.md has one row for every argument clap
//! declares, of the top level and of every command, and none for anything else, each with the
//! short option, the environment variable (or `none`) and the default value clap declares
//! (`` `1m` ``, written once in its clap declaration), and no other document lists flags with
//! their env vars. The README shows the Helm install on its first screen, and every relative link
//! of the documents leads to a file and heading that exist.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use node_csr_approver::cli::Cli;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The README, CONTRIBUTING.md and every document under `docs/`.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 5, "{docs:?}");
    docs.extend([repo().join("README.md"), repo().join("CONTRIBUTING.md")]);
    docs
}

/// An argument of a command: the command (`""` for the flags every command reads) and the
/// argument's name (`--name`, or a positional argument's value name).
type Key = (String, String);

/// What a row of docs/configuration.md, or clap, says of one argument.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    /// The short option, when there is one (`-o`).
    short: Option<String>,
    /// The env var; `None` for `none`.
    env: Option<String>,
    /// The default value written in backquotes, first in its cell; `None` for words (`none`,
    /// `every Node`) or no default.
    default: Option<String>,
}

/// The text of the first code span of `cell`, if the cell starts with one.
fn leading_code(cell: &str) -> Option<&str> {
    cell.strip_prefix('`').and_then(|rest| rest.split_once('`')).map(|(code, _)| code)
}

/// Every argument row of docs/configuration.md, by the command whose `###` heading it follows
/// (none before the first: the flags every command reads).
fn documented() -> BTreeMap<Key, Row> {
    let text = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let mut rows = BTreeMap::new();
    let mut command = String::new();
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            command = leading_code(heading).unwrap_or_default().to_owned();
        }
        let cells: Vec<&str> = line.split(" | ").map(|cell| cell.trim_matches(['|', ' '])).collect();
        let Some(names) = leading_code(cells[0]).filter(|_| cells.len() >= 4) else { continue };
        let words: Vec<&str> = names.split([' ', ',']).filter(|word| !word.is_empty()).collect();
        let long = words.iter().find(|word| word.starts_with("--"));
        let short = words.iter().find(|word| word.len() == 2 && word.starts_with('-')).map(|s| (*s).to_owned());
        let name = long.map_or_else(|| words[0].trim_end_matches('…').to_owned(), |long| (*long).to_owned());
        let env = match (cells[1], leading_code(cells[1])) {
            ("none", _) => None,
            (_, Some(env)) if env.chars().all(|c| c.is_ascii_uppercase() || c == '_') => Some(env.to_owned()),
            (cell, _) => panic!("{name}: the env cell is `ENV` or none, not {cell:?}"),
        };
        let row = Row { short, env, default: leading_code(cells[2]).map(str::to_owned) };
        assert!(rows.insert((command.clone(), name.clone()), row).is_none(), "{command} {name} has two rows");
    }
    rows
}

/// Every argument clap declares (but `--help` and `--version`), of the top level and of every
/// subcommand, as a row of docs/configuration.md would say it.
fn declared() -> BTreeMap<Key, Row> {
    let command = Cli::command();
    let commands = std::iter::once(("", &command)).chain(command.get_subcommands().map(|c| (c.get_name(), c)));
    let mut rows = BTreeMap::new();
    for (name, command) in commands {
        for arg in command.get_arguments().filter(|arg| !["help", "version"].contains(&arg.get_id().as_str())) {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let values: Vec<String> = arg.get_default_values().iter().map(|v| v.to_str().unwrap().to_owned()).collect();
            assert!(
                values.is_empty() || !help.contains("[default: "),
                "{name} {}: a default is written once, as clap's default value: {help}",
                arg.get_id()
            );
            let value_name = || arg.get_value_names().unwrap()[0].to_string();
            let key = arg.get_long().map_or_else(value_name, |long| format!("--{long}"));
            let row = Row {
                short: arg.get_short().map(|short| format!("-{short}")),
                env: arg.get_env().map(|env| env.to_str().unwrap().to_owned()),
                default: (!values.is_empty()).then(|| values.join(",")),
            };
            rows.insert((name.to_owned(), key), row);
        }
    }
    rows
}

#[test]
fn the_configuration_lists_every_flag_and_argument_with_its_env_var_and_default() {
    let (documented, declared) = (documented(), declared());
    assert!(declared.len() > 50 && declared.keys().any(|(command, _)| command == "audit"), "{declared:#?}");
    let names = |rows: &BTreeMap<Key, Row>| rows.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&documented), names(&declared), "docs/configuration.md (left) against clap (right)");
    for (key, row) in &declared {
        assert_eq!(&documented[key], row, "{key:?}: docs/configuration.md (left) against clap (right)");
    }
    let text = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    for command in Cli::command().get_subcommands() {
        assert!(text.contains(&format!("\n### `{}`\n", command.get_name())), "{} has no section", command.get_name());
    }
}

#[test]
fn only_the_configuration_lists_flags_with_their_env_vars() {
    for doc in documents().into_iter().filter(|doc| !doc.ends_with("docs/configuration.md")) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for line in text.lines().filter(|line| line.starts_with("| `--")) {
            let env = line.split(" | ").nth(1).and_then(leading_code);
            let is_env = env.is_some_and(|env| env.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
            assert!(!is_env, "{}: a flag's env var and default belong in docs/configuration.md: {line}", doc.display());
        }
    }
}

#[test]
fn the_readme_shows_the_helm_install_on_its_first_screen() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let first_screen: Vec<&str> = readme.lines().take(60).collect();
    assert!(first_screen.iter().any(|line| line.starts_with("helm install ")), "{first_screen:#?}");
    for required in ["providerRegex", "providerIpPrefixes", "image.digest", "cosign verify"] {
        assert!(first_screen.iter().any(|line| line.contains(required)), "{required} in the first 60 lines");
    }
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `doc`'s headings (outside code blocks).
fn anchors(doc: &Path) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in std::fs::read_to_string(doc).unwrap().lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && let Some(heading) = line.strip_prefix('#') {
            found.insert(anchor(heading.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_that_exist() {
    let mut checked = 0;
    for doc in documents().into_iter().chain([repo().join("ARCHITECTURE.md")]) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for link in text.split("](").skip(1).filter_map(|rest| rest.split_once(')').map(|(link, _)| link)) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() { doc.clone() } else { doc.parent().unwrap().join(path) };
            assert!(target.exists(), "{}: link {link:?} leads nowhere", doc.display());
            if !fragment.is_empty() {
                assert!(anchors(&target).contains(fragment), "{}: no heading for {link:?}", doc.display());
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} links checked");
}
