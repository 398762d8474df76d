//! The decision core: a pure function of the request, the rules and the gathered evidence.
//! No kube client and no sockets here; evidence arrives through the ports in [`ports`]
//! ([`Resolver`], [`ClusterView`]), which the I/O modules implement.

mod cluster_identity;
mod evidence;
mod identity;
mod kubelet_dial;
mod kubelet_serving;
mod machine_checks;
mod node_client;
mod one_client_certificate;
mod ports;
mod reason;
mod report;
mod reserved;
mod rule_checks;
mod rules;
mod superseded;
mod user_rules;

use std::time::Duration;

use jiff::Timestamp;

use crate::csr::CsrFacts;

pub use evidence::{Evidence, EvidenceNeeded, Lookup, gather};
pub use identity::{
    CLIENT_SIGNER as KUBELET_CLIENT_SIGNER, NODE_USER_PREFIX, NODES_GROUP, SERVING_SIGNER as KUBELET_SERVING_SIGNER,
    is_dns_subdomain,
};
pub use kubelet_dial::{KubeletDialRules, NotDialable, not_owned as kubelet_dial_not_owned};
pub use machine_checks::{
    AwaitedNodes, PENDING_PER_NODE, PendingFacts, PendingKey, brake_limit, capped_pending, counted_under,
    counts_as_pending, pending_count, pending_key, pending_key_of, same_dns_name, same_ip,
};
pub use one_client_certificate::{client_node, issued_client_node};
pub use ports::{
    AddressClaim, ApiserverAddresses, BrakeInputs, CONTROL_PLANE_LABEL, ClusterError, ClusterView, DnsFailure,
    KubeletCertificate, MachineInfo, NodeAddress, NodeInfo, RequestError, Resolution, Resolver, ServingCsr,
    ServingCsrState, Unlisted,
};
pub use reason::Reason;
pub use report::{CheckId, CheckResult, Consequence, Failure, Outcome};
pub use reserved::{ReservedKind, reserved_address};
pub use rule_checks::node_projection;
pub use rules::{Bootstrapper, HostnameMatch, MachinePolicy, PolicyConfig};
pub use superseded::serving_node;
pub use user_rules::{NotCompiled, RuleBound, RuleError, UserRule, UserRules, object_for_rules};

use node_client::Requester;
use report::Report;

/// A CSR object reduced to what the policy needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    /// metadata.name.
    pub name: String,
    /// metadata.creationTimestamp, if known.
    pub created: Option<Timestamp>,
    /// spec.signerName.
    pub signer_name: String,
    /// spec.username, as filled in by the apiserver.
    pub username: String,
    /// spec.groups.
    pub groups: Vec<String>,
    /// spec.usages.
    pub usages: Vec<String>,
    /// spec.expirationSeconds.
    pub expiration_seconds: Option<i32>,
    /// spec.request: the PEM-encoded PKCS#10 request.
    pub request: Vec<u8>,
    /// What already decided the CSR: an Approved or Denied condition, or an issued certificate.
    pub decided: Option<String>,
    /// Whether an Approved condition is present and no Denied or Failed one: the signer issues
    /// (or issued) its certificate.
    pub approved: bool,
}

/// What to do with a CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionKind {
    /// Write the Approved condition.
    Approve,
    /// Write the Denied condition.
    Deny,
    /// Fails a rule, but a human decides: no condition, an event says why.
    Hold,
    /// Not ours, or nothing to do.
    Ignore,
    /// A transient condition: evaluate again later.
    Retry,
}

impl DecisionKind {
    /// The lowercase name used in reports and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Approve => "approve",
            DecisionKind::Deny => "deny",
            DecisionKind::Hold => "hold",
            DecisionKind::Ignore => "ignore",
            DecisionKind::Retry => "retry",
        }
    }
}

/// The decision on one CSR with its reason code and a human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub kind: DecisionKind,
    /// Why: [`Reason::AutoApproved`] for approvals.
    pub reason: Reason,
    /// A message naming what was verified or the offending value.
    pub message: String,
}

