//! Only a node's newest kubelet-serving CSR that passes is signed: an older one is denied
//! `Superseded` once a newer one is approved, and waits while a newer one is undecided.

use std::net::IpAddr;
use std::sync::Arc;

use futures::executor::block_on;
use jiff::{SignedDuration, Timestamp};
use node_csr_approver_core::policy::{
    AddressClaim, ApiserverAddresses, BrakeInputs, CheckId, ClusterError, ClusterView, DecisionKind,
    KubeletCertificate, MachineInfo, NodeInfo, Outcome, Reason, Resolution, Resolver, ServingCsr, ServingCsrState,
    Submission, evaluate, serving_node,
};

use super::{case, good, good_csr};
use crate::support::table::Case;
use crate::support::{Request, config, minutes_after_creation, serving};

use DecisionKind::{Approve, Deny, Ignore, Retry};

/// The creation time of [`good_csr`] moved by `seconds`.
fn at(seconds: i64) -> Option<Timestamp> {
    good_csr().created.map(|created| created + SignedDuration::from_secs(seconds))
}

/// A serving CSR of the same node, `seconds` after [`good_csr`], still pending.
fn pending(name: &str, seconds: i64) -> ServingCsr {
    ServingCsr { name: name.into(), created: at(seconds), state: ServingCsrState::Pending }
}

/// The same, approved.
fn approved(name: &str, seconds: i64) -> ServingCsr {
    ServingCsr { state: ServingCsrState::Approved, ..pending(name, seconds) }
}

/// The same, denied or failed.
fn refused(name: &str, seconds: i64) -> ServingCsr {
    ServingCsr { state: ServingCsrState::Refused, ..pending(name, seconds) }
}

/// A case of [`good_csr`] (named `csr-n1`) whose node has these serving CSRs (itself among them).
fn among(name: &'static str, others: Vec<ServingCsr>, expect: (DecisionKind, Reason)) -> Case {
    let mut csrs = vec![pending("csr-n1", 0)];
    csrs.extend(others);
    case(name, good_csr(), expect).evidence(move |e| e.serving_csrs = Some(Ok(csrs)))
}

/// The superseded cases.
pub fn cases() -> Vec<Case> {
    let held = (Retry, Reason::NewerServingCSRPending);
    vec![
        among(
            "the newest serving csr",
            vec![approved("csr-a", -1), pending("csr-z", -60)],
            (Approve, Reason::AutoApproved),
        ),
        among("a newer pending serving csr: held", vec![pending("csr-b", 1)], held),
        among("a newer approved serving csr", vec![approved("csr-b", 1)], (Deny, Reason::Superseded)),
        among("a newer pending and a newer approved", vec![pending("csr-c", 2), approved("csr-b", 1)], {
            (Deny, Reason::Superseded)
        }),
        among("equal times: a greater name is newer", vec![approved("csr-n1-b", 0)], (Deny, Reason::Superseded)),
        among("equal times: a greater pending name is newer", vec![pending("csr-n1-b", 0)], held),
        among("equal times: a smaller name is older", vec![approved("csr-a", 0)], (Approve, Reason::AutoApproved)),
        among("a newer denied or failed csr", vec![refused("csr-b", 1)], (Approve, Reason::AutoApproved)),
        among(
            "newer ones all refused",
            vec![refused("csr-b", 1), refused("csr-c", 2)],
            (Approve, Reason::AutoApproved),
        ),
        among("no creation time is older than any", vec![ServingCsr { created: None, ..approved("csr-z", 0) }], {
            (Approve, Reason::AutoApproved)
        }),
        case("the serving csrs cannot be read", good_csr(), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.serving_csrs = Some(Err(ClusterError::Request("forbidden".into())))),
        case("the serving csrs were not looked up", good_csr(), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.serving_csrs = None),
        // Its own checks first: a forged older CSR is denied for what it forges.
        case(
            "a forged older csr",
            serving("n1", &Request::node("n1").dns("auth.evil.io").pem()),
            (Deny, Reason::HostnameMismatch),
        )
        .evidence(|e| e.serving_csrs = Some(Ok(vec![approved("csr-b", 1)]))),
        case(
            "a forged older csr, a newer one pending",
            serving("n1", &Request::node("n1").dns("auth.evil.io").pem()),
            (Deny, Reason::HostnameMismatch),
        )
        .evidence(|e| e.serving_csrs = Some(Ok(vec![pending("csr-b", 1)]))),
        case("a non-node requester", Submission { username: "alice".into(), ..good_csr() }, {
            (Deny, Reason::UsernameNotNode)
        })
        .evidence(|e| e.serving_csrs = Some(Ok(vec![approved("csr-b", 1)]))),
        case("a non-node requester, ignored", Submission { username: "alice".into(), ..good_csr() }, {
            (Ignore, Reason::NotANode)
        })
        .cfg(|c| c.ignore_non_system_node = true)
        .evidence(|e| e.serving_csrs = Some(Ok(vec![approved("csr-b", 1)]))),
    ]
}

