//! Connecting to the cluster, shared by `run` and `check`: the kube client, the watched Nodes
//! (watched once first asked) and, in machine mode, the watched Machines.

use std::path::{Path, PathBuf};

use futures::FutureExt;
use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};

use tower::util::AndThenLayer;

use super::machines::MachineSource;
use super::request_budget::{BudgetLayer, RequestBudget};
use super::retry_after;
use crate::kubernetes::decoded::Skipped;
use crate::kubernetes::machines::MachineCache;
use crate::kubernetes::node_index::NodeIndex;

/// No usable cluster configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig file given cannot be read or used.
    #[error("cluster configuration: {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        source: KubeconfigError,
    },
    /// Neither the in-cluster configuration nor the default kubeconfig can be used.
    #[error("cluster configuration: {0}")]
    Infer(#[from] InferConfigError),
    /// The configuration does not make a client.
    #[error("cluster configuration: {0}")]
    Client(#[from] kube::Error),
}

/// A client, the watched Nodes, and machine mode's caches when it is on.
#[derive(Clone)]
pub struct Connection {
    /// The client for CSRs, Nodes, Leases and events.
    pub client: Client,
    /// The watched Nodes: watched from the first question in machine mode, else from the
    /// controller's first read of a Node.
    pub nodes: NodeIndex,
    /// Machine mode's caches (Machines, and the count of the watched Nodes), started but not
    /// necessarily synced.
    pub machines: Option<MachineCache>,
}

/// A client from `kubeconfig`, else in-cluster config, else the default kubeconfig, without the
/// client's own retries of 429, 503 and 504: the controller retries every request with its own
/// backoff (watches, writes, the Lease, evidence), and the client's retries would multiply each
/// of its write attempts by up to four while an apiserver answers 503. A 429's `Retry-After`
/// header is carried into its Status ([`retry_after::carry_header`]), whose wait those retries
/// honour. Every request takes a token of `budget` first, when it limits anything.
async fn client(kubeconfig: Option<&Path>, budget: RequestBudget) -> Result<Client, ConnectError> {
    let mut config = config(kubeconfig).await?;
    config.default_retry = false;
    let carried = ClientBuilder::try_from(config)?.with_layer(&AndThenLayer::new(retry_after::carry_header));
    Ok(if budget.limits() { carried.with_layer(&BudgetLayer(budget)).build() } else { carried.build() })
}

async fn config(kubeconfig: Option<&Path>) -> Result<kube::Config, ConnectError> {
    let Some(path) = kubeconfig else { return Ok(kube::Config::infer().await?) };
    let error = |source| ConnectError::Kubeconfig { path: path.to_owned(), source };
    let file = Kubeconfig::read_from(path).map_err(error)?;
    kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.map_err(error)
}

/// The client of the Lease: `client` itself when `budget` limits nothing, else a client of its
/// own from `kubeconfig` with a bucket of its own (as kube-controller-manager's leader election
/// has), so a budget spent on CSRs never holds up a renewal.
pub async fn lease_client(
    kubeconfig: Option<&Path>,
    budget: RequestBudget,
    client: &Client,
) -> Result<Client, ConnectError> {
    if budget.limits() { self::client(kubeconfig, budget).await } else { Ok(client.clone()) }
}

/// Connects with `kubeconfig` within `budget`, makes the watched Nodes (keeping of each what the
/// rules see of it when `nodes_for_rules`) and, in machine mode, starts the caches, reading
/// Machines through `--machine-kubeconfig` when given (a client of its own, within a budget of its
/// own); what they cannot decode is reported to `skipped`.
pub async fn connect(
    kubeconfig: Option<&Path>,
    budget: RequestBudget,
    machines: Option<&MachineSource>,
    nodes_for_rules: bool,
    skipped: &Skipped,
) -> Result<Connection, ConnectError> {
    let client = client(kubeconfig, budget).await?;
    let nodes = NodeIndex::new(client.clone(), skipped.clone(), nodes_for_rules);
    let machines = match machines {
        Some(source) => {
            let machine_client = match &source.kubeconfig {
                Some(path) => self::client(Some(path), budget).await?,
                None => client.clone(),
            };
            // The pending brake counts the Nodes on every replica: watched from the start.
            nodes.watch();
            let watched = nodes.clone();
            let synced = async move { watched.synced().await }.boxed();
            Some(MachineCache::start(nodes.changes(), synced, machine_client, source, skipped.clone()).await)
        }
        None => None,
    };
    Ok(Connection { client, nodes, machines })
}
