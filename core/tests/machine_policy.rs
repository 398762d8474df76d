//! Table-driven tests of machine mode: the node-client bootstrap rules and the Machine-address
//! check of serving CSRs, with real rcgen requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "machine_policy/advertise.rs"]
mod advertise;
#[path = "machine_policy/brake.rs"]
mod brake;
#[path = "machine_policy/kubelet_renewal.rs"]
mod kubelet_renewal;
#[path = "machine_policy/one_client_certificate.rs"]
mod one_client_certificate;
#[path = "machine_policy/rules.rs"]
mod rules;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use node_csr_approver_core::policy::{
    ApiserverAddresses, Bootstrapper, BrakeInputs, CheckId, ClusterError, DecisionKind, Evidence, Lookup, MachineInfo,
    NodeInfo, Reason, ServingCsr, ServingCsrState, Submission, Unlisted,
};
use rcgen::DnType;
use support::table::{Case, assert_all};
use support::{Key, Request, extra_organization, serving};
use testkit::machine::{BOOTSTRAPPER, GROUPS, MACHINE_CREATED, machine, machine_config, n1_machine, now, rules};

use DecisionKind::{Approve, Hold, Ignore, Retry};

/// A bootstrap client CSR for node `node` created `seconds` after the Machine.
fn client(node: &str, seconds: i64) -> Submission {
    let request = Request::node(node).pem();
    Submission {
        name: format!("client-{node}"),
        created: Some(MACHINE_CREATED.parse::<jiff::Timestamp>().unwrap() + jiff::SignedDuration::from_secs(seconds)),
        signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
        username: BOOTSTRAPPER.into(),
        groups: GROUPS.iter().map(|g| (*g).to_owned()).collect(),
        usages: vec!["digital signature".into(), "client auth".into()],
        request: request.into_bytes(),
        ..Submission::default()
    }
}

/// The request of `first`, its END line cut to `-----END ` and followed by the request of `second`:
/// Go's reader skips the mismatched END and reads (and the signer signs) the second request.
fn end_then_begin(first: &str, second: &str) -> String {
    let first = Request::node(first).pem();
    let head = first.trim_end_matches("-----END CERTIFICATE REQUEST-----\n");
    format!("{head}-----END {}", Request::node(second).pem())
}

/// Node `n1` exists.
fn node_n1_exists(evidence: &mut Evidence) {
    evidence.node = Some(Lookup::Found(NodeInfo { name: "n1".into(), addresses: Vec::new(), object: None }));
}

/// Evidence: no Node, one Machine for `n1` (InternalDNS n1, Hostname and IPs), a quiet cluster, no
/// other serving CSR of the node.
fn evidence(machines: Vec<Arc<MachineInfo>>) -> Evidence {
    Evidence {
        node: Some(Lookup::Missing),
        load: Some(Ok(BrakeInputs { pending: 1, machines: machines.len(), nodes: 0 })),
        machines: Some(Ok(machines)),
        apiserver: Some(Ok(ApiserverAddresses::default())),
        client_certificates: Some(Ok(Vec::new())),
        serving_csrs: Some(Ok(Vec::new())),
        ..Evidence::default()
    }
}

fn case(name: &'static str, sub: Submission, evidence: Evidence, expect: (DecisionKind, Reason)) -> Case {
    Case::new(name, sub, machine_config(), evidence, now(), expect)
}

fn serving_n1(request: Request) -> Submission {
    serving("n1", &request.pem())
}

