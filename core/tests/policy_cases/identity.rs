//! Identities no node may claim, whatever the flags: the apiserver's names, the Service domain,
//! `localhost`, reserved addresses and the apiserver's own addresses (`ClusterIdentity`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use node_csr_approver_core::policy::{
    AddressClaim, ApiserverAddresses, Bootstrapper, ClusterError, DecisionKind, HostnameMatch, MachinePolicy, Reason,
    Submission,
};
use regex::Regex;

use super::case;
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::{Approve, Deny, Hold, Retry};

/// DNS SANs that name the apiserver or loopback, each asked for by node `kubernetes` (so the
/// strict hostname binding passes where it can).
const NAMES: [&str; 13] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "KUBERNETES.Default.SVC.",
    "kubernetes.default.svc.cluster.local",
    "kubernetes.default.svc.cluster.local.",
    "svc.cluster.local",
    "x.y.svc.cluster.local",
    "kubernetes.svc.Cluster.Local",
    "localhost",
    "LOCALHOST.",
    "kubernetes.localhost",
    "localhost.localhost",
];

/// IP SANs no node owns, each inside the permissive prefixes.
const ADDRESSES: [&str; 17] = [
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    "0.0.0.0",
    "::",
    "169.254.169.254",
    "169.254.0.1",
    "fe80::1",
    "febf:ffff::1",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "ff0e::1",
    "255.255.255.255",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:224.0.0.1",
];

/// Neighbours of the reserved names and addresses that a node may hold.
const NEAR_NAMES: [&str; 6] = [
    "kubernetes.nodes.example.com",
    "kubernetes.defaults",
    "asvc.cluster.local",
    "svc.cluster.local.example.com",
    "mylocalhost",
    "localhost-1.example.com",
];
const NEAR_ADDRESSES: [&str; 7] =
    ["126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.1", "223.255.255.255", "255.255.255.254", "fe7f::1"];

pub(super) fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// Every flag that weakens a check, at once: DNS not resolved, no hostname binding, any name,
/// any address, a thousand SANs.
pub(super) fn permissive(case: Case) -> Case {
    case.cfg(|c| {
        c.bypass_dns_resolution = true;
        c.bypass_hostname_check = true;
        c.provider_regex = Regex::new(".*").unwrap();
        c.ip_prefixes = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        c.allowed_dns_names = 1000;
    })
}

fn machine_mode(case: Case) -> Case {
    case.cfg(|c| {
        c.machine = Some(MachinePolicy {
            client_approval: true,
            bootstrapper: Bootstrapper::Exact(
                "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper".into(),
            ),
            bootstrapper_groups: BTreeSet::new(),
            max_pending_delta: 100,
            serving_renewal: false,
        });
    })
}

/// `sub` under the default flags, every bypass, prefix binding, machine mode (each denied
/// `ClusterIdentity`) and skip-deny (held).
fn denied_under_every_flag(what: &str, sub: &Submission) -> Vec<Case> {
    refused_under_every_flag(what, sub, Reason::ClusterIdentity)
}

/// `sub` under the default flags, every bypass, prefix binding, machine mode (each denied with
/// `reason`) and skip-deny (held with it).
pub(super) fn refused_under_every_flag(what: &str, sub: &Submission, reason: Reason) -> Vec<Case> {
    let deny = (Deny, reason);
    vec![
        case(leak(format!("{what}: default flags")), sub.clone(), deny),
        permissive(case(leak(format!("{what}: every bypass")), sub.clone(), deny)),
        permissive(case(leak(format!("{what}: prefix binding")), sub.clone(), deny))
            .cfg(|c| (c.bypass_hostname_check, c.hostname_match) = (false, HostnameMatch::Prefix)),
        machine_mode(permissive(case(leak(format!("{what}: machine mode")), sub.clone(), deny))),
        permissive(case(leak(format!("{what}: skip-deny")), sub.clone(), (Hold, reason)))
            .cfg(|c| c.skip_deny_step = true),
    ]
}

/// The static cases: reserved names and addresses, and their neighbours.
fn reserved() -> Vec<Case> {
    let mut cases = Vec::new();
    for name in NAMES {
        let sub = serving("kubernetes", &Request::node("kubernetes").dns(name).pem());
        cases.extend(denied_under_every_flag(leak(format!("dns san {name}")), &sub));
    }
    for ip in ADDRESSES {
        let sub = serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip(ip).pem());
        cases.extend(denied_under_every_flag(leak(format!("ip san {ip}")), &sub));
    }
    for name in NEAR_NAMES {
        let sub = serving("kubernetes", &Request::node("kubernetes").dns(name).pem());
        cases.push(permissive(case(leak(format!("near name {name}")), sub, (Approve, Reason::AutoApproved))));
    }
    for ip in NEAR_ADDRESSES {
        let sub = serving("n1", &Request::node("n1").ip(ip).pem());
        cases.push(permissive(case(leak(format!("near address {ip}")), sub, (Approve, Reason::AutoApproved))));
    }
    cases
}

