//! End-to-end evaluations: the policy with the real hickory resolver asking a real DNS server on
//! loopback, and Nodes from the file-backed cluster view.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::kubernetes::cluster::StaticCluster;
use node_csr_approver::kubernetes::node_object::NodeObject;
use node_csr_approver::kubernetes::node_object::node_info;
use node_csr_approver::policy::{
    ApiserverAddresses, CONTROL_PLANE_LABEL, DecisionKind, Evaluation, NodeAddress, NodeInfo, PolicyConfig, Reason,
    Submission, UserRule, UserRules, evaluate,
};
use support::nodes::legit;
use support::{Request, config, minutes_after_creation, serving};
use testdns::{DnsServer, Records};

fn dns_config() -> PolicyConfig {
    PolicyConfig { bypass_dns_resolution: false, ..config() }
}

fn resolver(server: &DnsServer) -> HickoryResolver {
    HickoryResolver::new(Some(&[server.addr()]), Duration::from_millis(500)).unwrap()
}

async fn decide(server: &DnsServer, cfg: &PolicyConfig, sub: &Submission, age_minutes: i64) -> Evaluation {
    evaluate(sub, cfg, &resolver(server), &StaticCluster::default(), minutes_after_creation(age_minutes)).await
}

/// The legitimate serving CSR of node `n1` (10.0.0.11).
fn n1() -> Submission {
    serving("n1", &legit("n1", 11).pem())
}

fn kind_reason(evaluation: &Evaluation) -> (DecisionKind, Reason) {
    (evaluation.decision.kind, evaluation.decision.reason)
}

#[tokio::test]
async fn a_name_resolving_to_the_ip_san_is_approved() {
    let server = DnsServer::start(Records::new().a("n1.nodes.example.com", "10.0.0.11")).await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 1).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Approve, Reason::AutoApproved), "{evaluation:?}");
}

#[tokio::test]
async fn an_aaaa_record_outside_the_prefixes_is_denied() {
    let records = Records::new().a("n1.nodes.example.com", "10.0.0.11").aaaa("n1.nodes.example.com", "2001:db8::1");
    let server = DnsServer::start(records).await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 1).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Deny, Reason::ResolvedIPNotInPrefixes));
    assert!(evaluation.decision.message.contains("2001:db8::1"), "{}", evaluation.decision.message);
}

#[tokio::test]
async fn an_ip_san_the_name_does_not_resolve_to_is_denied() {
    let server = DnsServer::start(Records::new().a("n1.nodes.example.com", "10.0.0.99")).await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 1).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Deny, Reason::IPNotResolved));
}

#[tokio::test]
async fn a_name_that_appears_within_the_grace_period_is_approved() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let early = decide(&server, &dns_config(), &n1(), 1).await;
    assert_eq!(kind_reason(&early), (DecisionKind::Retry, Reason::DNSNotYetResolvable));
    server.add(Records::new().a("n1.nodes.example.com", "10.0.0.11")).unwrap();
    let later = decide(&server, &dns_config(), &n1(), 2).await;
    assert_eq!(kind_reason(&later), (DecisionKind::Approve, Reason::AutoApproved), "{later:?}");
}

#[tokio::test]
async fn a_name_that_never_resolves_is_denied_after_the_grace_period() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 6).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Deny, Reason::DNSNotResolved));
}

#[tokio::test]
async fn a_dns_server_that_never_answers_is_retried_never_denied() {
    let server = DnsServer::unresponsive().await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 600).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Retry, Reason::DNSUnavailable));
}

#[tokio::test]
async fn servfail_is_retried_never_denied() {
    let server = DnsServer::servfail().await.unwrap();
    let evaluation = decide(&server, &dns_config(), &n1(), 600).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Retry, Reason::DNSUnavailable));
}

#[tokio::test]
async fn a_forged_request_causes_no_dns_query() {
    let server = DnsServer::start(Records::new().a("auth.evil.io", "10.0.0.11")).await.unwrap();
    let forged = serving("a", &Request::node("a").dns("auth.evil.io").pem());
    let evaluation = decide(&server, &dns_config(), &forged, 1).await;
    assert_eq!(kind_reason(&evaluation), (DecisionKind::Deny, Reason::HostnameMismatch));
    assert_eq!(server.total_queries(), 0);
}

