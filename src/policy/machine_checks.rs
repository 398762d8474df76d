//! Node and Machine address matching, and the checks machine mode shares between signers.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::Reason;
use super::kubelet_serving::SIGNER as SERVING_SIGNER;
use super::node_client::SIGNER as CLIENT_SIGNER;
use super::ports::{Load, MachineInfo};
use super::report::Failure;
use super::rules::MachinePolicy;

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
    evidence: &Option<Result<Vec<Arc<MachineInfo>>, String>>,
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
const PENDING_WINDOW: Duration = Duration::from_secs(3600);

/// Whether a CSR counts towards the pending brake at `now`: a node CSR (either kubelet signer),
/// not yet decided, created within the last hour.
pub fn counts_as_pending(signer: &str, decided: bool, created: Option<Timestamp>, now: Timestamp) -> bool {
    [SERVING_SIGNER, CLIENT_SIGNER].contains(&signer)
        && !decided
        && created.is_some_and(|created| {
            now.duration_since(created).try_into().is_ok_and(|age: Duration| age < PENDING_WINDOW)
        })
}

/// The most pending node CSRs the brake lets through: max(Machines, Nodes) + `delta`.
pub fn brake_limit(load: &Load, delta: u32) -> usize {
    load.machines.max(load.nodes).saturating_add(delta as usize)
}

/// The safety brake: no machine-mode approval while pending node CSRs exceed
/// max(Machines, Nodes) + `--max-pending-delta`.
pub(crate) fn pending_brake(load: &Option<Result<Load, String>>, cfg: &MachinePolicy) -> Result<String, Failure> {
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
    fn pending_means_an_undecided_node_csr_younger_than_an_hour() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let ago = |secs: i64| Some(now - jiff::SignedDuration::from_secs(secs));
        for signer in [SERVING_SIGNER, CLIENT_SIGNER] {
            assert!(counts_as_pending(signer, false, ago(0), now));
            assert!(counts_as_pending(signer, false, ago(3599), now));
            assert!(!counts_as_pending(signer, false, ago(3600), now), "an hour old no longer counts");
            assert!(!counts_as_pending(signer, true, ago(10), now), "decided");
            assert!(!counts_as_pending(signer, false, None, now), "no creation time");
            assert!(!counts_as_pending(signer, false, ago(-10), now), "created in the future");
        }
        assert!(!counts_as_pending("example.com/other", false, ago(10), now), "another signer");
    }

    #[test]
    fn the_brake_limit_is_the_larger_count_plus_the_delta() {
        let load = Load { pending: 0, machines: 3, nodes: 5 };
        assert_eq!(brake_limit(&load, 2), 7);
        assert_eq!(brake_limit(&Load { machines: 9, ..load }, 0), 9);
        assert_eq!(brake_limit(&Load { machines: usize::MAX, ..load }, 1), usize::MAX);
    }
}
