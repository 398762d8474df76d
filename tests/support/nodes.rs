//! Nodes of the cluster tests: their DNS records and the requests they send.

use testdns::{DnsServer, Records};

use super::Request;

/// A DNS server holding `<node>.nodes.example.com -> 10.0.0.<n>` for each node.
pub fn dns_for(nodes: &[(&str, u8)]) -> DnsServer {
    let records = nodes
        .iter()
        .fold(Records::new(), |r, (node, n)| r.a(&format!("{node}.nodes.example.com"), format!("10.0.0.{n}")));
    DnsServer::start_on_thread(records).unwrap()
}

/// A legitimate request of `node`: its DNS name and its address 10.0.0.<n>.
pub fn legit(node: &str, n: u8) -> Request {
    Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(&format!("10.0.0.{n}"))
}
