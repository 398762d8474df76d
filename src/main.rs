//! The `node-csr-approver` binary: parse arguments, validate them, set up logging, then dispatch.

use std::process::ExitCode;

use node_csr_approver::audit::command::{self as audit, AuditError, KubeletFlags, Reach};
use node_csr_approver::check::{self, CheckError};
use node_csr_approver::cli::{Cli, Command};
use node_csr_approver::config::{self, LogFormat};
use node_csr_approver::display::Escaped;
use node_csr_approver::{admin, logging, runner};

/// The allocator: jemalloc, built (`.cargo/config.toml`) to return freed pages at once, so memory
/// falls back after a burst of large CSRs; it costs less CPU per decision than musl's malloc
/// (BENCHMARKS.md, "Allocator (musl)").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit code for bad flags, env values or environment.
const USAGE: u8 = 2;
/// Exit code for an input that cannot be read, or a controller that stopped abnormally.
const FAILURE: u8 = 1;
/// Exit code of `audit` when a Node has a finding `--fail-on` names.
const AUDIT_FINDINGS: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse_go_style(std::env::args_os());
    let kubelet = KubeletFlags { ca: cli.machine.kubelet_serving_ca_file.clone(), port: cli.machine.kubelet_port };
    let settings = match config::validate(cli.policy, cli.run, cli.machine) {
        Ok(settings) => settings,
        Err(error) => {
            // The operator's own flags and env vars, printed as given (a regex error spans lines).
            eprintln!("error: {error}");
            return ExitCode::from(USAGE);
        }
    };
    if matches!(cli.command, Some(Command::Check(_) | Command::Audit(_))) {
        logging::init(LogFormat::Text, "warn");
        for warning in &settings.warnings {
            eprintln!("warning: {}", Escaped(&warning.0));
        }
    } else {
        logging::init(settings.run.log_format, settings.run.log_filter());
        for warning in &settings.warnings {
            tracing::warn!("{}", warning.0);
        }
        admin::raise_open_file_limit();
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
        Some(Command::Audit(args)) => {
            let out = &mut std::io::stdout().lock();
            let reach = Reach {
                policy: &settings.policy,
                dns_servers: settings.dns.servers.as_deref(),
                dns_timeout: settings.dns.timeout,
                kubeconfig: settings.run.kubeconfig.as_deref(),
                budget: settings.run.request_budget(),
                machines: settings.machines.as_ref(),
            };
            match runtime.block_on(audit::command(&args, reach, kubelet, out)) {
                Ok(reports) => {
                    let fail_on = args.fail_on();
                    let failing: Vec<&str> =
                        reports.iter().filter(|r| fail_on.fails(&r.findings)).map(|r| r.node.as_str()).collect();
                    if failing.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        exit(AUDIT_FINDINGS, format!("--fail-on: {} Node(s): {}", failing.len(), failing.join(", ")))
                    }
                }
                Err(error @ AuditError::Dns(_)) => exit(USAGE, error),
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

/// Prints `error` (escaped: it may quote a file's contents or a name) and exits with `code`.
fn exit(code: u8, error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {}", Escaped(&error.to_string()));
    ExitCode::from(code)
}
