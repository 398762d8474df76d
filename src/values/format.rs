//! How `check` and `audit` print their reports (`--output`).

use clap::ValueEnum;

/// How a command prints its reports; `text` unless `--output` says otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The decision and a table of every check.
    #[default]
    Text,
    /// One JSON object per CSR per line.
    Json,
}
