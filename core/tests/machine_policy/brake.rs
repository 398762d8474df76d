//! The pending brake's count: which CSRs count (time window with clock skew, handled signers,
//! node requesters, bootstrap CSRs only for a node a Machine awaits) and the per-node cap, so one
//! node, the bootstrap credential or a skewed clock cannot pull the brake.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use node_csr_approver_core::policy::{
    AwaitedNodes, MachineInfo, MachinePolicy, PENDING_PER_NODE, PendingKey, Submission, capped_pending, client_node,
    counted_under, counts_as_pending, pending_count, pending_key, pending_key_of,
};

use super::{BOOTSTRAPPER, client, machine, n1_machine, rules};
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
fn a_node_csr_is_keyed_by_its_username_and_a_bootstrap_csr_by_the_node_it_asks_for() {
    let requester = |name: &str| PendingKey::Requester(name.to_owned());
    assert_eq!(pending_key(&serving_of("n1"), &rules()), requester("system:node:n1"));
    let claims_n2 = serving("n1", &Request::node("n2").pem());
    assert_eq!(pending_key(&claims_n2, &rules()), requester("system:node:n1"), "a node's own CN is not trusted");
    let renewal = Submission { username: "system:node:n1".into(), ..client("n7", 0) };
    assert_eq!(pending_key(&renewal, &rules()), requester("system:node:n1"), "a node's client renewal");
    assert_eq!(pending_key(&client("n7", 0), &rules()), PendingKey::Bootstrap("n7".into()));
}

#[test]
fn a_bootstrap_csr_that_can_never_be_approved_has_no_key() {
    let never = |sub: Submission| assert_eq!(pending_key(&sub, &rules()), PendingKey::Never, "{}", sub.name);
    never(Submission { name: "unreadable".into(), request: b"garbage".to_vec(), ..client("n7", 0) });
    never(Submission { name: "upper case".into(), ..client("N7", 0) });
    never(Submission { name: "trailing dot".into(), ..client("n7.", 0) });
    never(Submission { name: "empty name".into(), ..client("", 0) });
    let not_a_node = Request::node("n7").subject(&[(rcgen::DnType::CommonName, "n7")]).pem().into_bytes();
    never(Submission { name: "cn without system:node:".into(), request: not_a_node, ..client("n7", 0) });
    let serving_by_bootstrapper = Submission { username: BOOTSTRAPPER.into(), ..serving_of("n7") };
    never(Submission { name: "serving".into(), ..serving_by_bootstrapper });
}

#[test]
fn the_key_read_from_the_node_name_a_cache_keeps_is_the_key_read_from_the_request() {
    let subs = [
        serving_of("n1"),
        Submission { username: "system:node:n1".into(), ..client("n7", 0) },
        client("n7", 0),
        Submission { request: b"garbage".to_vec(), ..client("n7", 0) },
        client("N7", 0),
        client("n7.", 0),
        Submission { username: BOOTSTRAPPER.into(), ..serving_of("n7") },
    ];
    for sub in subs {
        let kept = client_node(&sub);
        assert_eq!(pending_key_of(&sub.username, kept.as_deref(), &rules()), pending_key(&sub, &rules()), "{sub:?}");
    }
    let never = pending_key_of(BOOTSTRAPPER, Some("N7"), &rules());
    assert_eq!(never, PendingKey::Never, "an invalid node name is never counted, however it was read");
}

/// The Machines: `n1`'s unclaimed (created at [`created`]), `n2`'s claimed by its node.
fn awaited() -> AwaitedNodes {
    let claimed = machine(&[("InternalDNS", "n2")], Some("n2"));
    let machines: Vec<Arc<MachineInfo>> = vec![n1_machine(None), claimed];
    AwaitedNodes::new(machines.iter().map(Arc::as_ref))
}

#[test]
fn a_bootstrap_csr_counts_only_for_a_node_an_unclaimed_machine_awaits_in_its_window() {
    let under = |node: &str, seconds: i64| {
        let key = PendingKey::Bootstrap(node.to_owned());
        counted_under(&key, Some(created() + SignedDuration::from_secs(seconds)), &awaited()).map(str::to_owned)
    };
    assert_eq!(under("n1", 60).as_deref(), Some("n1"), "an unclaimed Machine awaits n1");
    assert_eq!(under("made-up", 60), None, "a name no Machine carries");
    assert_eq!(under("n2", 60), None, "the Machine has its node already");
    assert_eq!(under("n1", -10).as_deref(), Some("n1"), "10 s before the Machine");
    assert_eq!(under("n1", -11), None, "11 s before the Machine");
    assert_eq!(under("n1", 7200).as_deref(), Some("n1"), "2 h after the Machine");
    assert_eq!(under("n1", 7201), None, "2 h and 1 s after the Machine");
    assert_eq!(counted_under(&PendingKey::Bootstrap("n1".into()), None, &awaited()), None, "no creation time");
    let requester = PendingKey::Requester("system:node:x".into());
    assert_eq!(counted_under(&requester, None, &AwaitedNodes::default()), Some("system:node:x"));
    assert_eq!(counted_under(&PendingKey::Never, Some(created()), &awaited()), None);
}

#[test]
fn a_machine_is_found_by_its_internal_dns_name_in_any_case_and_only_with_a_creation_time() {
    let spelled = [machine(&[("InternalDNS", "N1."), ("Hostname", "other")], None)];
    let spelled = AwaitedNodes::new(spelled.iter().map(Arc::as_ref));
    assert!(spelled.awaits("n1", Some(created())), "case and trailing dot are ignored");
    assert!(!spelled.awaits("other", Some(created())), "only InternalDNS names a node");
    let undated = Arc::new(MachineInfo { created: None, ..(*n1_machine(None)).clone() });
    assert!(!AwaitedNodes::new([undated.as_ref()]).awaits("n1", Some(created())), "no creation time");
}

#[test]
fn bootstrap_csrs_with_made_up_names_do_not_pull_the_brake() {
    let made_up: Vec<Submission> = (0..50).map(|n| client(&format!("made-up-{n}"), 60)).collect();
    assert_eq!(pending_count(&made_up, &rules(), &awaited(), created() + SignedDuration::from_mins(5)), 0);
    let for_n1: Vec<Submission> = (0..5).map(|_| client("n1", 60)).collect();
    assert_eq!(pending_count(&for_n1, &rules(), &awaited(), created() + SignedDuration::from_mins(5)), 3);
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
    csrs.extend((1..=4).map(|n| serving_of(&format!("new{n}"))));
    csrs.extend((0..4).map(|_| client("n1", 0)));
    csrs.push(client("made-up", 0));
    csrs.push(Submission { username: "alice".into(), groups: Vec::new(), ..serving_of("x") });
    csrs.push(Submission { created: None, ..serving_of("undated") });
    assert_eq!(pending_count(&csrs, &rules(), &awaited(), created()), 3 + 4 + 3);
}