/// A decision and the result of every check that led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The decision.
    pub decision: Decision,
    /// Every check, in order, with pass / fail / skip.
    pub checks: Vec<CheckResult>,
    /// What the request asks for, when it was read.
    pub request: Option<Box<CsrFacts>>,
}

/// Evaluates one CSR at time `now`: triage, the checks that need no evidence, then (only if those
/// pass) DNS and cluster lookups, then the checks on that evidence.
pub async fn evaluate<R: Resolver, C: ClusterView>(
    sub: &Submission,
    cfg: &PolicyConfig,
    resolver: &R,
    cluster: &C,
    now: Timestamp,
) -> Evaluation {
    evaluate_request(sub, None, cfg, resolver, cluster, now).await
}

/// Evaluates the subject and SANs a served certificate carries (`names`, read by
/// [`crate::csr::CertificateFacts`]) with every check a kubelet-serving CSR of `sub` asking for
/// exactly those names gets; `sub.request` is not read. What today's policy says of a certificate
/// issued before it.
pub async fn evaluate_names<R: Resolver, C: ClusterView>(
    sub: &Submission,
    names: &CsrFacts,
    cfg: &PolicyConfig,
    resolver: &R,
    cluster: &C,
    now: Timestamp,
) -> Evaluation {
    evaluate_request(sub, Some(names), cfg, resolver, cluster, now).await
}

async fn evaluate_request<R: Resolver, C: ClusterView>(
    sub: &Submission,
    names: Option<&CsrFacts>,
    cfg: &PolicyConfig,
    resolver: &R,
    cluster: &C,
    now: Timestamp,
) -> Evaluation {
    let (triage, staged) = match triage(sub, names, cfg) {
        Ok(ready) => ready,
        Err(done) => return done,
    };
    let evidence = match staged.needs(cfg) {
        Some(needs) => Some(gather(&needs, resolver, cluster).await),
        None => None,
    };
    finish(sub, cfg, triage, staged, evidence.as_ref(), now)
}

/// Decides on one CSR at time `now` from evidence already gathered: the pure core of [`evaluate`].
pub fn decide(sub: &Submission, cfg: &PolicyConfig, evidence: &Evidence, now: Timestamp) -> Evaluation {
    match triage(sub, None, cfg) {
        Ok((triage, staged)) => {
            let evidence = staged.needs(cfg).map(|_| evidence);
            finish(sub, cfg, triage, staged, evidence, now)
        }
        Err(done) => done,
    }
}

/// The checks of one signer that have run before evidence is gathered.
enum SignerChecks<'a> {
    Serving(Box<kubelet_serving::ServingChecks>),
    Client(Box<node_client::ClientChecks>, &'a MachinePolicy),
}

impl SignerChecks<'_> {
    fn needs(&self, cfg: &PolicyConfig) -> Option<EvidenceNeeded> {
        match self {
            SignerChecks::Serving(staged) => staged.needs(cfg),
            SignerChecks::Client(staged, _) => staged.needs(),
        }
    }

    fn facts(&self) -> Option<&CsrFacts> {
        match self {
            SignerChecks::Serving(staged) => staged.facts(),
            SignerChecks::Client(staged, _) => staged.facts(),
        }
    }
}

/// Signer, pending and (for client CSRs) identity checks, then the checks that need no evidence
/// (on `names` instead of the request, when given); `Err` when the CSR is not ours or already
/// decided.
fn triage<'a>(
    sub: &Submission,
    names: Option<&CsrFacts>,
    cfg: &'a PolicyConfig,
) -> Result<(Report, SignerChecks<'a>), Evaluation> {
    let mut triage = Report::default();
    let client_rules = cfg.machine.as_ref().filter(|m| m.client_approval);
    let handled = sub.signer_name == identity::SERVING_SIGNER
        || (sub.signer_name == identity::CLIENT_SIGNER && client_rules.is_some());
    if !handled {
        triage.record(
            CheckId::Signer,
            Err(Failure::ignore(Reason::SignerNotHandled, format!("signer {:?} is not handled", sub.signer_name))),
        );
        return Err(conclude(triage, cfg, sub));
    }
    triage.record(CheckId::Signer, Ok(sub.signer_name.clone()));
    if let Some(decided) = &sub.decided {
        triage.record(CheckId::Pending, Err(Failure::ignore(Reason::AlreadyDecided, decided.clone())));
        return Err(conclude(triage, cfg, sub));
    }
    triage.record(CheckId::Pending, Ok("no decision yet".into()));
    match client_rules.filter(|_| sub.signer_name == identity::CLIENT_SIGNER) {
        None => Ok((triage, SignerChecks::Serving(Box::new(kubelet_serving::stage(sub, names, cfg))))),
        Some(rules) => match node_client::requester(sub, rules) {
            Requester::Bootstrapper(groups) => {
                Ok((triage, SignerChecks::Client(Box::new(node_client::stage(sub, groups)), rules)))
            }
            Requester::NotOurs(not_ours) => {
                triage.record(CheckId::Bootstrapper, Err(not_ours));
                Err(conclude(triage, cfg, sub))
            }
        },
    }
}

