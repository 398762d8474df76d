//! How `check` and `audit` print their reports (`--output`).

use clap::ValueEnum;

/// How a command prints its reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The decision and a table of every check.
    Text,
    /// One JSON object per CSR per line.
    Json,
}
