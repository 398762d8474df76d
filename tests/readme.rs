//! The documentation against the code: each `| --flag | ENV | default | meaning |` row of the
//! README, `docs/` and CONTRIBUTING.md names a flag of `node-csr-approver` or `check` and the
//! environment variable clap reads for it, each flag with an environment variable has a row, and a
//! flag's default value, written once in its clap declaration, is the row's (`` `1m` ``). The README
//! shows the Helm install on its first screen, and every relative link of the documents leads to a
//! file and heading that exist.

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

/// Flag (`--name`) to (env var, default cell) of every table row of the documents that names both.
fn documented() -> BTreeMap<String, (String, String)> {
    let mut rows = BTreeMap::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for line in text.lines().filter(|line| line.starts_with("| `--")) {
            let cells: Vec<&str> = line.split(" | ").map(|cell| cell.trim_matches(['|', ' '])).collect();
            let code = |cell: &str| cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')).map(str::to_owned);
            let (Some(flag), Some(env)) = (code(cells[0]), cells.get(1).and_then(|cell| code(cell))) else { continue };
            if env.chars().all(|c| c.is_ascii_uppercase() || c == '_') && cells.len() >= 4 {
                let row = (env, cells[2].to_owned());
                assert!(rows.insert(flag.clone(), row).is_none(), "{flag} has two rows ({})", doc.display());
            }
        }
    }
    rows
}

/// How a flag's default is declared: clap's own default value, or words in its help
/// (`[default: all addresses]`) for a default that is not a value.
#[derive(Debug)]
enum DeclaredDefault {
    Value(String),
    Words,
}

/// Flag to (env var, its default) of every argument with an env var.
fn declared() -> BTreeMap<String, (String, DeclaredDefault)> {
    let command = Cli::command();
    let commands = std::iter::once(&command).chain(command.get_subcommands());
    let mut flags = BTreeMap::new();
    for arg in commands.flat_map(|c| c.get_arguments()) {
        let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else { continue };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let values: Vec<String> = arg.get_default_values().iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        let default = if values.is_empty() { DeclaredDefault::Words } else { DeclaredDefault::Value(values.join(",")) };
        assert!(
            matches!(default, DeclaredDefault::Words) || !help.contains("[default: "),
            "--{long}: a default is written once, as clap's default value: {help}"
        );
        flags.insert(format!("--{long}"), (env.to_str().unwrap().to_owned(), default));
    }
    flags
}

#[test]
fn the_flag_tables_list_every_flag_with_its_env_var_and_default() {
    let (documented, declared) = (documented(), declared());
    assert!(declared.len() > 30, "{declared:?}");
    let docs: BTreeMap<&String, &String> = documented.iter().map(|(flag, (env, _))| (flag, env)).collect();
    let clap: BTreeMap<&String, &String> = declared.iter().map(|(flag, (env, _))| (flag, env)).collect();
    assert_eq!(docs, clap, "documented rows (left) against the command line (right)");
    // A default value is the table's, in backquotes (a note may follow: `31708800` (367 days)).
    let mut values = 0;
    for (flag, (_, default)) in &declared {
        let DeclaredDefault::Value(value) = default else { continue };
        let cell = &documented[flag].1;
        assert!(cell.starts_with(&format!("`{value}`")), "{flag}: documented default {cell:?}, clap's {value:?}");
        values += 1;
    }
    assert!(values > 20, "most flags have a default value: {values}");
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
