//! The command line: global policy and controller flags, and the subcommands.

pub mod go_flags;

use std::ffi::OsString;

use clap::{Arg, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::audit::args::AuditArgs;
use crate::config::{CheckArgs, MachineArgs, PolicyArgs, RunArgs};
use crate::values::without_env;

/// What `--version` prints after the name: the version, the commit it was built from (`unknown`
/// without git) and the target, e.g. `0.1.0 (commit 0123456789ab, x86_64-unknown-linux-musl)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NODE_CSR_APPROVER_BUILD_COMMIT"),
    ", ",
    env!("NODE_CSR_APPROVER_BUILD_TARGET"),
    ")"
);

/// Decides on the certificate signing requests kubelets create.
#[derive(Debug, Parser)]
#[command(name = "node-csr-approver", version = VERSION, about, propagate_version = true)]
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
    ///
    /// A flag given on the command line wins over its env var, which is then not read at all:
    /// clap reads a global flag's env var on every command level where the flag was not given
    /// (`check --provider-regex X` would still read `PROVIDER_REGEX` for the top level) and
    /// would stop on an invalid value the flag overrides.
    pub fn parse_go_style(args: impl IntoIterator<Item = OsString>) -> Cli {
        let command = Cli::command();
        let args = go_flags::normalize(&command, args);
        let given = go_flags::given_long_flags(&args);
        let unset_env = |arg: Arg| match arg.get_long() {
            Some(long) if given.contains(long) => without_env(arg),
            _ => arg,
        };
        let matches = command.mut_args(unset_env).get_matches_from(args);
        Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (the default).
    Run,
    /// Evaluate CSRs from a file or the cluster and print the decision and every check's result.
    Check(CheckArgs),
    /// Dial every Node's kubelet (or those named) and report the serving certificate it presents: issuer, expiry, key, and whether today's policy would approve its names. Read-only.
    Audit(AuditArgs),
}