#[tokio::test]
async fn node_addresses_come_from_the_cluster_view() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let cfg = PolicyConfig { verify_node_addresses: true, ..config() };
    let node = NodeInfo {
        name: "n1".into(),
        addresses: vec![
            NodeAddress { kind: "InternalIP".into(), address: "10.0.0.11".into() },
            NodeAddress { kind: "Hostname".into(), address: "n1.nodes.example.com".into() },
        ],
        object: None,
    };
    let now = minutes_after_creation(1);
    let missing = evaluate(&n1(), &cfg, &resolver(&server), &StaticCluster::default(), now).await;
    assert_eq!(kind_reason(&missing), (DecisionKind::Retry, Reason::NodeNotFound));
    let present = evaluate(&n1(), &cfg, &resolver(&server), &StaticCluster::new([node], [], 0), now).await;
    assert_eq!(kind_reason(&present), (DecisionKind::Approve, Reason::AutoApproved), "{present:?}");
}

/// The claims on an apiserver's advertise address are gathered through the cluster view: only for
/// an IP SAN the EndpointSlices list, from the Nodes whose status lists it.
#[tokio::test]
async fn who_claims_an_advertise_address_comes_from_the_cluster_view() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let node = |name: &str, address: &str| NodeInfo {
        name: name.into(),
        addresses: vec![NodeAddress { kind: "InternalIP".into(), address: address.into() }],
        object: None,
    };
    let apiserver = |endpoints: &[&str]| ApiserverAddresses {
        service: vec!["10.0.0.1".parse().unwrap()],
        endpoints: endpoints.iter().map(|ip| ip.parse().unwrap()).collect(),
    };
    let now = minutes_after_creation(1);
    let decide = |cluster: StaticCluster| {
        let server = &server;
        async move { kind_reason(&evaluate(&n1(), &config(), &resolver(server), &cluster, now).await) }
    };
    let (approve, deny) =
        ((DecisionKind::Approve, Reason::AutoApproved), (DecisionKind::Deny, Reason::ClusterIdentity));
    let owned = StaticCluster::new([node("n1", "10.0.0.11")], [], 0).with_apiserver(apiserver(&["10.0.0.11"]));
    assert_eq!(decide(owned).await, approve);
    let unclaimed = StaticCluster::new([node("n1", "10.0.0.12")], [], 0).with_apiserver(apiserver(&["10.0.0.11"]));
    assert_eq!(decide(unclaimed).await, deny);
    let ambiguous = StaticCluster::new([node("n1", "10.0.0.11"), node("n2", " 10.0.0.11")], [], 0)
        .with_apiserver(apiserver(&["10.0.0.11"]));
    assert_eq!(decide(ambiguous).await, (DecisionKind::Retry, Reason::AdvertiseAddressContested));
    // The control-plane role label, which no kubelet can set, tells whose it is.
    let labels = serde_json::json!({"metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}});
    let control_plane = NodeInfo { object: Some(std::sync::Arc::new(labels)), ..node("n1", "10.0.0.11") };
    let told = StaticCluster::new([control_plane.clone(), node("n2", "10.0.0.11")], [], 0)
        .with_apiserver(apiserver(&["10.0.0.11"]));
    assert_eq!(decide(told).await, approve);
    let other = NodeInfo { name: "n2".into(), ..control_plane };
    let not_its = StaticCluster::new([node("n1", "10.0.0.11"), other], [], 0).with_apiserver(apiserver(&["10.0.0.11"]));
    assert_eq!(decide(not_its).await, deny);
    let elsewhere = StaticCluster::new([node("n2", "10.0.0.11")], [], 0).with_apiserver(apiserver(&["fd00::1"]));
    assert_eq!(decide(elsewhere).await, approve);
}

#[tokio::test]
async fn a_rule_reading_node_reads_the_node_from_the_cluster_view() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let rule = UserRule::compile("pool", "node.metadata.labels['pool'] == 'cpu'", "CPU pool only").unwrap();
    let cfg = PolicyConfig { user_rules: UserRules::new(vec![rule]).unwrap(), ..config() };
    let cluster = |pool: &str| {
        let node: NodeObject = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "n1", "labels": { "pool": pool }, "managedFields": [{ "manager": "kubelet" }] },
        }))
        .unwrap();
        let info = node_info(&node);
        assert_eq!(info.object.as_ref().unwrap()["metadata"].get("managedFields"), None);
        StaticCluster::new([info], [], 0)
    };
    let now = minutes_after_creation(1);
    let cpu = evaluate(&n1(), &cfg, &resolver(&server), &cluster("cpu"), now).await;
    assert_eq!(kind_reason(&cpu), (DecisionKind::Approve, Reason::AutoApproved), "{cpu:?}");
    let gpu = evaluate(&n1(), &cfg, &resolver(&server), &cluster("gpu"), now).await;
    assert_eq!(kind_reason(&gpu), (DecisionKind::Deny, Reason::RuleFailed));
    assert_eq!(gpu.decision.message, "rule \"pool\" failed: CPU pool only");
}