fn cases() -> Vec<Case> {
    let quiet = || evidence(vec![n1_machine(None)]);
    let claimed = || evidence(vec![n1_machine(Some("n1"))]);
    let rsa_usages = vec!["digital signature".to_owned(), "key encipherment".to_owned(), "client auth".to_owned()];
    vec![
        // Node-client bootstrap.
        case("ecdsa bootstrap", client("n1", 60), quiet(), (Approve, Reason::AutoApproved)),
        case("rsa bootstrap", client("n1", 60), quiet(), (Approve, Reason::AutoApproved)).sub(|s| {
            s.usages = rsa_usages.clone();
            s.request = Request::node("n1").key(Key::Rsa).pem().into_bytes();
        }),
        case(
            "machine dns is case-insensitive with a trailing dot",
            client("n1", 60),
            evidence(vec![machine(&[("InternalDNS", "N1.")], None)]),
            (Approve, Reason::AutoApproved),
        ),
        case("client approval disabled", client("n1", 60), quiet(), (Ignore, Reason::SignerNotHandled))
            .cfg(|c| c.machine.as_mut().unwrap().client_approval = false),
        case("not machine mode", client("n1", 60), quiet(), (Ignore, Reason::SignerNotHandled))
            .cfg(|c| c.machine = None),
        case("someone else", client("n1", 60), quiet(), (Ignore, Reason::NotBootstrapper))
            .sub(|s| s.username = "alice".into()),
        case("node renewal", client("n1", 60), quiet(), (Ignore, Reason::NodeClientRenewal))
            .sub(|s| s.username = "system:node:n1".into()),
        case("extra group", client("n1", 60), quiet(), (Hold, Reason::BootstrapperGroupsMismatch))
            .sub(|s| s.groups.push("system:masters".into())),
        case("missing group", client("n1", 60), quiet(), (Hold, Reason::BootstrapperGroupsMismatch))
            .sub(|s| s.groups.pop().map(|_| ()).unwrap_or_default()),
        case("bootstrap token prefix", client("n1", 60), quiet(), (Approve, Reason::AutoApproved))
            .sub(|s| {
                s.username = "system:bootstrap:abcdef".into();
                s.groups = vec!["system:bootstrappers".into(), "system:authenticated".into()];
            })
            .cfg(|c| {
                let rules = c.machine.as_mut().unwrap();
                rules.bootstrapper = Bootstrapper::Prefix("system:bootstrap:".into());
                rules.bootstrapper_groups =
                    BTreeSet::from(["system:bootstrappers".into(), "system:authenticated".into()]);
            }),
        case("extra o", client("n1", 60), quiet(), (Hold, Reason::SubjectMismatch)).sub(|s| {
            s.request = Request::node("n1")
                .subject(&[
                    (DnType::CommonName, "system:node:n1"),
                    (DnType::OrganizationName, "system:nodes"),
                    (extra_organization(), "system:masters"),
                ])
                .pem()
                .into_bytes();
        }),
        case("empty node name", client("n1", 60), quiet(), (Hold, Reason::SubjectMismatch)).sub(|s| {
            s.request = Request::node("").pem().into_bytes();
        }),
        case("client with a dns san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = Request::node("n1").dns("n1").pem().into_bytes()),
        case("client with an ip san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = Request::node("n1").ip("10.0.0.11").pem().into_bytes()),
        case("client with an email san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = Request::node("n1").email("n1@example.com").pem().into_bytes()),
        case("client with a uri san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = Request::node("n1").uri("spiffe://example.com/n1").pem().into_bytes()),
        case("client with an other-name san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = with_other_name(Request::node("n1")).pem().into_bytes()),
        // Every SAN kind adds to the count: one DNS and one other-name SAN are two, not none.
        case("client with a dns and an other-name san", client("n1", 60), quiet(), (Hold, Reason::ClientSANsPresent))
            .sub(|s| s.request = with_other_name(Request::node("n1").dns("n1")).pem().into_bytes()),
        case("serving usages on a client csr", client("n1", 60), quiet(), (Hold, Reason::UsagesNotAllowed))
            .sub(|s| s.usages = vec!["digital signature".into(), "server auth".into()]),
        case(
            "a second request after the END line is held",
            client("n1", 60),
            quiet(),
            (Hold, Reason::MalformedRequest),
        )
        .sub(|s| s.request = end_then_begin("n1", "n2").into_bytes()),
        case("garbage request is held, never denied", client("n1", 60), quiet(), (Hold, Reason::MalformedRequest))
            .sub(|s| s.request = b"garbage".to_vec()),
        case("node already exists", client("n1", 60), quiet(), (Hold, Reason::NodeAlreadyExists)).evidence(|e| {
            e.node = Some(Lookup::Found(NodeInfo { name: "n1".into(), addresses: Vec::new(), object: None }));
        }),
        case("machine already has a node", client("n1", 60), claimed(), (Hold, Reason::MachineAlreadyHasNode)),
        // One canonical node name for both lookups: another spelling of an existing node is held.
        case("upper-case spelling of an existing node", client("N1", 60), quiet(), (Hold, Reason::InvalidNodeName))
            .evidence(node_n1_exists),
        case("trailing-dot spelling of an existing node", client("n1.", 60), quiet(), (Hold, Reason::InvalidNodeName))
            .evidence(node_n1_exists),
        case("empty-label spelling of an existing node", client("n1...", 60), quiet(), (Hold, Reason::InvalidNodeName))
            .evidence(node_n1_exists),
        case("no machine yet", client("n1", 60), evidence(Vec::new()), (Retry, Reason::MachineNotFound)),
        case("another machine only", client("n2", 60), quiet(), (Retry, Reason::MachineNotFound)),
        case("10s before the machine", client("n1", -10), quiet(), (Approve, Reason::AutoApproved)),
        case("11s before the machine", client("n1", -11), quiet(), (Hold, Reason::CreatedOutsideMachineWindow)),
        case("2h after the machine", client("n1", 7200), quiet(), (Approve, Reason::AutoApproved)),
        case("2h and 1s after the machine", client("n1", 7201), quiet(), (Hold, Reason::CreatedOutsideMachineWindow)),
        case("a second client certificate", client("n1", 60), quiet(), (Hold, Reason::ClientCertificateIssued))
            .evidence(|e| e.client_certificates = Some(Ok(vec!["boot-n1".into()]))),
        case("approved client csrs unreadable", client("n1", 60), quiet(), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| {
                let why = Unlisted::FirstList("the first list");
                e.client_certificates = Some(Err(ClusterError::NotListed { what: "CSRs", why }))
            }),
        case("approved client csrs not looked up", client("n1", 60), quiet(), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.client_certificates = None),
        case("brake at the limit", client("n1", 60), quiet(), (Approve, Reason::AutoApproved))
            .evidence(|e| e.load = Some(Ok(BrakeInputs { pending: 101, machines: 1, nodes: 0 }))),
        case("brake one over the limit", client("n1", 60), quiet(), (Retry, Reason::TooManyPending))
            .evidence(|e| e.load = Some(Ok(BrakeInputs { pending: 102, machines: 1, nodes: 0 }))),
        case("brake counts nodes when more", client("n1", 60), quiet(), (Retry, Reason::TooManyPending))
            .evidence(|e| e.load = Some(Ok(BrakeInputs { pending: 106, machines: 1, nodes: 5 }))),
        // Serving CSRs in machine mode.
        case(
            "serving sans are machine addresses",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11")),
            claimed(),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "serving without system:authenticated",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11")),
            claimed(),
            (DecisionKind::Deny, Reason::NotInNodesGroup),
        )
        .sub(|s| s.groups.retain(|g| g != "system:authenticated")),
        case(
            "ipv6 written differently",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("fd00:0:0::0011")),
            claimed(),
            (Approve, Reason::AutoApproved),
        ),
        case(
            "serving dns not a machine address",
            serving_n1(Request::node("n1").dns("n2.nodes.example.com")),
            claimed(),
            (DecisionKind::Deny, Reason::MachineAddressMismatch),
        )
        .cfg(|c| c.bypass_hostname_check = true),
        case(
            "serving ip not a machine address",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.12")),
            claimed(),
            (DecisionKind::Deny, Reason::MachineAddressMismatch),
        ),
        case(
            "a dns san matching only an ip-typed address",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com")),
            evidence(vec![machine(&[("InternalIP", "n1.nodes.example.com")], Some("n1"))]),
            (DecisionKind::Deny, Reason::MachineAddressMismatch),
        ),
        case(
            "serving without a machine",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com")),
            quiet(),
            (Retry, Reason::MachineNotFound),
        ),
        case(
            "serving under the brake",
            serving_n1(Request::node("n1").dns("n1.nodes.example.com")),
            claimed(),
            (Retry, Reason::TooManyPending),
        )
        .evidence(|e| e.load = Some(Ok(BrakeInputs { pending: 500, machines: 1, nodes: 1 }))),
    ]
}

#[test]
fn every_machine_mode_case_decides_as_expected() {
    assert_all(&cases());
    assert_all(&rules::cases());
}

#[test]
fn client_csrs_are_never_denied() {
    for case in cases().iter().filter(|c| c.sub.signer_name.contains("client")) {
        assert_ne!(case.evaluate().decision.kind, DecisionKind::Deny, "{}", case.name);
    }
}

#[test]
fn every_machine_mode_reason_code_is_produced() {
    let all = cases().into_iter().chain(kubelet_renewal::cases());
    let produced: BTreeSet<Reason> = all.map(|case| case.evaluate().decision.reason).collect();
    let missing: Vec<&Reason> =
        Reason::ALL.iter().filter(|r| r.meaning().starts_with("Machine mode") && !produced.contains(r)).collect();
    assert!(missing.is_empty(), "no case produces {missing:?}");
}

#[test]
fn a_client_evaluation_reports_what_the_request_asks_for() {
    let cases = cases();
    let approved = cases
        .iter()
        .find(|c| c.sub.signer_name.contains("client") && c.evaluate().decision.kind == Approve)
        .expect("an approved client case");
    let request = approved.evaluate().request.expect("the request was read");
    assert_eq!(request.common_names, ["system:node:n1"]);
    assert_eq!(request.organizations, ["system:nodes"]);
    assert!(request.dns_names.is_empty() && request.ip_addresses.is_empty());
}

/// `request` with an otherName SAN (a UPN), which the parser records among the other SANs.
fn with_other_name(mut request: Request) -> Request {
    let upn = vec![1, 3, 6, 1, 4, 1, 311, 20, 2, 3];
    request.sans.push(rcgen::SanType::OtherName((upn, rcgen::OtherNameValue::Utf8String("n1@example.com".into()))));
    request
}

/// A bootstrap client CSR is never superseded: its requester is shared by every node that joins,
/// so a newer CSR of the same username may be anyone's. It has no superseded row at all.
#[test]
fn a_client_csr_is_never_superseded() {
    for state in [ServingCsrState::Approved, ServingCsrState::Pending] {
        let newer = ServingCsr { name: "client-n1-newer".into(), created: Some(now()), state };
        let mut with_newer = evidence(vec![n1_machine(None)]);
        with_newer.serving_csrs = Some(Ok(vec![newer]));
        let evaluation =
            case("a client csr with a newer one", client("n1", 60), with_newer, (Approve, Reason::AutoApproved))
                .evaluate();
        assert_eq!(
            (evaluation.decision.kind, evaluation.decision.reason),
            (Approve, Reason::AutoApproved),
            "{state:?}"
        );
        assert!(evaluation.checks.iter().all(|row| row.check != CheckId::Superseded), "{:?}", evaluation.checks);
    }
}
