//! The `node-csr-approver` binary: parse arguments, validate them, set up logging, then dispatch.

use std::process::ExitCode;

use node_csr_approver::check::{self, CheckError};
use node_csr_approver::cli::{Cli, Command};
use node_csr_approver::config::{self, LogFormat};
use node_csr_approver::runner;

/// Exit code for bad flags, env values or environment.
const USAGE: u8 = 2;
/// Exit code for an input that cannot be read, or a controller that stopped abnormally.
const FAILURE: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse_go_style(std::env::args_os());
    let settings = match config::validate(&cli.policy, &cli.run, &cli.machine) {
        Ok(settings) => settings,
        Err(error) => return exit(USAGE, error),
    };
    if matches!(cli.command, Some(Command::Check(_))) {
        init_logging(LogFormat::Text, "warn");
        for warning in &settings.warnings {
            eprintln!("warning: {}", warning.0);
        }
    } else {
        init_logging(settings.run.log_format, &settings.run.log_filter);
        for warning in &settings.warnings {
            tracing::warn!("{}", warning.0);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return exit(FAILURE, format!("starting the async runtime: {error}")),
    };
    match cli.command {
        Some(Command::Check(args)) => {
            match runtime.block_on(check::command(&args, &settings, &mut std::io::stdout().lock())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error @ CheckError::Dns(_)) => exit(USAGE, error),
                Err(error) => exit(FAILURE, error),
            }
        }
        None | Some(Command::Run) => match runtime.block_on(runner::run(settings)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "stopped");
                ExitCode::from(FAILURE)
            }
        },
    }
}

/// Prints `error` and exits with `code`.
fn exit(code: u8, error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(code)
}

/// JSON lines or text on stderr, filtered by an EnvFilter directive validated at startup.
fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}
