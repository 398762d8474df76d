//! One client certificate per Machine: which CSRs count as an issued client certificate for a node
//! name, and the hold that names the earlier CSR.

use node_csr_approver_core::policy::{
    CheckId, DecisionKind, Outcome, Reason, Submission, client_node, issued_client_node,
};

use super::{case, cases, client, evidence, n1_machine};
use crate::support::{Request, serving};

fn approved(sub: Submission) -> Submission {
    Submission { approved: true, decided: Some("condition Approved is present".into()), ..sub }
}

#[test]
fn an_approved_client_csr_names_the_node_of_its_common_name() {
    assert_eq!(issued_client_node(&approved(client("n1", 0))).as_deref(), Some("n1"));
    let renewal = Submission { username: "system:node:n1".into(), ..approved(client("n1", 0)) };
    assert_eq!(issued_client_node(&renewal).as_deref(), Some("n1"), "a node's own renewal is a certificate too");
}

#[test]
fn only_approved_client_csrs_with_one_node_common_name_count() {
    assert_eq!(issued_client_node(&client("n1", 0)), None, "pending");
    let serving = approved(serving("n1", &Request::node("n1").dns("n1.example.com").pem()));
    assert_eq!(issued_client_node(&serving), None, "another signer");
    let unreadable = Submission { request: b"garbage".to_vec(), ..approved(client("n1", 0)) };
    assert_eq!(issued_client_node(&unreadable), None, "a request that cannot be read");
    let not_a_node = Submission {
        request: Request::node("n1").subject(&[(rcgen::DnType::CommonName, "alice")]).pem().into_bytes(),
        ..approved(client("n1", 0))
    };
    assert_eq!(issued_client_node(&not_a_node), None, "a common name that is not system:node:<name>");
}

#[test]
fn the_hold_names_the_earlier_csr_and_how_to_approve_this_one() {
    let cases = cases();
    let second = cases.iter().find(|c| c.name == "a second client certificate").expect("the case");
    let evaluation = second.evaluate();
    assert_eq!(
        (evaluation.decision.kind, evaluation.decision.reason),
        (DecisionKind::Hold, Reason::ClientCertificateIssued)
    );
    let message = &evaluation.decision.message;
    assert!(message.contains(r#""boot-n1""#), "{message}");
    assert!(message.contains(r#"kubectl certificate approve "client-n1""#), "{message}");
    let row = evaluation.checks.iter().find(|row| row.check == CheckId::OneClientCertificate).expect("a row");
    assert!(matches!(row.outcome, Outcome::Fail(_)), "{row:?}");
}

#[test]
fn a_pending_client_csr_names_the_node_it_asks_for() {
    assert_eq!(client_node(&client("n1", 0)).as_deref(), Some("n1"), "pending");
    assert_eq!(client_node(&approved(client("n1", 0))).as_deref(), Some("n1"), "approved");
    let serving = serving("n1", &Request::node("n1").dns("n1.example.com").pem());
    assert_eq!(client_node(&serving), None, "another signer");
    assert_eq!(client_node(&Submission { request: b"garbage".to_vec(), ..client("n1", 0) }), None, "unreadable");
}

/// An approval whose write got no answer is counted at once, the CSR itself among them: it does not
/// hold itself when it is decided again, and still holds every other.
#[test]
fn a_csr_is_not_held_by_its_own_approval() {
    let with = |issued: &[&str]| {
        let mut evidence = evidence(vec![n1_machine(None)]);
        evidence.client_certificates = Some(Ok(issued.iter().map(|name| (*name).to_owned()).collect()));
        let evaluation =
            case("approved once", client("n1", 60), evidence, (DecisionKind::Approve, Reason::AutoApproved)).evaluate();
        (evaluation.decision.kind, evaluation.decision.reason, evaluation.decision.message)
    };
    let (kind, reason, _) = with(&["client-n1"]);
    assert_eq!((kind, reason), (DecisionKind::Approve, Reason::AutoApproved));
    let (kind, reason, message) = with(&["client-n1", "other"]);
    assert_eq!((kind, reason), (DecisionKind::Hold, Reason::ClientCertificateIssued));
    assert!(message.contains(r#"approved client CSR "other""#), "{message}");
    let (kind, reason, message) = with(&["a-earlier", "client-n1"]);
    assert_eq!((kind, reason), (DecisionKind::Hold, Reason::ClientCertificateIssued));
    assert!(message.contains(r#"approved client CSR "a-earlier""#), "{message}");
}
