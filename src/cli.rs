//! The command line: global policy and controller flags, and the subcommands.

use clap::{Parser, Subcommand};

use crate::check::CheckArgs;
use crate::config::{MachineArgs, PolicyArgs, RunArgs};

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

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (the default).
    Run,
    /// Evaluate CSRs from a file or the cluster and print the decision and every check's result.
    Check(CheckArgs),
}