/// The cluster domain comes from `--cluster-domain`.
fn cluster_domain() -> Vec<Case> {
    let node = |name: &str| serving("kubernetes", &Request::node("kubernetes").dns(name).pem());
    let corp = |c: &mut node_csr_approver_core::policy::PolicyConfig| c.cluster_domain = "corp.example".into();
    vec![
        permissive(case(
            "service domain of --cluster-domain",
            node("a.svc.corp.example"),
            (Deny, Reason::ClusterIdentity),
        ))
        .cfg(corp),
        permissive(case(
            "cluster.local under another domain",
            node("a.svc.cluster.local"),
            (Approve, Reason::AutoApproved),
        ))
        .cfg(corp),
        case("apiserver names under any domain", node("kubernetes.default.svc"), (Deny, Reason::ClusterIdentity))
            .cfg(corp),
    ]
}

fn ips(addresses: &[&str]) -> Vec<IpAddr> {
    addresses.iter().map(|ip| ip.parse().unwrap()).collect()
}

/// The apiserver's own addresses, read from the cluster.
fn apiserver() -> Vec<Case> {
    let asks = |ip: &str| serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip(ip).pem());
    let dns_only = serving("n1", &Request::node("n1").dns("n1.nodes.example.com").pem());
    let known = |service: &'static [&'static str], endpoints: &'static [&'static str]| {
        move |e: &mut node_csr_approver_core::policy::Evidence| {
            e.apiserver = Some(Ok(ApiserverAddresses { service: ips(service), endpoints: ips(endpoints) }));
        }
    };
    let mut cases = denied_under_every_flag("apiserver clusterip", &asks("10.0.0.1"))
        .into_iter()
        .map(|case| case.evidence(known(&["10.0.0.1"], &[])))
        .collect::<Vec<_>>();
    // An advertise address no Node claims.
    cases.extend(denied_under_every_flag("apiserver endpoint", &asks("fd00::6")).into_iter().map(|case| {
        case.evidence(known(&["10.0.0.1"], &["fd00::6"])).evidence(|e| {
            e.address_claims = Some(Ok(vec![AddressClaim {
                ip: "fd00::6".parse().unwrap(),
                nodes: Vec::new(),
                control_plane: Vec::new(),
            }]));
        })
    }));
    // A ClusterIP also listed in an EndpointSlice, claimed by the requester: still refused.
    cases.extend(denied_under_every_flag("apiserver clusterip and endpoint", &asks("10.0.0.1")).into_iter().map(
        |case| {
            case.evidence(known(&["10.0.0.1"], &["10.0.0.1"])).evidence(|e| {
                e.address_claims = Some(Ok(vec![AddressClaim {
                    ip: "10.0.0.1".parse().unwrap(),
                    nodes: vec!["n1".into()],
                    control_plane: Vec::new(),
                }]));
            })
        },
    ));
    cases.extend([
        case("apiserver address written as ipv4-mapped", asks("10.0.0.1"), (Deny, Reason::ClusterIdentity))
            .evidence(known(&["::ffff:10.0.0.1"], &[])),
        case("apiserver at other addresses", asks("10.0.0.11"), (Approve, Reason::AutoApproved))
            .evidence(known(&["10.0.0.1"], &["fd00::1"])),
        case("apiserver addresses not looked up", asks("10.0.0.11"), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.apiserver = None),
        case("apiserver addresses unreadable", asks("10.0.0.11"), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.apiserver = Some(Err(ClusterError::Request("forbidden".into())))),
        permissive(case(
            "apiserver unreadable under every bypass",
            asks("10.0.0.11"),
            (Retry, Reason::ClusterUnavailable),
        ))
        .evidence(|e| e.apiserver = Some(Err(ClusterError::Request("forbidden".into()))))
        .cfg(|c| c.skip_deny_step = true),
        case("no ip sans need no apiserver addresses", dns_only, (Approve, Reason::AutoApproved))
            .evidence(|e| e.apiserver = None),
    ]);
    cases
}

/// Every `ClusterIdentity` case.
pub fn cases() -> Vec<Case> {
    [reserved(), cluster_domain(), apiserver()].into_iter().flatten().collect()
}
