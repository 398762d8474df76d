//! Evidence from outside the process (DNS answers, the Node), gathered concurrently once per
//! evaluation, before the pure decision.

use std::collections::BTreeMap;

use crate::cluster::{ClusterView, NodeInfo};
use crate::dns::{Resolution, Resolver};

/// What a cluster lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    /// The object exists.
    Found(T),
    /// The object does not exist (yet).
    Missing,
    /// The cluster could not be asked; the text says why.
    Failed(String),
}

/// Everything the evidence-based checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The resolution of each DNS SAN, keyed by the lowercased name.
    pub dns: BTreeMap<String, Resolution>,
    /// The Node, when node addresses are verified.
    pub node: Option<Lookup<NodeInfo>>,
}

/// What must be gathered for one CSR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Lowercased DNS names to resolve.
    pub dns_names: Vec<String>,
    /// The Node to fetch.
    pub node: Option<String>,
}

/// Gathers `needs` concurrently: every DNS name and the Node at once.
pub async fn gather<R: Resolver, C: ClusterView>(needs: &Needs, resolver: &R, cluster: &C) -> Evidence {
    let lookups = futures::future::join_all(
        needs.dns_names.iter().map(|name| async move { (name.clone(), resolver.resolve(name).await) }),
    );
    let node = async {
        match &needs.node {
            None => None,
            Some(name) => Some(match cluster.node(name).await {
                Ok(Some(node)) => Lookup::Found(node),
                Ok(None) => Lookup::Missing,
                Err(error) => Lookup::Failed(error.to_string()),
            }),
        }
    };
    let (dns, node) = futures::join!(lookups, node);
    Evidence { dns: dns.into_iter().collect(), node }
}
