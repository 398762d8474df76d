//! The command line: global policy and controller flags, and the subcommands.

mod check_args;
pub mod go_flags;

use std::ffi::OsString;

use clap::{CommandFactory, Parser, Subcommand};

use crate::config::{MachineArgs, PolicyArgs, RunArgs};

pub use check_args::{CheckArgs, Format};

/// Decides on the certificate signing requests kubelets create.
#[derive(Debug, Parser)]
#[command(name = "node-csr-approver", version, about, propagate_version = true)]
pub struct Cli {
    /// Policy and DNS settings (also read from environment variables).
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Controller settings (also read from environment variables).
    #[command(flatten)]
    pub run: RunArgs,
    /// Machine-mode settings (also read from environment variables).
    #[command(flatten)]
    pub machine: MachineArgs,
    /// What to do; the controller (`run`) when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Parses `args` (program name first), Go's spellings of the long flags included (see
    /// [`go_flags`]); on an error, clap prints it and exits with code 2.
    pub fn parse_go_style(args: impl IntoIterator<Item = OsString>) -> Cli {
        Cli::parse_from(go_flags::normalize(&Cli::command(), args))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (the default).
    Run,
    /// Evaluate CSRs from a file or the cluster and print the decision and every check's result.
    Check(CheckArgs),
}
