//! Node and Machine address matching, and the checks machine mode shares between signers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::identity::{self, CLIENT_SIGNER, NODES_GROUP, SERVING_SIGNER};
use super::one_client_certificate::client_node;
use super::ports::{BrakeInputs, ClusterError, MachineInfo};
use super::report::Failure;
use super::rules::MachinePolicy;
use super::{Reason, Submission};

const DNS_ADDRESS_TYPES: [&str; 3] = ["InternalDNS", "ExternalDNS", "Hostname"];
const IP_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// DNS names compare case-insensitively, ignoring a trailing dot.
pub fn same_dns_name(a: &str, b: &str) -> bool {
    a.trim_end_matches('.').eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// IP addresses compare as parsed, canonical addresses: `fd00::1` equals `fd00:0::0001`, and
/// `::ffff:10.0.0.1` equals `10.0.0.1`.
pub fn same_ip(address: &str, ip: &IpAddr) -> bool {
    address.trim().parse::<IpAddr>().is_ok_and(|parsed| parsed.to_canonical() == ip.to_canonical())
}

/// The Machines gathered as evidence, or the failure to read them.
pub(crate) fn machines(
    evidence: &Option<Result<Vec<Arc<MachineInfo>>, ClusterError>>,
) -> Result<&[Arc<MachineInfo>], Failure> {
    match evidence {
        Some(Ok(machines)) => Ok(machines),
        Some(Err(error)) => Err(Failure::retry(Reason::ClusterUnavailable, format!("cannot read Machines: {error}"))),
        None => Err(Failure::retry(Reason::ClusterUnavailable, "Machines were not looked up")),
    }
}

/// The Machine whose `status.nodeRef.name` is `node`.
pub(crate) fn machine_of_node<'a>(machines: &'a [Arc<MachineInfo>], node: &str) -> Result<&'a MachineInfo, Failure> {
    machines.iter().map(Arc::as_ref).find(|m| m.node_ref.as_deref() == Some(node)).ok_or_else(|| {
        Failure::retry(Reason::MachineNotFound, format!("no Machine has status.nodeRef.name {node:?} yet"))
    })
}

/// The Machine carrying an InternalDNS address equal to `name`.
pub(crate) fn machine_named<'a>(machines: &'a [Arc<MachineInfo>], name: &str) -> Result<&'a MachineInfo, Failure> {
    machines
        .iter()
        .map(Arc::as_ref)
        .find(|m| m.addresses.iter().any(|a| a.kind == "InternalDNS" && same_dns_name(&a.address, name)))
        .ok_or_else(|| {
            Failure::retry(Reason::MachineNotFound, format!("no Machine has the InternalDNS address {name:?} yet"))
        })
}

/// Every DNS SAN is a DNS address of the Machine, every IP SAN one of its IP addresses.
pub(crate) fn serving_sans_belong(
    machine: &MachineInfo,
    dns_names: &[String],
    ips: &[IpAddr],
) -> Result<String, Failure> {
    let has = |types: &[&str], matches: &dyn Fn(&str) -> bool| {
        machine.addresses.iter().any(|a| types.contains(&a.kind.as_str()) && matches(&a.address))
    };
    if let Some(name) = dns_names.iter().find(|n| !has(&DNS_ADDRESS_TYPES, &|a| same_dns_name(a, n))) {
        return Err(Failure::deny(
            Reason::MachineAddressMismatch,
            format!(
                "DNS SAN {name:?} is not an InternalDNS, ExternalDNS or Hostname address of Machine {}",
                machine.id
            ),
        ));
    }
    if let Some(ip) = ips.iter().find(|ip| !has(&IP_ADDRESS_TYPES, &|a| same_ip(a, ip))) {
        return Err(Failure::deny(
            Reason::MachineAddressMismatch,
            format!("IP SAN {ip} is not an InternalIP or ExternalIP address of Machine {}", machine.id),
        ));
    }
    Ok(format!("every SAN is an address of Machine {}", machine.id))
}

/// Pending CSRs older than this do not count towards the brake.
const PENDING_WINDOW: SignedDuration = SignedDuration::from_secs(3600);
/// Pending CSRs stamped up to this far after the approver's clock still count (clocks differ).
const FUTURE_SKEW: SignedDuration = SignedDuration::from_secs(10);
/// The most pending CSRs one node name adds to the brake's count, so one node cannot pull it.
pub const PENDING_PER_NODE: usize = 3;

