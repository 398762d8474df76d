//! Reads one input both ways and says whether the readings may differ.
//!
//! The rule: whenever the approver's parser accepts, Go (the apiserver and the signer) accepts too
//! and reads the same subject and SANs; whenever the policy approves, the certificate Go would sign
//! names exactly what the approver's report lists. Two exceptions are not disagreements: an
//! IPv4-mapped IP SAN, which both read but Go writes as IPv4 (compared as Go writes it; the policy
//! denies it), and a URI SAN that Go's URL parser refuses (the policy denies every URI SAN). Several
//! O values are compared as a multiset: the certificate writes them as one DER-sorted SET (the
//! policy approves exactly one O).

use std::net::IpAddr;

use node_csr_approver_core::csr::CsrFacts;
use node_csr_approver_core::policy::PolicyConfig;
use node_csr_approver_core::policy::{ApiserverAddresses, DecisionKind, Evidence, Submission, decide};
use testenv::{GoView, Oracle};

use crate::mutate::Input;
use crate::seeds::NODE;

/// What both readers made of one input.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The approver's parser accepted it.
    pub ours_accepted: bool,
    /// Go accepted it.
    pub go_accepted: bool,
    /// The approver's policy approved it.
    pub approved: bool,
    /// Why the readings differ, if they do.
    pub disagreement: Option<Disagreement>,
}

/// An input the two readers read differently.
#[derive(Debug, Clone)]
pub struct Disagreement {
    /// The input.
    pub input: Input,
    /// What differs.
    pub what: String,
}

/// Counts over a campaign.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Inputs tried.
    pub tried: u64,
    /// Inputs the approver's parser accepted.
    pub ours_accepted: u64,
    /// Inputs Go accepted.
    pub go_accepted: u64,
    /// Inputs the policy approved.
    pub approved: u64,
    /// Inputs Go accepted and the approver refused (the approver is stricter).
    pub only_go_accepted: u64,
    /// Disagreements found.
    pub disagreements: u64,
}

impl Tally {
    /// Adds one verdict.
    pub fn add(&mut self, verdict: &Verdict) {
        self.tried += 1;
        self.ours_accepted += u64::from(verdict.ours_accepted);
        self.go_accepted += u64::from(verdict.go_accepted);
        self.approved += u64::from(verdict.approved);
        self.only_go_accepted += u64::from(verdict.go_accepted && !verdict.ours_accepted);
        self.disagreements += u64::from(verdict.disagreement.is_some());
    }
}

/// Compares the approver with the Go oracle under a permissive serving policy for node [`NODE`], so
/// that every mutation that keeps a request meaningful is approved and its certificate checked.
pub struct Judge {
    oracle: Oracle,
    policy: PolicyConfig,
}

impl Judge {
    /// Starts the Go oracle.
    pub fn start() -> Result<Judge, testenv::Error> {
        Ok(Judge { oracle: Oracle::start()?, policy: permissive_policy() })
    }

    /// Reads `input` both ways.
    pub fn judge(&mut self, input: &Input) -> Result<Verdict, testenv::Error> {
        let go = self.oracle.read(&input.request)?;
        let ours = CsrFacts::from_pem(&input.request);
        // The apiserver has no addresses and the node no other serving CSR here: only the reading
        // of the request decides.
        let evidence = Evidence {
            apiserver: Some(Ok(ApiserverAddresses::default())),
            serving_csrs: Some(Ok(Vec::new())),
            ..Evidence::default()
        };
        let evaluation = decide(&submission(&input.request), &self.policy, &evidence, jiff::Timestamp::now());
        let approved = evaluation.decision.kind == DecisionKind::Approve;
        let mut what = ours.as_ref().ok().and_then(|facts| parser_difference(facts, &go));
        if approved && what.is_none() {
            what = match evaluation.request.as_deref() {
                Some(report) => certificate_difference(report, &go),
                None => Some("approved without a request in the report".into()),
            };
        }
        Ok(Verdict {
            ours_accepted: ours.is_ok(),
            go_accepted: go.ok,
            approved,
            disagreement: what.map(|what| Disagreement { input: input.clone(), what }),
        })
    }
}

/// Where the parsers differ on a request ours accepted.
fn parser_difference(ours: &CsrFacts, go: &GoView) -> Option<String> {
    if !go.ok {
        if !ours.uris.is_empty() {
            return None;
        }
        return Some(format!("we read {ours:?}; Go refuses it at {:?}: {:?}", go.stage, go.error));
    }
    let as_go_writes: Vec<IpAddr> = ours.ip_addresses.iter().map(IpAddr::to_canonical).collect();
    let fields = [
        ("CN", ours.common_names == go.common_names),
        ("O", sorted(&ours.organizations) == sorted(&go.organizations)),
        ("DNS", ours.dns_names == go.dns_names),
        ("IP", as_go_writes == go.ip_addresses),
        ("email", ours.emails == go.emails),
        ("URI", ours.uris == go.uris),
    ];
    let differing: Vec<&str> = fields.iter().filter(|(_, same)| !same).map(|(name, _)| *name).collect();
    (!differing.is_empty()).then(|| format!("{differing:?} differ: we read {ours:?}, Go reads {go:?}"))
}

/// The certificate holds every O value in one RDN, a SET that DER sorts: compare as a multiset.
fn sorted(values: &[String]) -> Vec<&String> {
    let mut sorted: Vec<&String> = values.iter().collect();
    sorted.sort();
    sorted
}

/// Where an approved request's certificate would differ from the report.
fn certificate_difference(report: &CsrFacts, go: &GoView) -> Option<String> {
    let same = go.ok
        && report.common_names.len() == 1
        && go.common_name == report.common_names[0]
        && go.common_names == report.common_names
        && go.organizations == report.organizations
        && go.dns_names == report.dns_names
        && go.ip_addresses == report.ip_addresses
        && go.emails.is_empty()
        && go.uris.is_empty();
    (!same).then(|| format!("approved {report:?}, but Go would sign {go:?}"))
}

/// A pending kubelet-serving CSR of node [`NODE`] carrying `request`.
fn submission(request: &[u8]) -> Submission {
    Submission {
        name: "differential".into(),
        created: Some(jiff::Timestamp::now()),
        signer_name: "kubernetes.io/kubelet-serving".into(),
        username: format!("system:node:{NODE}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: vec!["digital signature".into(), "server auth".into()],
        request: request.to_vec(),
        ..Submission::default()
    }
}

/// Every name bound to the node and every address allowed, DNS not consulted: only the reading of
/// the request decides.
fn permissive_policy() -> PolicyConfig {
    PolicyConfig {
        provider_regex: regex::Regex::new(r"^[a-z0-9.-]+$").unwrap_or_else(|_| unreachable!("a valid regex")),
        ip_prefixes: vec![ipnet::IpNet::V4(ipnet::Ipv4Net::default()), ipnet::IpNet::V6(ipnet::Ipv6Net::default())],
        allowed_dns_names: 1000,
        allowed_ip_addresses: 1000,
        ..testkit::policy::config()
    }
}
