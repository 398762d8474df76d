//! The pending brake's count: which CSRs count (time window with clock skew, handled signers,
//! node requesters) and the per-node cap, so one node or a skewed clock cannot pull the brake.

use jiff::{SignedDuration, Timestamp};
use node_csr_approver::policy::{
    MachinePolicy, PENDING_PER_NODE, Submission, capped_pending, counts_as_pending, pending_count, pending_node,
};

use super::{BOOTSTRAPPER, client, rules};
use crate::support::{Request, serving};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// When [`serving`] and [`client`]`(_, 0)` were created.
fn created() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

/// `sub` as seen `seconds` after its creation.
fn counts_after(sub: &Submission, rules: &MachinePolicy, seconds: i64) -> bool {
    counts_as_pending(sub, rules, created() + SignedDuration::from_secs(seconds))
}

fn serving_of(node: &str) -> Submission {
    serving(node, &Request::node(node).dns(&format!("{node}.example.com")).pem())
}

#[test]
fn a_csr_counts_from_an_hour_before_now_to_ten_seconds_after_it() {
    for sub in [serving_of("n1"), client("n1", 0)] {
        assert!(counts_after(&sub, &rules(), 0), "{}", sub.name);
        assert!(counts_after(&sub, &rules(), 3599), "{}: younger than an hour", sub.name);
        assert!(!counts_after(&sub, &rules(), 3600), "{}: an hour old", sub.name);
        assert!(counts_after(&sub, &rules(), -10), "{}: stamped 10 s ahead of this clock", sub.name);
        assert!(!counts_after(&sub, &rules(), -11), "{}: stamped 11 s ahead", sub.name);
        let undated = Submission { created: None, ..sub.clone() };
        assert!(!counts_after(&undated, &rules(), 0), "{}: no creation time", sub.name);
        let decided = Submission { decided: Some("condition Approved is present".into()), ..sub.clone() };
        assert!(!counts_after(&decided, &rules(), 0), "{}: decided", sub.name);
    }
}

#[test]
fn only_signers_this_approver_decides_count() {
    let no_client_approval = MachinePolicy { client_approval: false, ..rules() };
    assert!(counts_after(&serving_of("n1"), &no_client_approval, 0), "serving is always decided");
    assert!(!counts_after(&client("n1", 0), &no_client_approval, 0), "client CSRs are not decided");
    assert!(counts_after(&client("n1", 0), &rules(), 0));
    let other = Submission { signer_name: "example.com/other".into(), ..serving_of("n1") };
    assert!(!counts_after(&other, &rules(), 0), "another signer");
    let renewal = Submission { signer_name: CLIENT_SIGNER.into(), ..serving_of("n1") };
    assert!(counts_after(&renewal, &rules(), 0), "a node's client renewal");
}

#[test]
fn only_csrs_from_nodes_or_the_bootstrapper_count() {
    let stranger =
        Submission { username: "alice".into(), groups: vec!["system:authenticated".into()], ..serving_of("n1") };
    assert!(!counts_after(&stranger, &rules(), 0), "neither a node nor the bootstrapper");
    let in_nodes_group = Submission { username: "alice".into(), ..serving_of("n1") };
    assert!(counts_after(&in_nodes_group, &rules(), 0), "system:nodes in the groups");
    let bootstrap_without_nodes_group = client("n1", 0);
    assert!(!bootstrap_without_nodes_group.groups.iter().any(|g| g == "system:nodes"));
    assert!(counts_after(&bootstrap_without_nodes_group, &rules(), 0), "the bootstrapper");
    let not_the_bootstrapper = Submission { username: format!("{BOOTSTRAPPER}-2"), ..client("n1", 0) };
    assert!(!counts_after(&not_the_bootstrapper, &rules(), 0), "another service account");
}

#[test]
fn a_node_csr_counts_under_its_username_and_a_bootstrap_csr_under_its_common_name() {
    assert_eq!(pending_node(&serving_of("n1"), &rules()), "system:node:n1");
    let claims_n2 = serving("n1", &Request::node("n2").pem());
    assert_eq!(pending_node(&claims_n2, &rules()), "system:node:n1", "a node's own CN is not trusted");
    assert_eq!(pending_node(&client("n7", 0), &rules()), "system:node:n7");
    let unreadable = Submission { request: b"garbage".to_vec(), ..client("n7", 0) };
    assert_eq!(pending_node(&unreadable, &rules()), BOOTSTRAPPER);
}

#[test]
fn one_node_name_counts_at_most_a_few_times() {
    assert_eq!(PENDING_PER_NODE, 3);
    assert_eq!(capped_pending(Vec::<String>::new()), 0);
    assert_eq!(capped_pending(["a", "a", "a"]), 3);
    assert_eq!(capped_pending(["a"; 50]), 3);
    assert_eq!(capped_pending(["a", "b", "a", "c", "a", "a", "b"]), 6);
}

#[test]
fn the_count_caps_each_node_and_skips_what_does_not_count() {
    let mut csrs: Vec<Submission> = (0..20).map(|_| serving_of("noisy")).collect();
    csrs.extend((1..=4).map(|n| client(&format!("new{n}"), 0)));
    csrs.push(Submission { username: "alice".into(), groups: Vec::new(), ..serving_of("x") });
    csrs.push(Submission { created: None, ..serving_of("undated") });
    assert_eq!(pending_count(&csrs, &rules(), created()), 3 + 4);
}
