//! Machine mode's node-client bootstrap checks for
//! `kubernetes.io/kube-apiserver-client-kubelet` CSRs. A failing rule holds the CSR for a human;
//! client CSRs are never denied.

use std::collections::BTreeSet;

use crate::csr::CsrFacts;

use super::evidence::{Evidence, EvidenceNeeded, Lookup};
use super::identity::{self, NODE_USER_PREFIX, NODES_GROUP};
use super::machine_checks;
use super::one_client_certificate;
use super::ports::{MachineInfo, NodeInfo};
use super::report::{CheckId, Failure, Report};
use super::rules::MachinePolicy;
use super::{Reason, Submission};

const USAGES_RSA: [&str; 3] = ["client auth", "digital signature", "key encipherment"];
const USAGES_ECDSA: [&str; 2] = ["client auth", "digital signature"];

/// A client CSR whose static checks have run.
#[derive(Debug)]
pub(crate) struct ClientChecks {
    report: Report,
    node: Option<String>,
    facts: Option<CsrFacts>,
}

/// Who asks for a client certificate, as far as machine mode is concerned.
#[derive(Debug)]
pub(crate) enum Requester {
    /// Not the bootstrapper (a node's own renewal, or someone else): not ours to decide.
    NotOurs(Failure),
    /// The bootstrapper's username; the result of the check that its groups are exactly the
    /// configured ones.
    Bootstrapper(Result<String, Failure>),
}

/// The identity check of a client CSR.
pub(crate) fn requester(sub: &Submission, cfg: &MachinePolicy) -> Requester {
    if !cfg.bootstrapper.matches(&sub.username) {
        return Requester::NotOurs(if sub.username.starts_with(NODE_USER_PREFIX) {
            Failure::ignore(Reason::NodeClientRenewal, format!("{} renews its own client certificate", sub.username))
        } else {
            Failure::ignore(Reason::NotBootstrapper, format!("username {:?} is not the bootstrapper", sub.username))
        });
    }
    let groups: BTreeSet<String> = sub.groups.iter().cloned().collect();
    Requester::Bootstrapper(if groups == cfg.bootstrapper_groups {
        Ok(format!("{} with its groups", sub.username))
    } else {
        Err(Failure::deny(
            Reason::BootstrapperGroupsMismatch,
            format!("groups {:?} are not exactly {:?}", sub.groups, cfg.bootstrapper_groups),
        ))
    })
}

/// Runs the checks that need no evidence.
pub(crate) fn stage(sub: &Submission, groups: Result<String, Failure>) -> ClientChecks {
    let mut report = Report::default();
    report.record(CheckId::Bootstrapper, groups);
    let facts = CsrFacts::from_pem(&sub.request).map_err(|e| Failure::deny(Reason::MalformedRequest, e.to_string()));
    report.record(
        CheckId::Request,
        facts.as_ref().map(|_| "parsed, signature verified".to_owned()).map_err(Clone::clone),
    );
    let Ok(facts) = facts else {
        for check in [CheckId::Subject, CheckId::NoSans, CheckId::Usages] {
            report.skip(check, "needs a parsed request");
        }
        return ClientChecks { report, node: None, facts: None };
    };
    let node = subject(&facts);
    report.record(CheckId::Subject, node.clone().map(|n| format!("CN=system:node:{n}, O={NODES_GROUP}")));
    report.record(CheckId::NoSans, no_sans(&facts));
    report.record(CheckId::Usages, usages(&sub.usages));
    ClientChecks { report, node: node.ok(), facts: Some(facts) }
}

impl ClientChecks {
    /// What the request asks for, when it was read.
    pub(crate) fn facts(&self) -> Option<&CsrFacts> {
        self.facts.as_ref()
    }

    /// The evidence still needed, or `None` when a check has already failed.
    pub(crate) fn needs(&self) -> Option<EvidenceNeeded> {
        let node = self.node.as_ref()?;
        if self.report.first_failure().is_some() {
            return None;
        }
        Some(EvidenceNeeded {
            dns_names: Vec::new(),
            node: Some(node.clone()),
            machines: true,
            apiserver: Vec::new(),
            client_certificates: Some(node.clone()),
            kubelet_certificate: None,
            serving_csrs: None,
        })
    }

