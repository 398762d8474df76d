//! The hickory-backed resolver against a real DNS server (testdns) on loopback.
// Test helpers outside #[test] functions unwrap too; clippy.toml only covers the tests.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::kubernetes::cluster::StaticCluster;
use node_csr_approver::metrics::{MeteredResolver, Metrics};
use node_csr_approver::policy::{DecisionKind, DnsFailure, PolicyConfig, Reason, Resolution, Resolver, evaluate};
use support::{Request, config, minutes_after_creation, serving};
use testdns::{DnsServer, Mode, QueryType, Records, Section};

const TIMEOUT: Duration = Duration::from_millis(500);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn addresses(list: &[&str]) -> Resolution {
    Resolution::Addresses(list.iter().map(|s| ip(s)).collect())
}

async fn server(records: Records) -> (DnsServer, HickoryResolver) {
    let server = DnsServer::start(records).await.unwrap();
    let resolver = HickoryResolver::new(Some(&[server.addr()]), TIMEOUT).unwrap();
    (server, resolver)
}

#[tokio::test]
async fn a_record_only() {
    let (_server, resolver) = server(Records::new().a("n1.example.com", "10.0.0.1")).await;
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1"]));
}

#[tokio::test]
async fn aaaa_record_only() {
    let (_server, resolver) = server(Records::new().aaaa("n1.example.com", "fd00::1")).await;
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["fd00::1"]));
}

#[tokio::test]
async fn a_and_aaaa_combined_a_first_without_duplicates() {
    let records = Records::new()
        .aaaa("n1.example.com", "fd00::1")
        .a("n1.example.com", "10.0.0.1")
        .a("n1.example.com", "10.0.0.2")
        .a("n1.example.com", "10.0.0.1");
    let (_server, resolver) = server(records).await;
    let Resolution::Addresses(found) = resolver.resolve("n1.example.com").await else {
        panic!("expected addresses");
    };
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(&found[2], &ip("fd00::1"), "A before AAAA: {found:?}");
    assert!(found.contains(&ip("10.0.0.1")) && found.contains(&ip("10.0.0.2")));
}

#[tokio::test]
async fn names_compare_case_insensitively_and_may_end_with_a_dot() {
    let (_server, resolver) = server(Records::new().a("n1.example.com", "10.0.0.1")).await;
    assert_eq!(resolver.resolve("N1.Example.COM.").await, addresses(&["10.0.0.1"]));
}

#[tokio::test]
async fn cname_chain_ending_in_addresses_counts_as_addresses() {
    let records = Records::new()
        .cname("alias.example.com", "middle.example.net")
        .cname("middle.example.net", "n1.example.com")
        .a("n1.example.com", "10.0.0.1")
        .aaaa("n1.example.com", "fd00::1");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("alias.example.com").await, addresses(&["10.0.0.1", "fd00::1"]));
}

#[tokio::test]
async fn cname_to_a_missing_name_is_not_found() {
    let records = Records::new().cname("alias.example.com", "gone.example.com");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("alias.example.com").await, Resolution::NotFound);
}

/// The same chain, each link asked for by the resolver itself: the server answers one CNAME at a
/// time, and the CNAMEs the resolver collected tie the addresses at the end to the name asked about.
#[tokio::test]
async fn cname_chain_followed_by_the_resolver_counts_as_addresses() {
    let records = Records::new()
        .follow_cnames(false)
        .cname("alias.example.com", "middle.example.net")
        .cname("middle.example.net", "n1.example.com")
        .a("n1.example.com", "10.0.0.1")
        .aaaa("n1.example.com", "fd00::1");
    let (server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("alias.example.com").await, addresses(&["10.0.0.1", "fd00::1"]));
    assert!(server.queries_for("n1.example.com") >= 2, "the resolver followed the chain");
}

