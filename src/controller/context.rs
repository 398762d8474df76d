//! What every reconcile of the controller shares ([`Context`]): the clients and ports it reads
//! and writes through, the policy, leadership, Events and metrics.

use kube::Api;

use crate::events::Events;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::leader::Leadership;
use crate::kubernetes::node_index::NodeIndex;
use crate::kubernetes::object_fields::Csr;
use crate::metrics::Metrics;
use crate::policy::PolicyConfig;

/// Everything a reconcile needs, shared by all of them.
pub(crate) struct Context<R, C> {
    /// The CSRs: watched, read by name and written.
    pub api: Api<Decoded<Csr>>,
    /// What decides each CSR.
    pub policy: PolicyConfig,
    /// The policy's DNS port.
    pub resolver: R,
    /// The policy's cluster port.
    pub cluster: C,
    /// The watched Nodes, which the periodic audit reads (the cluster port reads them too).
    pub nodes: NodeIndex,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// Where decisions are published as Events.
    pub events: Events,
    /// Where decisions, writes and passes are counted.
    pub metrics: Metrics,
    /// Where what the controller's reads cannot decode is reported.
    pub skipped: Skipped,
    /// Evaluate and record, but write nothing.
    pub dry_run: bool,
}