/// Whether a CSR counts towards the pending brake at `now`: undecided, of a signer this approver
/// decides (kubelet serving; kubelet client when node-client approval is on), from a node (the
/// bootstrapper, or with `system:nodes` in its groups), created less than an hour before `now` and
/// at most 10 s after it.
pub fn counts_as_pending(sub: &Submission, rules: &MachinePolicy, now: Timestamp) -> bool {
    let facts = PendingFacts {
        signer_name: &sub.signer_name,
        username: &sub.username,
        groups: &sub.groups,
        decided: sub.decided.is_some(),
        created: sub.created,
    };
    facts.counts_as_pending(rules, now)
}

/// What [`counts_as_pending`] reads of a CSR, borrowed, so a count over many CSRs copies none of
/// them.
#[derive(Debug, Clone, Copy)]
pub struct PendingFacts<'a, G> {
    /// spec.signerName.
    pub signer_name: &'a str,
    /// spec.username.
    pub username: &'a str,
    /// spec.groups.
    pub groups: &'a [G],
    /// An Approved or Denied condition or an issued certificate is present.
    pub decided: bool,
    /// metadata.creationTimestamp, if known.
    pub created: Option<Timestamp>,
}

impl<G: AsRef<str>> PendingFacts<'_, G> {
    /// Whether the CSR counts towards the pending brake at `now` ([`counts_as_pending`]).
    pub fn counts_as_pending(&self, rules: &MachinePolicy, now: Timestamp) -> bool {
        let signer = self.signer_name;
        let decidable = signer == SERVING_SIGNER || (signer == CLIENT_SIGNER && rules.client_approval);
        let from_node =
            rules.bootstrapper.matches(self.username) || self.groups.iter().any(|g| g.as_ref() == NODES_GROUP);
        decidable
            && from_node
            && !self.decided
            && self.created.is_some_and(|created| {
                let age = now.duration_since(created);
                age < PENDING_WINDOW && age >= -FUTURE_SKEW
            })
    }
}

/// What a pending CSR counts under, as read from the CSR alone (its request never changes, so this
/// is read once per CSR); [`counted_under`] adds what the Machines say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingKey {
    /// A node's CSR (or one of `system:nodes`): its username, which the apiserver vouches for.
    Requester(String),
    /// A bootstrap client CSR for node `name` (its one common name `system:node:<name>`, a valid
    /// node name): counted only while a Machine awaits that node.
    Bootstrap(String),
    /// Never approved, so never counted: a bootstrap CSR that is not a client CSR, whose request
    /// cannot be read, or whose common name is not `system:node:` and a valid node name.
    Never,
}

/// The key of a pending CSR. The bootstrapper writes the common name of its request itself, so a
/// bootstrap CSR is keyed by the node it asks for, and counts only when that could be approved.
pub fn pending_key(sub: &Submission, rules: &MachinePolicy) -> PendingKey {
    pending_key_of(&sub.username, client_node(sub).as_deref(), rules)
}

/// The key of a pending CSR of `username` whose request asks a client certificate for
/// `client_node` ([`client_node`], read from its request once): [`pending_key`] without the
/// request, for a cache that keeps only that node name of it.
pub fn pending_key_of(username: &str, client_node: Option<&str>, rules: &MachinePolicy) -> PendingKey {
    if !rules.bootstrapper.matches(username) {
        return PendingKey::Requester(username.to_owned());
    }
    match client_node {
        Some(node) if identity::problem(node).is_none() => PendingKey::Bootstrap(node.to_owned()),
        _ => PendingKey::Never,
    }
}

/// The Machines that await their node (no `status.nodeRef` yet), by InternalDNS name: a bootstrap
/// CSR counts towards the brake only when one of them could approve it.
#[derive(Debug, Clone, Default)]
pub struct AwaitedNodes {
    /// Lowercased InternalDNS name (trailing dots cut) → the creation time of each such Machine.
    machines: HashMap<String, Vec<Timestamp>>,
}

impl AwaitedNodes {
    /// The unclaimed Machines among `machines`.
    pub fn new<'a>(machines: impl IntoIterator<Item = &'a MachineInfo>) -> AwaitedNodes {
        let mut awaited: HashMap<String, Vec<Timestamp>> = HashMap::new();
        for machine in machines.into_iter().filter(|m| m.node_ref.is_none()) {
            let Some(created) = machine.created else { continue };
            for address in machine.addresses.iter().filter(|a| a.kind == "InternalDNS") {
                let name = address.address.trim_end_matches('.').to_ascii_lowercase();
                awaited.entry(name).or_default().push(created);
            }
        }
        AwaitedNodes { machines: awaited }
    }

    /// Whether an unclaimed Machine carries the InternalDNS name `node` (a valid, so lowercase,
    /// node name) and was created in the window of a bootstrap CSR created at `created`.
    pub fn awaits(&self, node: &str, created: Option<Timestamp>) -> bool {
        let Some(created) = created else { return false };
        self.machines.get(node).is_some_and(|machines| machines.iter().any(|m| in_machine_window(created, *m)))
    }
}

