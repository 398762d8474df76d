//! Table-driven tests of the serving policy: real PKCS#10 requests made with rcgen, one case per
//! check and reason code (the table is in `policy_cases/`), plus known attack shapes (forged names,
//! smuggled SANs, look-alike addresses).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod policy_cases;
mod support;

use std::collections::BTreeSet;

use node_csr_approver_core::policy::{
    AddressClaim, ApiserverAddresses, CONTROL_PLANE_LABEL, DecisionKind, DnsFailure, Evidence, Outcome, PolicyConfig,
    Reason, Resolution, decide,
};
use policy_cases::{case, cases, good, good_csr};
use support::table::assert_all;
use support::{Request, config, minutes_after_creation, serving};

use DecisionKind::{Approve, Deny, Retry};

#[test]
fn every_case_decides_as_expected() {
    assert_all(&cases());
}

#[test]
fn every_reason_code_is_produced() {
    let produced: BTreeSet<Reason> = cases().iter().map(|case| case.evaluate().decision.reason).collect();
    let missing: Vec<&str> = Reason::ALL
        .iter()
        .filter(|r| !produced.contains(r) && !r.meaning().starts_with("Machine mode"))
        .map(|r| r.as_str())
        .collect();
    assert!(missing.is_empty(), "no case produces {missing:?}");
}

#[test]
fn a_denial_names_the_offending_value() {
    let sub = serving("a", &Request::node("a").dns("auth.evil.io").pem());
    let evaluation = decide(&sub, &config(), &Evidence::default(), minutes_after_creation(1));
    assert_eq!(evaluation.decision.kind, Deny);
    assert!(evaluation.decision.message.contains("auth.evil.io"), "{}", evaluation.decision.message);
    // An address outside the prefixes is named together with the prefixes it missed.
    let outside = decide(
        &serving("n1", &good().ip("192.168.1.10").pem()),
        &config(),
        &Evidence::default(),
        minutes_after_creation(1),
    );
    let message = &outside.decision.message;
    assert!(message.contains("192.168.1.10") && message.contains("10.0.0.0/16,fd00::/64"), "{message}");
}

#[test]
fn an_approval_reports_every_check_passed_or_deliberately_skipped() {
    let evidence = Evidence {
        apiserver: Some(Ok(ApiserverAddresses::default())),
        serving_csrs: Some(Ok(Vec::new())),
        ..Evidence::default()
    };
    let evaluation = decide(&good_csr(), &config(), &evidence, minutes_after_creation(1));
    assert_eq!(evaluation.decision.kind, Approve);
    for row in &evaluation.checks {
        match &row.outcome {
            Outcome::Pass(_) => {}
            Outcome::Skip(why) => assert!(why.contains("--"), "{:?} skipped without a flag: {why}", row.check),
            Outcome::Fail(failure) => panic!("{:?} failed in an approval: {}", row.check, failure.message),
        }
    }
}

#[test]
fn forged_requests_are_not_looked_up_in_dns() {
    let cfg = PolicyConfig { bypass_dns_resolution: false, ..config() };
    let sub = serving("a", &Request::node("a").dns("auth.evil.io").pem());
    let evaluation = decide(&sub, &cfg, &Evidence::default(), minutes_after_creation(1));
    let dns_row = evaluation.checks.iter().find(|r| r.check.as_str() == "dns-resolves").unwrap();
    assert!(matches!(dns_row.outcome, Outcome::Skip(_)), "{:?}", dns_row.outcome);
}

#[test]
fn the_ip_san_check_waits_for_every_dns_san_to_resolve() {
    // Unavailable, or not found yet: either leaves the resolved set incomplete, so the IP SAN check
    // is skipped rather than judged against part of the answers.
    let unanswered = [Resolution::Unavailable(DnsFailure::Timeout), Resolution::NotFound];
    for answer in unanswered {
        let evaluation = case("incomplete answers", good_csr(), (Retry, Reason::DNSUnavailable))
            .dns(&[("n1.nodes.example.com", answer.clone())])
            .evaluate();
        let row = evaluation.checks.iter().find(|r| r.check.as_str() == "ip-resolved").unwrap();
        match &row.outcome {
            Outcome::Skip(why) => assert!(why.contains("every DNS SAN resolved"), "{answer:?}: {why}"),
            other => panic!("{answer:?}: ip-resolved was evaluated: {other:?}"),
        }
    }
}

#[test]
fn the_reason_table_lists_every_reason_code_and_no_other() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reason-codes.md")).unwrap();
    let table = readme.split("<!-- reasons -->").nth(1).unwrap().split("<!-- end -->").next().unwrap();
    let listed: BTreeSet<&str> =
        table.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
    let codes: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(listed, codes);
}

