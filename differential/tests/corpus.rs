//! The named corpus against Go's own reader: every attack shape is refused, every canonical
//! request is approved with Go reading exactly what the approver reports, and nothing the approver
//! accepts is read differently by Go.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use differential::{Expect, Input, Judge, Seeds, corpus};

#[test]
fn every_corpus_entry_is_refused_or_read_by_go_exactly_as_we_read_it() {
    let seeds = Seeds::new().unwrap();
    let mut judge = Judge::start().expect("the Go oracle starts (scripts/build-tools.sh builds it)");
    let entries = corpus(&seeds);
    assert!(entries.len() > 40, "the corpus lost entries: {}", entries.len());
    for entry in entries {
        let input = Input { request: entry.request.clone(), mutations: vec![entry.name] };
        let verdict = judge.judge(&input).unwrap();
        assert!(verdict.disagreement.is_none(), "{}: {:?}", entry.name, verdict.disagreement);
        match entry.expect {
            Expect::Approve => assert!(verdict.approved && verdict.go_accepted, "{}: {verdict:?}", entry.name),
            Expect::Refuse => assert!(!verdict.ours_accepted && !verdict.approved, "{}: {verdict:?}", entry.name),
            Expect::Deny => assert!(verdict.ours_accepted && !verdict.approved, "{}: {verdict:?}", entry.name),
        }
    }
}

#[test]
fn the_finding_is_real_go_reads_another_node_where_we_refuse() {
    let seeds = Seeds::new().unwrap();
    let mut oracle = testenv::Oracle::start().unwrap();
    let entry = corpus(&seeds).into_iter().find(|e| e.name.starts_with("end and begin on one line")).unwrap();
    let go = oracle.read(&entry.request).unwrap();
    assert!(go.ok, "{go:?}");
    assert_eq!(go.common_name, "system:node:n2");
    assert!(go.dns_names.iter().any(|n| n == "kubernetes.default.svc"), "{go:?}");
    let ours = node_csr_approver_core::csr::CsrFacts::from_pem(&entry.request);
    assert!(ours.is_err(), "{ours:?}");
}
