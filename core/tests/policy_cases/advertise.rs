//! An apiserver's advertise address (an address of the `default/kubernetes` EndpointSlices): the
//! one Node that claims it may have it in its serving certificate, no other node, and nobody when
//! more than one Node claims it (`ClusterIdentity`).

use std::net::IpAddr;

use node_csr_approver_core::policy::{
    AddressClaim, ApiserverAddresses, ClusterError, DecisionKind, Evidence, HostnameMatch, Reason,
};
use regex::Regex;

use super::{addrs, case, good_csr};
use crate::support::table::Case;
use crate::support::{Request, serving};

use DecisionKind::{Approve, Deny, Hold, Retry};

/// The ClusterIP 10.0.0.1; n1's address 10.0.0.11 and fd00::11 advertised in the slices.
fn advertised(e: &mut Evidence) {
    let ip = |text: &str| text.parse::<IpAddr>().unwrap();
    e.apiserver = Some(Ok(ApiserverAddresses {
        service: vec![ip("10.0.0.1")],
        endpoints: vec![ip("10.0.0.11"), ip("fd00::11")],
    }));
}

/// The Nodes claiming each address, as `(address, nodes)`.
fn claims(claims: &'static [(&'static str, &'static [&'static str])]) -> impl FnOnce(&mut Evidence) {
    move |e| {
        let claim = |(ip, nodes): &(&str, &[&str])| AddressClaim {
            ip: ip.parse().unwrap(),
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            control_plane: Vec::new(),
        };
        e.address_claims = Some(Ok(claims.iter().map(claim).collect()));
    }
}

/// The Nodes claiming one address, and those of them (or not) with the control-plane role label,
/// as `(address, nodes, labelled)`.
fn labelled(claim: (&'static str, &'static [&'static str], &'static [&'static str])) -> impl FnOnce(&mut Evidence) {
    move |e| {
        let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        let (ip, nodes, control_plane) = claim;
        e.address_claims = Some(Ok(vec![AddressClaim {
            ip: ip.parse().unwrap(),
            nodes: names(nodes),
            control_plane: names(control_plane),
        }]));
    }
}

/// `name` asking for its name under nodes.example.com and `ip`.
fn asks(name: &str, ip: &str) -> node_csr_approver_core::policy::Submission {
    serving(name, &Request::node(name).dns(&format!("{name}.nodes.example.com")).ip(ip).pem())
}

/// Every flag that weakens a check, at once.
fn permissive(case: Case) -> Case {
    case.cfg(|c| {
        c.bypass_dns_resolution = true;
        c.bypass_hostname_check = true;
        c.provider_regex = Regex::new(".*").unwrap();
        c.ip_prefixes = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    })
}

/// Every advertise-address case outside machine mode.
pub fn cases() -> Vec<Case> {
    let deny = (Deny, Reason::ClusterIdentity);
    let approve = (Approve, Reason::AutoApproved);
    let contested = (Retry, Reason::AdvertiseAddressContested);
    let both = || serving("n1", &Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11").ip("fd00::11").pem());
    vec![
        case("advertise address claimed by the requester alone", good_csr(), approve)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])])),
        case("advertise address claimed alone, dns resolving to it", good_csr(), approve)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])]))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.11"]))]),
        case("advertise address claimed alone, usual checks on top", good_csr(), (Deny, Reason::IPNotResolved))
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])]))
            .dns(&[("n1.nodes.example.com", addrs(&["10.0.0.12"]))]),
        case("advertise address outside the prefixes", asks("n1", "192.168.0.5"), (Deny, Reason::IPNotInPrefixes))
            .evidence(|e| {
                e.apiserver = Some(Ok(ApiserverAddresses {
                    service: Vec::new(),
                    endpoints: vec!["192.168.0.5".parse().unwrap()],
                }))
            })
            .evidence(claims(&[("192.168.0.5", &["n1"])])),
        case("advertise address claimed by no node", good_csr(), deny)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &[])])),
        case("advertise address claimed by another node", good_csr(), deny)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["cp-1"])])),
        case("advertise address claimed by two nodes", good_csr(), contested)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1", "n2"])])),
        case("claimed by two, the requester the control-plane node", good_csr(), approve)
            .evidence(advertised)
            .evidence(labelled(("10.0.0.11", &["n2", "n1"], &["n1"]))),
        case("claimed by two, the other the control-plane node", good_csr(), deny)
            .evidence(advertised)
            .evidence(labelled(("10.0.0.11", &["n1", "n2"], &["n2"]))),
        case("claimed by two, both control-plane nodes", good_csr(), contested)
            .evidence(advertised)
            .evidence(labelled(("10.0.0.11", &["n1", "n2"], &["n1", "n2"]))),
        case("claimed by two, the label on a node that does not claim it", good_csr(), contested)
            .evidence(advertised)
            .evidence(labelled(("10.0.0.11", &["n1", "n2"], &["n3"]))),
        case("claimed by the labelled requester alone", good_csr(), approve).evidence(advertised).evidence(labelled((
            "10.0.0.11",
            &["n1"],
            &["n1"],
        ))),
        case("claimed by a labelled other node alone", good_csr(), deny).evidence(advertised).evidence(labelled((
            "10.0.0.11",
            &["n2"],
            &["n2"],
        ))),
        case("advertise address claimed by the requester twice", good_csr(), approve)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1", "n1"])])),
        case("a worker whose name resolves to the advertise address", asks("n2", "10.0.0.11"), deny)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])]))
            .dns(&[("n2.nodes.example.com", addrs(&["10.0.0.11"]))]),
        permissive(case("a worker under every bypass", asks("n2", "10.0.0.11"), deny))
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])])),
        permissive(case("a worker under prefix binding", asks("n2", "10.0.0.11"), deny))
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])]))
            .cfg(|c| (c.bypass_hostname_check, c.hostname_match) = (false, HostnameMatch::Prefix)),
        permissive(case("a worker under skip-deny", asks("n2", "10.0.0.11"), (Hold, Reason::ClusterIdentity)))
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"])]))
            .cfg(|c| c.skip_deny_step = true),
        case("two advertise addresses, both claimed alone", both(), approve)
            .cfg(|c| c.allowed_ip_addresses = 2)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"]), ("fd00::11", &["n1"])])),
        case("two advertise addresses, the second claimed by two", both(), contested)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"]), ("fd00::11", &["n1", "n2"])])),
        case("two advertise addresses, the second unclaimed", both(), deny)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.11", &["n1"]), ("fd00::11", &[])])),
        case("advertised as ipv4-mapped, claimed alone", good_csr(), approve)
            .evidence(|e| {
                e.apiserver = Some(Ok(ApiserverAddresses {
                    service: Vec::new(),
                    endpoints: vec!["::ffff:10.0.0.11".parse().unwrap()],
                }))
            })
            .evidence(claims(&[("10.0.0.11", &["n1"])])),
        case("claims of the ipv4-mapped form", good_csr(), approve)
            .evidence(advertised)
            .evidence(claims(&[("::ffff:10.0.0.11", &["n1"])])),
        case("claims of another address only", good_csr(), deny)
            .evidence(advertised)
            .evidence(claims(&[("10.0.0.12", &["n1"])])),
        case("claims not looked up", good_csr(), (Retry, Reason::ClusterUnavailable)).evidence(advertised),
        case("claims unreadable", good_csr(), (Retry, Reason::ClusterUnavailable))
            .evidence(advertised)
            .evidence(|e| e.address_claims = Some(Err(ClusterError::Request("forbidden".into())))),
        case("other addresses need no claims", asks("n1", "10.0.0.12"), approve).evidence(advertised),
    ]
}
