//! The README's flag tables against the command line: each `| --flag | ENV | default | meaning |`
//! row names a flag of `node-csr-approver` or `check` and the environment variable clap reads for
//! it, each flag with an environment variable has a row, and a default the flag's help states as a
//! value (`[default: 1m]`) is the row's (`` `1m` ``).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use clap::CommandFactory;
use node_csr_approver::cli::Cli;

/// Flag (`--name`) to (env var, default cell) of every README table row that names both.
fn documented() -> BTreeMap<String, (String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut rows = BTreeMap::new();
    for line in readme.lines().filter(|line| line.starts_with("| `--")) {
        let cells: Vec<&str> = line.split(" | ").map(|cell| cell.trim_matches(['|', ' '])).collect();
        let code = |cell: &str| cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')).map(str::to_owned);
        let (Some(flag), Some(env)) = (code(cells[0]), cells.get(1).and_then(|cell| code(cell))) else { continue };
        if env.chars().all(|c| c.is_ascii_uppercase() || c == '_') && cells.len() >= 4 {
            assert!(rows.insert(flag.clone(), (env, cells[2].to_owned())).is_none(), "{flag} has two rows");
        }
    }
    rows
}

/// Flag to (env var, the `[default: …]` of its help) of every argument with an env var.
fn declared() -> BTreeMap<String, (String, Option<String>)> {
    let command = Cli::command();
    let commands = std::iter::once(&command).chain(command.get_subcommands());
    let mut flags = BTreeMap::new();
    for arg in commands.flat_map(|c| c.get_arguments()) {
        let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else { continue };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let default = help.rsplit_once("[default: ").map(|(_, rest)| rest.trim_end_matches(']').to_owned());
        flags.insert(format!("--{long}"), (env.to_str().unwrap().to_owned(), default));
    }
    flags
}

#[test]
fn the_flag_tables_list_every_flag_with_its_env_var_and_default() {
    let (documented, declared) = (documented(), declared());
    assert!(declared.len() > 30, "{declared:?}");
    let readme: BTreeMap<&String, &String> = documented.iter().map(|(flag, (env, _))| (flag, env)).collect();
    let clap: BTreeMap<&String, &String> = declared.iter().map(|(flag, (env, _))| (flag, env)).collect();
    assert_eq!(readme, clap, "README rows (left) against the command line (right)");
    // A default stated as a value (`1m`, `31708800 (367 days)`) rather than in words (`all
    // addresses`, `OpenShift's`) is the README's, in backquotes.
    for (flag, (_, default)) in &declared {
        let Some(default) = default else { continue };
        let (value, note) = default.split_once(' ').unwrap_or((default, ""));
        if (note.is_empty() || note.starts_with('(')) && !value.contains('\'') {
            let cell = &documented[flag].1;
            assert!(
                cell.starts_with(&format!("`{value}`")),
                "{flag}: README default {cell:?}, help [default: {default}]"
            );
        }
    }
}