/// A resolver or forwarder that passes other records along adds no address: only the name's own
/// records count, whatever else the answer section holds, and the additional section never counts.
#[tokio::test]
async fn records_of_other_owners_are_ignored() {
    let records = Records::new()
        .a("n1.example.com", "10.0.0.1")
        .aaaa("n1.example.com", "fd00::1")
        .extra_a("n1.example.com", Section::Answer, "evil.example.net", "10.6.6.6")
        .extra_aaaa("n1.example.com", Section::Answer, "evil.example.net", "fd66::6")
        .extra_a("n1.example.com", Section::Answer, "n10.example.com", "10.6.6.10")
        .extra_a("n1.example.com", Section::Additional, "evil.example.net", "10.6.6.7")
        .extra_a("n1.example.com", Section::Additional, "n1.example.com", "10.6.6.8")
        .extra_aaaa("n1.example.com", Section::Additional, "n1.example.com", "fd66::8");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1", "fd00::1"]));
}

/// An address of the name itself that comes only in the additional section is no answer.
#[tokio::test]
async fn an_address_only_in_the_additional_section_is_not_found() {
    let records = Records::new().extra_a("n1.example.com", Section::Additional, "n1.example.com", "10.6.6.6");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::NotFound);
}

/// The chain starts at the name asked about: a CNAME and addresses of names off it add nothing.
#[tokio::test]
async fn an_owner_off_the_cname_chain_does_not_count() {
    let records = Records::new()
        .cname("alias.example.com", "n1.example.com")
        .a("n1.example.com", "10.0.0.1")
        .extra_cname("alias.example.com", Section::Answer, "other.example.com", "evil.example.net")
        .extra_a("alias.example.com", Section::Answer, "evil.example.net", "10.6.6.6")
        .extra_a("alias.example.com", Section::Answer, "n1.example.com.evil.example.net", "10.6.6.7");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("alias.example.com").await, addresses(&["10.0.0.1"]));
}

/// A second CNAME for a name on the chain makes it ambiguous: neither target is followed.
#[tokio::test]
async fn a_name_with_two_cnames_ends_the_chain() {
    let records = Records::new()
        .cname("alias.example.com", "n1.example.com")
        .a("n1.example.com", "10.0.0.1")
        .extra_cname("alias.example.com", Section::Answer, "alias.example.com", "evil.example.net")
        .extra_a("alias.example.com", Section::Answer, "evil.example.net", "10.6.6.6");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("alias.example.com").await, Resolution::NotFound);
}

/// The decision and the lookup metrics for an ordinary name, and for one whose answers carry the
/// IP SAN only in a record of another owner.
#[tokio::test]
async fn decisions_and_metrics_rest_on_the_owned_addresses() {
    let records = Records::new().a("n1.nodes.example.com", "10.0.0.11").a("n2.nodes.example.com", "10.0.0.12").extra_a(
        "n2.nodes.example.com",
        Section::Answer,
        "n3.nodes.example.com",
        "10.0.0.13",
    );
    let (_server, resolver) = server(records).await;
    let metrics = Metrics::new();
    let resolver = MeteredResolver::new(resolver, metrics.clone());
    let cfg = PolicyConfig { bypass_dns_resolution: false, ..config() };
    let decide = |node: &str, ip: &str| {
        let sub = serving(node, &Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(ip).pem());
        let (cfg, resolver) = (&cfg, &resolver);
        async move {
            let evaluation = evaluate(&sub, cfg, resolver, &StaticCluster::default(), minutes_after_creation(1)).await;
            (evaluation.decision.kind, evaluation.decision.reason)
        }
    };
    assert_eq!(decide("n1", "10.0.0.11").await, (DecisionKind::Approve, Reason::AutoApproved));
    assert_eq!(decide("n2", "10.0.0.12").await, (DecisionKind::Approve, Reason::AutoApproved));
    assert_eq!(decide("n2", "10.0.0.13").await, (DecisionKind::Deny, Reason::IPNotResolved));
    let text = metrics.encode().unwrap();
    assert!(text.contains("node_csr_approver_dns_lookup_duration_seconds_count 3\n"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("node_csr_approver_dns_failures_total{") && !l.ends_with(" 0")),
        "{text}"
    );
}

