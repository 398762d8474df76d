//! Node and Machine address matching, and the checks machine mode shares between signers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::csr::CsrFacts;

use super::identity::{CLIENT_SIGNER, NODES_GROUP, SERVING_SIGNER};
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
    let decidable = sub.signer_name == SERVING_SIGNER || (sub.signer_name == CLIENT_SIGNER && rules.client_approval);
    let from_node = rules.bootstrapper.matches(&sub.username) || sub.groups.iter().any(|g| g == NODES_GROUP);
    decidable
        && from_node
        && sub.decided.is_none()
        && sub.created.is_some_and(|created| {
            let age = now.duration_since(created);
            age < PENDING_WINDOW && age >= -FUTURE_SKEW
        })
}

/// The node name a pending CSR counts under: the requester's username (`system:node:<name>`), or
/// for the bootstrapper the request's one common name (the username when it has not exactly one or
/// cannot be read).
pub fn pending_node(sub: &Submission, rules: &MachinePolicy) -> String {
    if rules.bootstrapper.matches(&sub.username)
        && let Ok(facts) = CsrFacts::from_pem(&sub.request)
        && let [common_name] = facts.common_names.as_slice()
    {
        return common_name.clone();
    }
    sub.username.clone()
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

/// The brake's count over `csrs` at `now` ([`counts_as_pending`], [`pending_node`], [`capped_pending`]).
pub fn pending_count<'a>(
    csrs: impl IntoIterator<Item = &'a Submission>,
    rules: &MachinePolicy,
    now: Timestamp,
) -> usize {
    capped_pending(
        csrs.into_iter().filter(|sub| counts_as_pending(sub, rules, now)).map(|sub| pending_node(sub, rules)),
    )
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
