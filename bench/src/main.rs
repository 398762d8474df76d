//! `cargo run --release -p bench -- [--n 2000] [--concurrency 32] [--out bench.json]`: the burst
//! benchmark of node-csr-approver (see BENCHMARKS.md). Prints a table and writes the figures as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Burst benchmark of node-csr-approver against a local etcd + kube-apiserver.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// CSRs (and nodes) per phase.
    #[arg(long, default_value_t = 2000)]
    n: usize,
    /// The flooding node's CSRs in the flood phase [default: --n].
    #[arg(long)]
    flood_csrs: Option<usize>,
    /// Concurrency of the controller and of the bare client.
    #[arg(long, default_value_t = 32)]
    concurrency: u16,
    /// CSRs created per second in the live phase [default: a quarter of the measured approval rate].
    #[arg(long)]
    live_rate: Option<f64>,
    /// Concurrent creates while setting up (untimed).
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// Where the JSON report goes.
    #[arg(long, default_value = "bench.json")]
    out: PathBuf,
    /// The Go kubelet-csr-approver to run beside ours [default: $NODE_CSR_APPROVER_PEER_BIN, else
    /// what scripts/build-peer.sh built; skipped with a note when it is not built or the bench is
    /// not root].
    #[arg(long, conflicts_with = "no_peer")]
    peer: Option<PathBuf>,
    /// Run ours only.
    #[arg(long)]
    no_peer: bool,
    /// Skip the live phases (limit and catch-up only).
    #[arg(long)]
    no_live: bool,
    /// Also run the renewal storm: this many nodes' CSRs (and a tenth of them twice more) pending
    /// when ours starts, up to 130,000 [default: no storm].
    #[arg(long)]
    storm: Option<usize>,
    /// Create this many Node objects (realistic ones, three of them control-plane nodes on the
    /// `default/kubernetes` EndpointSlice) before the storm's CSRs, at least the storm's nodes, and
    /// run ours with `--verify-node-addresses` and a rule that reads `node`.
    #[arg(long, requires = "storm")]
    storm_nodes: Option<usize>,
    /// With --storm-nodes, run ours without the rule that reads `node` (`--verify-node-addresses`
    /// only): the Nodes are watched without the rules' projection.
    #[arg(long, requires = "storm_nodes")]
    storm_no_node_rule: bool,
    /// A flag given to ours in every phase, not to the peer (e.g. `--ours-arg=--kube-api-qps=1000`);
    /// repeat it for more.
    #[arg(long = "ours-arg", allow_hyphen_values = true)]
    ours_args: Vec<String>,
    /// No apiserver restart (no forced relist) during the storm.
    #[arg(long, requires = "storm")]
    storm_no_relist: bool,
    /// Run the storm alone, none of the other phases.
    #[arg(long, requires = "storm")]
    only_storm: bool,
    /// Measure only the live latency with the periodic audit scanning this many hung kubelets and
    /// without (bench/src/audit_load.rs); --live-rate and --out apply.
    #[arg(long)]
    audit_load: Option<usize>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(nodes) = args.audit_load {
        return bench::audit_load::main(nodes, args.live_rate, &args.out).await;
    }
    let explicit = args.peer.is_some();
    let peer = match (args.no_peer, args.peer.or_else(bench::peer::default_binary)) {
        (false, Some(binary)) => match bench::peer::unavailable(&binary) {
            None => Some(binary),
            Some(why) if !explicit => {
                eprintln!("bench: not running the peer kubelet-csr-approver: {why}");
                None
            }
            Some(why) => {
                eprintln!("bench: --peer {}: {why}", binary.display());
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let options = bench::Options {
        n: args.n,
        flood_csrs: args.flood_csrs.unwrap_or(args.n),
        concurrency: args.concurrency,
        live_rate: args.live_rate,
        create_concurrency: args.create_concurrency,
        release: true,
        verbose: true,
        peer,
        live: !args.no_live,
        storm: args.storm,
        storm_nodes: args.storm_nodes,
        storm_node_rule: !args.storm_no_node_rule,
        ours_args: args.ours_args,
        storm_relist: !args.storm_no_relist,
        only_storm: args.only_storm,
    };
    let report = match bench::run(&options).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("bench: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report.table());
    let written = serde_json::to_string_pretty(&report)
        .map_err(anyhow::Error::from)
        .and_then(|json| std::fs::write(&args.out, json + "\n").map_err(anyhow::Error::from));
    match written {
        Ok(()) => {
            println!("figures written to {}", args.out.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("bench: writing {}: {error:#}", args.out.display());
            ExitCode::FAILURE
        }
    }
}