#[tokio::test]
async fn nxdomain_is_not_found() {
    let (server, resolver) = server(Records::new().a("n1.example.com", "10.0.0.1")).await;
    assert_eq!(resolver.resolve("n2.example.com").await, Resolution::NotFound);
    assert!(server.queries_for("n2.example.com") >= 2, "A and AAAA were asked");
}

#[tokio::test]
async fn known_name_without_address_records_is_not_found() {
    let (_server, resolver) = server(Records::new().exists("n1.example.com")).await;
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::NotFound);
}

#[tokio::test]
async fn unresponsive_server_is_a_timeout_within_the_bound() {
    let server = DnsServer::unresponsive().await.unwrap();
    let resolver = HickoryResolver::new(Some(&[server.addr()]), TIMEOUT).unwrap();
    let started = Instant::now();
    let resolution = resolver.resolve("n1.example.com").await;
    let elapsed = started.elapsed();
    assert_eq!(resolution, Resolution::Unavailable(DnsFailure::Timeout));
    assert!(elapsed < TIMEOUT * 3, "took {elapsed:?}");
    assert!(server.total_queries() >= 1, "the server was asked");
}

#[tokio::test]
async fn servfail_is_unavailable() {
    let server = DnsServer::servfail().await.unwrap();
    let resolver = HickoryResolver::new(Some(&[server.addr()]), TIMEOUT).unwrap();
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Unavailable(DnsFailure::ServFail));
}

#[tokio::test]
async fn refused_is_unavailable() {
    let (server, resolver) = server(Records::new().a("n1.example.com", "10.0.0.1")).await;
    server.set_mode(Mode::Refused);
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Unavailable(DnsFailure::Refused));
}

/// An incomplete address set must never be decided on: one failing family fails the name.
#[tokio::test]
async fn one_failing_address_family_makes_the_name_unavailable() {
    let records = Records::new()
        .a("n1.example.com", "10.0.0.1")
        .aaaa("n1.example.com", "fd00::1")
        .fault("n1.example.com", QueryType::Aaaa, Mode::ServFail)
        .a("n2.example.com", "10.0.0.2")
        .fault("n2.example.com", QueryType::Aaaa, Mode::Unresponsive)
        .aaaa("n3.example.com", "fd00::3")
        .fault("n3.example.com", QueryType::A, Mode::Refused);
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Unavailable(DnsFailure::ServFail));
    assert_eq!(resolver.resolve("n2.example.com").await, Resolution::Unavailable(DnsFailure::Timeout));
    assert_eq!(resolver.resolve("n3.example.com").await, Resolution::Unavailable(DnsFailure::Refused));
}

#[tokio::test]
async fn unreachable_server_is_unavailable_never_not_found() {
    // Bind and drop a server so that its port is (very likely) closed.
    let addr = DnsServer::start(Records::new()).await.unwrap().addr();
    let resolver = HickoryResolver::new(Some(&[addr]), TIMEOUT).unwrap();
    let started = Instant::now();
    let resolution = resolver.resolve("n1.example.com").await;
    assert!(matches!(resolution, Resolution::Unavailable(_)), "{resolution:?}");
    assert!(started.elapsed() < TIMEOUT * 3);
}

#[tokio::test]
async fn an_answer_is_reused_within_its_ttl() {
    let (server, resolver) = server(Records::new().ttl(60).a("n1.example.com", "10.0.0.1")).await;
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1"]));
    let asked = server.queries_for("n1.example.com");
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1"]));
    assert_eq!(server.queries_for("n1.example.com"), asked, "answered from the cache");
}