fn finish(
    sub: &Submission,
    cfg: &PolicyConfig,
    mut triage: Report,
    staged: SignerChecks<'_>,
    evidence: Option<&Evidence>,
    now: Timestamp,
) -> Evaluation {
    let request = staged.facts().cloned().map(Box::new);
    let client = matches!(staged, SignerChecks::Client(..));
    let mut report = match staged {
        SignerChecks::Client(staged, rules) => (*staged).finish(sub, rules, evidence),
        SignerChecks::Serving(staged) => {
            let age = sub.created.map(|created| age_at(created, now));
            staged.finish(cfg, evidence, age, now)
        }
    };
    triage.rows.append(&mut report.rows);
    let rules = &cfg.user_rules;
    if let Some(facts) = request.as_deref().filter(|_| !rules.is_empty() && triage.first_failure().is_none()) {
        rule_checks::record(rules, rule_checks::RuleInputs::new(sub, facts, evidence, rules, client), &mut triage);
    }
    // Last: a CSR is superseded only once it passes every check of its own.
    if !client {
        match evidence.filter(|_| triage.first_failure().is_none()) {
            Some(evidence) => triage.record(CheckId::Superseded, superseded::check(&evidence.serving_csrs, sub)),
            None => triage.skip(CheckId::Superseded, "not looked up: an earlier check failed"),
        }
    }
    Evaluation { request, ..conclude(triage, cfg, sub) }
}

fn age_at(created: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(created)).unwrap_or(Duration::ZERO)
}

/// Turns a report into a decision: the first failure decides; none means approve. Client CSRs are
/// never denied: a failing rule holds them for a human.
fn conclude(report: Report, cfg: &PolicyConfig, sub: &Submission) -> Evaluation {
    let never_deny = cfg.skip_deny_step || sub.signer_name == identity::CLIENT_SIGNER;
    let decision = match report.first_failure() {
        Some(failure) => {
            let kind = match failure.consequence {
                Consequence::Deny if never_deny => DecisionKind::Hold,
                Consequence::Deny => DecisionKind::Deny,
                Consequence::Retry => DecisionKind::Retry,
                Consequence::Ignore => DecisionKind::Ignore,
            };
            Decision { kind, reason: failure.reason, message: failure.message.clone() }
        }
        None => Decision {
            kind: DecisionKind::Approve,
            reason: Reason::AutoApproved,
            message: approval_message(&report, sub),
        },
    };
    Evaluation { decision, checks: report.rows, request: None }
}

fn approval_message(report: &Report, sub: &Submission) -> String {
    let passed: Vec<&str> = report
        .rows
        .iter()
        .filter(|row| matches!(row.outcome, Outcome::Pass(_)))
        .map(|row| row.check.as_str())
        .collect();
    let what = if sub.signer_name == identity::CLIENT_SIGNER { "node-client bootstrap" } else { "kubelet serving" };
    let renewal = report.rows.iter().find_map(|row| match &row.outcome {
        Outcome::Pass(detail) if row.check == CheckId::KubeletRenewal => Some(format!("; {detail}")),
        _ => None,
    });
    format!("{what} certificate for {} verified: {}{}", sub.username, passed.join(", "), renewal.unwrap_or_default())
}