    /// Runs the evidence checks (skipped when `evidence` is `None`) and returns the full report.
    pub(crate) fn finish(self, sub: &Submission, cfg: &MachinePolicy, evidence: Option<&Evidence>) -> Report {
        let ClientChecks { mut report, node, .. } = self;
        let (Some(node), Some(evidence)) = (node, evidence) else {
            for check in [
                CheckId::NodeAbsent,
                CheckId::MachineMatch,
                CheckId::MachineUnclaimed,
                CheckId::CreationWindow,
                CheckId::OneClientCertificate,
                CheckId::PendingBrake,
            ] {
                report.skip(check, "not looked up: an earlier check failed");
            }
            return report;
        };
        report.record(CheckId::NodeAbsent, node_absent(&node, &evidence.node));
        let machine = machine_checks::machines(&evidence.machines)
            .and_then(|machines| machine_checks::machine_named(machines, &node));
        report
            .record(CheckId::MachineMatch, machine.as_ref().map(|m| format!("Machine {}", m.id)).map_err(Clone::clone));
        match machine {
            Ok(machine) => {
                report.record(
                    CheckId::MachineUnclaimed,
                    match &machine.node_ref {
                        None => Ok(format!("Machine {} has no nodeRef", machine.id)),
                        Some(taken) => Err(Failure::deny(
                            Reason::MachineAlreadyHasNode,
                            format!("Machine {} already has nodeRef {taken:?}", machine.id),
                        )),
                    },
                );
                report.record(CheckId::CreationWindow, creation_window(sub, machine));
            }
            Err(_) => {
                report.skip(CheckId::MachineUnclaimed, "no Machine");
                report.skip(CheckId::CreationWindow, "no Machine");
            }
        }
        report.record(
            CheckId::OneClientCertificate,
            one_client_certificate::check(&evidence.client_certificates, &node, &sub.name),
        );
        report.record(CheckId::PendingBrake, machine_checks::pending_brake(&evidence.load, cfg));
        report
    }
}

/// O exactly `[system:nodes]` and CN `system:node:<name>` with a non-empty name.
fn subject(facts: &CsrFacts) -> Result<String, Failure> {
    if facts.organizations != [NODES_GROUP] {
        return Err(Failure::deny(
            Reason::SubjectMismatch,
            format!("subject O {:?} is not exactly [{NODES_GROUP:?}]", facts.organizations),
        ));
    }
    match facts.common_names.as_slice() {
        [cn] => match cn.strip_prefix(NODE_USER_PREFIX) {
            Some(name) if !name.is_empty() => match identity::problem(name) {
                None => Ok(name.to_owned()),
                Some(problem) => Err(Failure::deny(Reason::InvalidNodeName, format!("subject CN {cn:?}: {problem}"))),
            },
            _ => Err(Failure::deny(Reason::SubjectMismatch, format!("subject CN {cn:?} is not system:node:<name>"))),
        },
        cns => Err(Failure::deny(Reason::SubjectMismatch, format!("subject CN {cns:?} is not exactly one value"))),
    }
}

fn no_sans(facts: &CsrFacts) -> Result<String, Failure> {
    let count = facts.dns_names.len()
        + facts.ip_addresses.len()
        + facts.emails.len()
        + facts.uris.len()
        + facts.other_sans.len();
    if count == 0 {
        Ok("no SANs".into())
    } else {
        Err(Failure::deny(
            Reason::ClientSANsPresent,
            format!(
                "a node-client CSR must carry no SANs; it has {count}: DNS {:?}, IP {:?}",
                facts.dns_names, facts.ip_addresses
            ),
        ))
    }
}

fn usages(usages: &[String]) -> Result<String, Failure> {
    let set: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let allowed = [BTreeSet::from(USAGES_RSA), BTreeSet::from(USAGES_ECDSA)];
    if allowed.contains(&set) {
        Ok(format!("{usages:?}"))
    } else {
        Err(Failure::deny(
            Reason::UsagesNotAllowed,
            format!("usages {usages:?} are not exactly {USAGES_ECDSA:?} or {USAGES_RSA:?}"),
        ))
    }
}

fn node_absent(node: &str, lookup: &Option<Lookup<NodeInfo>>) -> Result<String, Failure> {
    match lookup {
        Some(Lookup::Missing) => Ok(format!("no Node {node:?} yet")),
        Some(Lookup::Found(_)) => {
            Err(Failure::deny(Reason::NodeAlreadyExists, format!("Node {node:?} already exists: not a bootstrap")))
        }
        Some(Lookup::Failed(error)) => {
            Err(Failure::retry(Reason::ClusterUnavailable, format!("cannot read Node {node:?}: {error}")))
        }
        None => Err(Failure::retry(Reason::ClusterUnavailable, format!("Node {node:?} was not looked up"))),
    }
}

fn creation_window(sub: &Submission, machine: &MachineInfo) -> Result<String, Failure> {
    let outside = |why: String| Failure::deny(Reason::CreatedOutsideMachineWindow, why);
    let (Some(created), Some(machine_created)) = (sub.created, machine.created) else {
        return Err(outside(format!("the CSR or Machine {} has no creationTimestamp", machine.id)));
    };
    if machine_checks::in_machine_window(created, machine_created) {
        Ok(format!("created {created}, Machine {} created {machine_created}", machine.id))
    } else {
        Err(outside(format!(
            "created {created}, outside 10s before to 2h after Machine {} was created ({machine_created})",
            machine.id
        )))
    }
}