#[tokio::test]
async fn server_stopped_then_back_on_the_same_address() {
    // TTL 0: nothing cached, every resolution asks the server.
    let (server, resolver) = server(Records::new().ttl(0).a("n1.example.com", "10.0.0.1")).await;
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1"]));
    server.pause();
    assert_eq!(resolver.resolve("n1.example.com").await, Resolution::Unavailable(DnsFailure::Timeout));
    server.resume();
    assert_eq!(resolver.resolve("n1.example.com").await, addresses(&["10.0.0.1"]));
}

#[tokio::test]
async fn single_label_name_is_looked_up_as_itself() {
    let records = Records::new().a("n1", "10.0.0.1").a("n1.example.com", "10.9.9.9");
    let (_server, resolver) = server(records).await;
    assert_eq!(resolver.resolve("n1").await, addresses(&["10.0.0.1"]));
}

/// The pod case: `search <ns>.svc.cluster.local ...` with `ndots:5` must not turn `n1.corp`
/// into `n1.corp.<search domain>`.
#[tokio::test]
async fn resolv_conf_search_list_and_domain_are_never_used() {
    let records = Records::new()
        .a("n1.corp.example.com", "10.9.9.9")
        .a("n2.corp.example.com", "10.9.9.9")
        .a("n2.corp", "10.0.0.2");
    let server = DnsServer::start(records).await.unwrap();
    for conf in [
        "nameserver 127.0.0.1\nsearch example.com\noptions ndots:5\n",
        "nameserver 127.0.0.1\ndomain example.com\noptions ndots:5\n",
    ] {
        let resolver =
            HickoryResolver::from_resolv_conf(conf, server.addr().port(), TIMEOUT).expect("valid resolv.conf");
        assert_eq!(resolver.resolve("n1.corp").await, Resolution::NotFound, "{conf}");
        assert_eq!(resolver.resolve("n2.corp").await, addresses(&["10.0.0.2"]), "{conf}");
    }
    assert!(server.queries_for("n1.corp") >= 2, "the name itself was asked");
    assert_eq!(server.queries_for("n1.corp.example.com"), 0, "search list used");
    assert_eq!(server.queries_for("n2.corp.example.com"), 0, "search list used");
}

#[tokio::test]
async fn name_added_while_running_is_seen_despite_negative_caching() {
    // The server's negative TTL (SOA minimum) is 300 s; the resolver must not keep it that long.
    let (server, resolver) = server(Records::new().ttl(300)).await;
    assert_eq!(resolver.resolve("late.example.com").await, Resolution::NotFound);
    server.add(Records::new().a("late.example.com", "10.0.0.7")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let resolution = resolver.resolve("late.example.com").await;
        if resolution == addresses(&["10.0.0.7"]) {
            break;
        }
        assert_eq!(resolution, Resolution::NotFound);
        assert!(Instant::now() < deadline, "stale negative answer kept too long");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_names_resolve_concurrently() {
    const NAMES: usize = 2_000;
    let mut records = Records::new();
    for i in 0..NAMES {
        records = records.a(&format!("node-{i}.example.com"), format!("10.1.{}.{}", i / 256, i % 256));
    }
    // The server gets a thread of its own and lookups a generous timeout: this is about
    // correctness under concurrency, not speed on a loaded machine.
    let server = DnsServer::start_on_thread(records).unwrap();
    let resolver = HickoryResolver::new(Some(&[server.addr()]), Duration::from_secs(5)).unwrap();
    let results: Vec<(usize, Resolution)> = futures::stream::iter(0..NAMES)
        .map(|i| {
            let resolver = &resolver;
            async move { (i, resolver.resolve(&format!("node-{i}.example.com")).await) }
        })
        .buffer_unordered(100)
        .collect()
        .await;
    assert_eq!(results.len(), NAMES);
    for (i, resolution) in results {
        let expected = format!("10.1.{}.{}", i / 256, i % 256);
        assert_eq!(resolution, addresses(&[&expected]), "node-{i}");
    }
    assert!(server.total_queries() >= 2 * NAMES as u64);
}