/// The decision of [`good_csr`] among these serving CSRs of its node.
fn decided(others: Vec<ServingCsr>) -> (DecisionKind, Reason, String, Outcome) {
    let evaluation = among("decided", others, (Approve, Reason::AutoApproved)).evaluate();
    let row = evaluation.checks.iter().find(|row| row.check == CheckId::Superseded).expect("a superseded row");
    let decision = evaluation.decision;
    (decision.kind, decision.reason, decision.message, row.outcome.clone())
}

#[test]
fn the_denial_names_the_newest_newer_approved_csr_even_with_newer_pending_ones() {
    let others = vec![
        approved("csr-b", 1),
        approved("csr-d", 3),
        refused("csr-e", 4),
        pending("csr-f", 5),
        approved("csr-a", -1),
    ];
    let (kind, reason, message, row) = decided(others);
    assert_eq!((kind, reason), (Deny, Reason::Superseded));
    assert!(message.contains(r#"CSR "csr-d" of system:node:n1"#), "{message}");
    assert!(message.contains(&format!("created {}", at(3).unwrap())), "{message}");
    assert!(matches!(row, Outcome::Fail(_)), "{row:?}");
}

#[test]
fn the_hold_names_the_newest_pending_csr_and_says_what_follows() {
    let others = vec![pending("csr-b", 1), pending("csr-d", 3), refused("csr-e", 4), approved("csr-a", -1)];
    let (kind, reason, message, row) = decided(others);
    assert_eq!((kind, reason), (Retry, Reason::NewerServingCSRPending));
    assert!(message.contains(r#"CSR "csr-d" of system:node:n1"#), "{message}");
    assert!(
        message.contains("denied Superseded once it is approved, approved once it is denied or failed"),
        "{message}"
    );
    assert!(matches!(row, Outcome::Fail(_)), "{row:?}");
}

#[test]
fn a_newer_approved_csr_supersedes_and_names_itself_among_equal_times_by_name() {
    let (_, reason, message, _) =
        decided(vec![approved("csr-n1-a", 0), approved("csr-n1-c", 0), approved("csr-n1-b", 0)]);
    assert_eq!(reason, Reason::Superseded);
    assert!(message.contains(r#""csr-n1-c""#), "the greatest name: {message}");
    let (_, reason, message, _) =
        decided(vec![ServingCsr { created: None, ..approved("csr-z", 0) }, approved("csr-b", 5)]);
    assert_eq!(reason, Reason::Superseded);
    assert!(message.contains(r#""csr-b""#), "a creation time beats none, whatever the name: {message}");
}

#[test]
fn a_csr_without_creation_time_is_superseded_by_any_with_one() {
    let undated = Submission { created: None, ..good_csr() };
    let evaluation = case("undated", undated, (Deny, Reason::Superseded))
        .evidence(|e| e.serving_csrs = Some(Ok(vec![approved("csr-a", -600)])))
        .evaluate();
    assert_eq!(evaluation.decision.reason, Reason::Superseded);
    assert!(evaluation.decision.message.contains("created"), "{}", evaluation.decision.message);
    let (kind, _, _, row) = decided(vec![ServingCsr { created: None, ..approved("csr-z", 0) }]);
    assert_eq!(kind, Approve);
    assert_eq!(row, Outcome::Pass("no newer kubelet-serving CSR of system:node:n1 is pending or approved".into()));
}

#[test]
fn an_undated_newest_csr_is_named_as_such() {
    let undated = Submission { created: None, name: "csr-a".into(), ..good_csr() };
    let evaluation = case("undated", undated, (Deny, Reason::Superseded))
        .evidence(|e| e.serving_csrs = Some(Ok(vec![ServingCsr { created: None, ..approved("csr-b", 0) }])))
        .evaluate();
    assert_eq!(evaluation.decision.reason, Reason::Superseded);
    assert!(evaluation.decision.message.contains("(no creation time)"), "{}", evaluation.decision.message);
}

#[test]
fn the_lookup_error_is_named() {
    let evaluation = case("unread", good_csr(), (DecisionKind::Retry, Reason::ClusterUnavailable))
        .evidence(|e| e.serving_csrs = Some(Err(ClusterError::Request("forbidden".into()))))
        .evaluate();
    let message = &evaluation.decision.message;
    assert!(message.contains("system:node:n1") && message.contains("forbidden"), "{message}");
}

#[test]
fn only_serving_csrs_of_a_node_requester_have_a_node() {
    assert_eq!(serving_node(&good_csr()), Some("n1"));
    let client = Submission { signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(), ..good_csr() };
    assert_eq!(serving_node(&client), None, "a client CSR: its requester may be shared");
    assert_eq!(serving_node(&Submission { username: "alice".into(), ..good_csr() }), None);
    assert_eq!(serving_node(&Submission { username: "system:node:".into(), ..good_csr() }), None);
}

/// A cluster holding only kubelet-serving CSRs, by requester; every other read finds nothing.
struct ServingCsrs(Vec<(&'static str, ServingCsr)>);

impl ClusterView for ServingCsrs {
    async fn node(&self, _: &str) -> Result<Option<NodeInfo>, ClusterError> {
        Ok(None)
    }
    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        Ok(Vec::new())
    }
    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        Ok(BrakeInputs::default())
    }
    async fn apiserver_addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
        Ok(ApiserverAddresses::default())
    }
    async fn nodes_claiming(&self, _: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        Ok(Vec::new())
    }
    async fn client_certificates(&self, _: &str) -> Result<Vec<String>, ClusterError> {
        Ok(Vec::new())
    }
    async fn serving_csrs(&self, requester: &str) -> Result<Vec<ServingCsr>, ClusterError> {
        Ok(self.0.iter().filter(|(of, _)| *of == requester).map(|(_, csr)| csr.clone()).collect())
    }
    async fn kubelet_certificate(&self, _: &str) -> Result<KubeletCertificate, ClusterError> {
        Ok(KubeletCertificate::Unusable("none".into()))
    }
}

/// Resolves nothing (DNS is bypassed by the configuration).
struct NoDns;

impl Resolver for NoDns {
    async fn resolve(&self, _: &str) -> Resolution {
        Resolution::NotFound
    }
}

#[test]
fn only_the_requester_s_own_newer_csrs_are_looked_up() {
    let sub = serving("n1", &good().pem());
    let cluster =
        ServingCsrs(vec![("system:node:n2", approved("csr-n2", 60)), ("system:node:n1", pending("csr-n1", 0))]);
    let evaluation = block_on(evaluate(&sub, &config(), &NoDns, &cluster, minutes_after_creation(1)));
    assert_eq!(evaluation.decision.kind, Approve, "another node's newer CSR: {}", evaluation.decision.message);
    let cluster = ServingCsrs(vec![("system:node:n1", approved("csr-n1-newer", 60))]);
    let evaluation = block_on(evaluate(&sub, &config(), &NoDns, &cluster, minutes_after_creation(1)));
    assert_eq!((evaluation.decision.kind, evaluation.decision.reason), (Deny, Reason::Superseded));
    let cluster = ServingCsrs(vec![("system:node:n1", pending("csr-n1-newer", 60))]);
    let evaluation = block_on(evaluate(&sub, &config(), &NoDns, &cluster, minutes_after_creation(1)));
    assert_eq!((evaluation.decision.kind, evaluation.decision.reason), (Retry, Reason::NewerServingCSRPending));
}
