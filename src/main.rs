//! The `node-csr-approver` binary: parse arguments, set up logging, then dispatch.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use node_csr_approver::check::{self, CheckArgs};
use node_csr_approver::cli::{Cli, Command};
use node_csr_approver::cluster::KubeCluster;
use node_csr_approver::config::{DnsConfig, LogFormat, MachineSource, PolicyConfig};
use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::runner;

/// Exit code for bad flags, env values or environment.
const USAGE: u8 = 2;
/// Exit code for an input that cannot be read, or a controller that stopped abnormally.
const FAILURE: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (mut policy, dns, warnings) = match cli.policy.validate() {
        Ok(valid) => valid,
        Err(error) => return usage_error(error),
    };
    let machine = match cli.machine.validate() {
        Ok(machine) => machine,
        Err(error) => return usage_error(error),
    };
    policy.machine = machine.as_ref().map(|m| m.policy.clone());
    let machine_source = machine.map(|m| m.source);
    let run = match cli.run.validate() {
        Ok(run) => run,
        Err(error) => return usage_error(error),
    };
    if matches!(cli.command, Some(Command::Check(_))) {
        init_logging(LogFormat::Text, "warn");
        for warning in warnings {
            eprintln!("warning: {}", warning.0);
        }
    } else {
        init_logging(run.log_format, &run.log_filter);
        for warning in warnings {
            tracing::warn!("{}", warning.0);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return ExitCode::from(FAILURE);
        }
    };
    match cli.command {
        Some(Command::Check(args)) => {
            runtime.block_on(check_command(args, &policy, &dns, run.kubeconfig.as_deref(), machine_source.as_ref()))
        }
        None | Some(Command::Run) => match runtime.block_on(runner::run(policy, dns, run, machine_source)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "stopped");
                ExitCode::from(FAILURE)
            }
        },
    }
}

fn usage_error(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(USAGE)
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

async fn check_command(
    args: CheckArgs,
    policy: &PolicyConfig,
    dns: &DnsConfig,
    kubeconfig: Option<&std::path::Path>,
    machine: Option<&MachineSource>,
) -> ExitCode {
    let resolver = match HickoryResolver::new(dns.servers.as_deref(), dns.timeout) {
        Ok(resolver) => resolver,
        Err(error) => return usage_error(format!("DNS resolver (--dns-server, env DNS_SERVERS): {error}")),
    };
    let now = args.now.unwrap_or_else(jiff::Timestamp::now);
    let mut out = std::io::stdout().lock();
    let written = if args.names.is_empty() {
        let inputs = match args.read_inputs() {
            Ok(inputs) => inputs,
            Err(error) => return failure(error),
        };
        check::run(&inputs.csrs, policy, &resolver, &inputs.cluster, now, args.output, &mut out).await
    } else {
        let client = match runner::client(kubeconfig).await {
            Ok(client) => client,
            Err(error) => return failure(error),
        };
        let csrs = match check::fetch(client.clone(), &args.names).await {
            Ok(csrs) => csrs,
            Err(error) => return failure(format!("fetching CSRs: {error}")),
        };
        let machines = match machine {
            Some(source) => match runner::machine_cache(&client, source).await {
                Ok(cache) => {
                    cache.synced().await;
                    Some(cache)
                }
                Err(error) => return failure(error),
            },
            None => None,
        };
        let cluster = KubeCluster::new(client, machines);
        check::run(&csrs, policy, &resolver, &cluster, now, args.output, &mut out).await
    };
    match written.context("writing the report") {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => failure(format!("{error:#}")),
    }
}

fn failure(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(FAILURE)
}