#[test]
fn a_cluster_identity_denial_names_the_offending_san() {
    let named = |sub, evidence: &Evidence| {
        let evaluation = decide(&sub, &config(), evidence, minutes_after_creation(1));
        assert_eq!(evaluation.decision.reason, Reason::ClusterIdentity);
        evaluation.decision.message
    };
    let none = Evidence { apiserver: Some(Ok(ApiserverAddresses::default())), ..Evidence::default() };
    let name = named(serving("n1", &Request::node("n1").dns("Kubernetes.Default.Svc.").pem()), &none);
    assert!(name.contains("\"kubernetes.default.svc\""), "{name}");
    let address = named(serving("n1", &good().ip("169.254.169.254").pem()), &none);
    assert!(address.contains("169.254.169.254") && address.contains("link-local"), "{address}");
    let service = ApiserverAddresses { service: vec!["10.0.0.11".parse().unwrap()], endpoints: Vec::new() };
    let apiserver = Evidence { apiserver: Some(Ok(service)), ..Evidence::default() };
    let service = named(good_csr(), &apiserver);
    assert!(service.contains("10.0.0.11") && service.contains("default/kubernetes"), "{service}");
    // An advertise address: the denial names the address and who claims it.
    let ip = "10.0.0.11".parse().unwrap();
    let claimed = |nodes: &[&str]| Evidence {
        apiserver: Some(Ok(ApiserverAddresses { service: Vec::new(), endpoints: vec![ip] })),
        address_claims: Some(Ok(vec![AddressClaim {
            ip,
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            control_plane: Vec::new(),
        }])),
        ..Evidence::default()
    };
    let other = named(good_csr(), &claimed(&["cp-1"]));
    assert!(other.contains("10.0.0.11") && other.contains("advertise") && other.contains("\"cp-1\""), "{other}");
    assert!(other.contains("not node \"n1\"'s own"), "{other}");
    // Claimed by more than the node, and nothing a kubelet cannot write tells whose: retried.
    let ambiguous = decide(&good_csr(), &config(), &claimed(&["n1", "n2"]), minutes_after_creation(1)).decision;
    assert_eq!((ambiguous.kind, ambiguous.reason), (DecisionKind::Retry, Reason::AdvertiseAddressContested));
    let ambiguous = ambiguous.message;
    assert!(ambiguous.contains("10.0.0.11") && ambiguous.contains("more than node \"n1\""), "{ambiguous}");
    assert!(ambiguous.contains("\"n2\"") && ambiguous.contains(CONTROL_PLANE_LABEL), "{ambiguous}");
    let approved = decide(&good_csr(), &config(), &claimed(&["n1"]), minutes_after_creation(1));
    let row = approved.checks.iter().find(|c| c.check.as_str() == "apiserver-addresses").unwrap();
    assert!(format!("{:?}", row.outcome).contains("10.0.0.11"), "{row:?}");
}

#[test]
fn a_group_denial_names_the_missing_group() {
    for (groups, missing) in [
        (vec!["system:nodes"], r#"do not contain ["system:authenticated"]"#),
        (vec!["system:authenticated"], r#"do not contain ["system:nodes"]"#),
        (vec![], r#"do not contain ["system:nodes", "system:authenticated"]"#),
    ] {
        let mut sub = good_csr();
        sub.groups = groups.iter().map(|g| (*g).to_owned()).collect();
        let evaluation = decide(&sub, &config(), &Evidence::default(), minutes_after_creation(1));
        assert_eq!(evaluation.decision.reason, Reason::NotInNodesGroup, "{groups:?}");
        assert!(evaluation.decision.message.contains(missing), "{groups:?}: {}", evaluation.decision.message);
    }
}

/// Strict hostname binding binds a prefix of labels, so node `a.b` passes it for `a.b.example.com`;
/// the provider regex, pinned to the node domain, is what denies the name.
#[test]
fn a_dotted_node_name_is_held_to_the_node_domain_by_the_regex() {
    let sub = serving("a.b", &Request::node("a.b").dns("a.b.example.com").pem());
    let evaluation = decide(&sub, &config(), &Evidence::default(), minutes_after_creation(1));
    let hostname = evaluation.checks.iter().find(|r| r.check.as_str() == "hostname").unwrap();
    assert!(matches!(hostname.outcome, Outcome::Pass(_)), "{:?}", hostname.outcome);
    assert_eq!((evaluation.decision.kind, evaluation.decision.reason), (Deny, Reason::RegexMismatch));
    let message = &evaluation.decision.message;
    assert!(message.contains("a.b.example.com") && message.contains("--provider-regex"), "{message}");
}