/// The name a pending CSR counts under, or `None` when it does not count: a node's CSR under its
/// username, a bootstrap CSR under the node it asks for while an unclaimed Machine awaits that node
/// (created in its window), any other never.
pub fn counted_under<'a>(key: &'a PendingKey, created: Option<Timestamp>, awaited: &AwaitedNodes) -> Option<&'a str> {
    match key {
        PendingKey::Requester(username) => Some(username.as_str()),
        PendingKey::Bootstrap(node) => awaited.awaits(node, created).then_some(node.as_str()),
        PendingKey::Never => None,
    }
}

/// A bootstrap CSR may be created this long before its Machine (clock skew)...
const BEFORE_MACHINE: SignedDuration = SignedDuration::from_secs(10);
/// ... and at most this long after it.
const AFTER_MACHINE: SignedDuration = SignedDuration::from_secs(2 * 3600);

/// Whether a bootstrap CSR created at `created` falls in the window of a Machine created at
/// `machine_created`: from 10 s before it to 2 h after it.
pub(crate) fn in_machine_window(created: Timestamp, machine_created: Timestamp) -> bool {
    let earliest = machine_created.checked_sub(BEFORE_MACHINE).unwrap_or(machine_created);
    let latest = machine_created.checked_add(AFTER_MACHINE).unwrap_or(machine_created);
    created >= earliest && created <= latest
}

/// The brake's count from the node names of the pending CSRs: each name counts at most
/// [`PENDING_PER_NODE`] times.
pub fn capped_pending<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> usize {
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for node in nodes {
        *per_node.entry(node.as_ref().to_owned()).or_default() += 1;
    }
    per_node.values().map(|&n| n.min(PENDING_PER_NODE)).sum()
}

/// The brake's count over `csrs` at `now` with the Machines `awaited` ([`counts_as_pending`],
/// [`pending_key`], [`counted_under`], [`capped_pending`]).
pub fn pending_count<'a>(
    csrs: impl IntoIterator<Item = &'a Submission>,
    rules: &MachinePolicy,
    awaited: &AwaitedNodes,
    now: Timestamp,
) -> usize {
    let keys: Vec<(PendingKey, Option<Timestamp>)> = csrs
        .into_iter()
        .filter(|sub| counts_as_pending(sub, rules, now))
        .map(|sub| (pending_key(sub, rules), sub.created))
        .collect();
    capped_pending(keys.iter().filter_map(|(key, created)| counted_under(key, *created, awaited)))
}

/// The most pending node CSRs the brake lets through: max(Machines, Nodes) + `delta`.
pub fn brake_limit(load: &BrakeInputs, delta: u32) -> usize {
    load.machines.max(load.nodes).saturating_add(delta as usize)
}

/// The safety brake: no machine-mode approval while pending node CSRs exceed
/// max(Machines, Nodes) + `--max-pending-delta`.
pub(crate) fn pending_brake(
    load: &Option<Result<BrakeInputs, ClusterError>>,
    cfg: &MachinePolicy,
) -> Result<String, Failure> {
    let load = match load {
        Some(Ok(load)) => load,
        Some(Err(error)) => {
            return Err(Failure::retry(Reason::ClusterUnavailable, format!("cannot count pending CSRs: {error}")));
        }
        None => return Err(Failure::retry(Reason::ClusterUnavailable, "pending CSRs were not counted")),
    };
    let limit = brake_limit(load, cfg.max_pending_delta);
    if load.pending > limit {
        Err(Failure::retry(
            Reason::TooManyPending,
            format!(
                "{} pending node CSRs exceed max({} Machines, {} Nodes) + --max-pending-delta {}: approvals paused",
                load.pending, load.machines, load.nodes, cfg.max_pending_delta
            ),
        ))
    } else {
        Ok(format!("{} pending, limit {limit}", load.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brake_limit_is_the_larger_count_plus_the_delta() {
        let load = BrakeInputs { pending: 0, machines: 3, nodes: 5 };
        assert_eq!(brake_limit(&load, 2), 7);
        assert_eq!(brake_limit(&BrakeInputs { machines: 9, ..load }, 0), 9);
        assert_eq!(brake_limit(&BrakeInputs { machines: usize::MAX, ..load }, 1), usize::MAX);
    }
}
