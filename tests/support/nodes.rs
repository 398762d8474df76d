//! Nodes of the cluster tests: their DNS records, the requests they send (testkit's [`legit`]) and
//! the DNS queries their evaluations make.

use std::time::{Duration, Instant};

use testdns::{DnsServer, Records};
pub use testkit::request::{dns_name, legit};

/// How long [`wait_asked`] waits for the queries.
const ASKED_WITHIN: Duration = Duration::from_secs(20);

/// A DNS server holding `<node>.nodes.example.com -> 10.0.0.<n>` for each node.
pub fn dns_for(nodes: &[(&str, u8)]) -> DnsServer {
    let records = nodes.iter().fold(Records::new(), |r, (node, n)| r.a(&dns_name(node), format!("10.0.0.{n}")));
    DnsServer::start_on_thread(records).unwrap()
}

/// Waits until `dns` was asked at least `queries` times about each node of `nodes` (its
/// [`dns_name`]): once when the node's evaluation is in flight, twice when its A and AAAA lookups
/// are both sent.
pub async fn wait_asked(dns: &DnsServer, nodes: &[impl AsRef<str>], queries: u64) {
    let deadline = Instant::now() + ASKED_WITHIN;
    loop {
        let unasked: Vec<&str> =
            nodes.iter().map(AsRef::as_ref).filter(|node| dns.queries_for(&dns_name(node)) < queries).collect();
        if unasked.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "the DNS server was not asked {queries} times about {unasked:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
