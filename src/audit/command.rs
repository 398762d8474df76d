//! The `audit` subcommand: reads the Nodes (all, or those named), gives each the address serving
//! renewal would dial (`kubelet_endpoint::dial_target`: InternalIP inside
//! `--provider-ip-prefixes`, outside the reserved and the apiserver's addresses, at
//! `--kubelet-port`), scans them ([`Judge::scan`]) against the live cluster and prints the
//! reports. It reads only: Nodes, Machines (machine mode), the apiserver's Service and
//! EndpointSlices, DNS, and the kubelets' TLS handshakes; no CSR (no evaluation of a served
//! certificate's names reads one: `AuditView`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;

use super::NodeAudit;
use super::args::AuditArgs;
use super::output;
use super::scan::{Judge, ScanSettings};
use crate::dns::{DnsError, HickoryResolver};
use crate::kubelet_tls::KubeletServingCa;
use crate::kubernetes::cluster::{COMMAND_APISERVER_WAIT, KubeCluster};
use crate::kubernetes::connect::{ConnectError, connect};
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kubelet_endpoint::{dial_targets, read_node_target};
use crate::kubernetes::machines::MachineSource;
use crate::kubernetes::node_object::NodeObject;
use crate::kubernetes::request_budget::RequestBudget;
use crate::policy::{KubeletDialRules, PolicyConfig};

/// The kubelet flags the audit reads whether machine mode is on or not.
#[derive(Debug, Clone)]
pub struct KubeletFlags {
    /// `--kubelet-serving-ca-file`.
    pub ca: Option<KubeletServingCa>,
    /// `--kubelet-port`.
    pub port: u16,
}

/// What `audit` reads of the controller's settings: the policy, the resolver, the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    /// The rules a served certificate's names are judged by.
    pub policy: &'a PolicyConfig,
    /// `--dns-server`, when given.
    pub dns_servers: Option<&'a [SocketAddr]>,
    /// `--dns-timeout`.
    pub dns_timeout: Duration,
    /// `--kubeconfig`, when given.
    pub kubeconfig: Option<&'a Path>,
    /// `--kube-api-qps` and `--kube-api-burst`.
    pub budget: RequestBudget,
    /// Where Machines are read from, in machine mode.
    pub machines: Option<&'a MachineSource>,
}

/// Why `audit` could not report.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The resolver could not be built from `--dns-server`.
    #[error("DNS resolver (--dns-server, env DNS_SERVERS): {0}")]
    Dns(#[from] DnsError),
    /// No usable cluster configuration.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The Nodes could not be read.
    #[error("reading the cluster: {0}")]
    Read(#[from] kube::Error),
    /// A Node named on the command line does not exist.
    #[error("Node {0:?} does not exist")]
    NoSuchNode(String),
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
}

/// Runs `audit`: scans the Nodes and writes the reports to `out`; returns them, for the exit code.
pub async fn command(
    args: &AuditArgs,
    settings: Reach<'_>,
    kubelet: KubeletFlags,
    out: &mut impl Write,
) -> Result<Vec<NodeAudit>, AuditError> {
    let resolver = HickoryResolver::new(settings.dns_servers, settings.dns_timeout)?;
    let skipped = Skipped::logged();
    let connection = connect(settings.kubeconfig, settings.budget, settings.machines, false, &skipped).await?;
    let nodes_api: kube::Api<Decoded<NodeObject>> = kube::Api::all(connection.client.clone());
    let machines = match (connection.machines, settings.machines) {
        (Some(cache), Some(_)) => {
            cache.synced().await;
            Some(cache)
        }
        _ => None,
    };
    let cluster = KubeCluster::new(
        connection.client,
        connection.nodes,
        machines,
        CsrLedger::without_csrs(),
        skipped.clone(),
        false,
    );
    cluster.apiserver_first_answer(COMMAND_APISERVER_WAIT).await;
    let dial_rules = KubeletDialRules { prefixes: settings.policy.ip_prefixes.clone(), port: kubelet.port };
    let mut targets = Vec::new();
    if args.nodes.is_empty() {
        targets = dial_targets(&nodes_api, &cluster, &dial_rules, &skipped).await?;
    }
    let mut named = std::collections::BTreeSet::new();
    for name in args.nodes.iter().filter(|name| named.insert(name.as_str())) {
        let node = nodes_api.get_opt(name).await?.ok_or_else(|| AuditError::NoSuchNode(name.clone()))?;
        targets.push(read_node_target(&cluster, &node, &dial_rules, &skipped).await);
    }
    let scan = ScanSettings {
        ca: kubelet.ca,
        dial_limit: args.dial_timeout.into(),
        concurrency: usize::from(args.dial_concurrency),
        expiring_within: args.expiring_within(),
    };
    let judge = Judge {
        settings: &scan,
        policy: settings.policy,
        resolver: &resolver,
        cluster: &cluster,
        now: Timestamp::now(),
    };
    let reports = judge.scan(targets).await;
    output::write(out, &reports, args.output)?;
    Ok(reports)
}
