//! The CSRs of a run: one node per CSR, each with its own ECDSA P-256 key and a real PKCS#10
//! request, generated in parallel before anything is timed.

use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use testkit::{Key, Request};

/// The most nodes a run can have: addresses are numbered inside [`NODE_PREFIXES`], above
/// 10.0.0.0/24 (a storm of 130,000 nodes fits).
pub const MAX_NODES: usize = 130_000;

/// The provider prefixes the bench gives both approvers: 10.0.0.0/15 (10.0.0.0–10.1.255.255),
/// twice testkit's 10.0.0.0/16, so that a storm's 130,000 nodes have addresses of their own.
pub const NODE_PREFIXES: &str = "10.0.0.0/15";

/// The first node address counts from 10.0.1.1: 10.0.0.0/24 is the test apiserver's Service
/// range, whose addresses (10.0.0.1 is the `kubernetes` Service) no node may claim.
const FIRST_NODE: u32 = 0x0101;

/// One node and the serving request it sends.
#[derive(Debug, Clone)]
pub struct NodeRequest {
    /// The node's name, `node-<i>`.
    pub node: String,
    /// Its DNS name, `node-<i>.nodes.example.com`, served by the test DNS server.
    pub dns: String,
    /// Its address inside [`NODE_PREFIXES`], the DNS name's A record and the request's IP SAN.
    pub ip: Ipv4Addr,
    /// The PEM-encoded PKCS#10 request.
    pub pem: String,
}

/// The address of node `i`: 10.0.x.y counted from 10.0.1.1, on into 10.1.x.y past 10.0.255.255.
pub fn node_ip(i: usize) -> Ipv4Addr {
    let n = i as u32 + FIRST_NODE;
    Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// Generates the requests of nodes `0..n` on every core.
pub fn generate(n: usize) -> Result<Vec<NodeRequest>> {
    generate_nodes(&(0..n).collect::<Vec<_>>())
}

/// Generates one request of each node in `indices` (a node may appear more than once: each gets
/// its own key, as a kubelet that files a new request), on every core, in the order given.
pub fn generate_nodes(indices: &[usize]) -> Result<Vec<NodeRequest>> {
    anyhow::ensure!(indices.iter().all(|&i| i < MAX_NODES), "at most {MAX_NODES} nodes fit the address plan");
    let n = indices.len();
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1).max(1);
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = indices
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(|&i| one(i)).collect::<Result<Vec<_>>>()))
            .collect();
        let mut all = Vec::with_capacity(n);
        for worker in workers {
            let part = worker.join().map_err(|_| anyhow::anyhow!("a key generation thread panicked"))??;
            all.extend(part);
        }
        Ok(all)
    })
}

fn one(i: usize) -> Result<NodeRequest> {
    let node = format!("node-{i}");
    let dns = format!("{node}.nodes.example.com");
    let ip = node_ip(i);
    let key = Key::P256.pair().context("generating a key")?;
    let pem = Request::node(&node).dns(&dns).ip(&ip.to_string()).pem_signed_by(&key).context("signing the request")?;
    Ok(NodeRequest { node, dns, ip, pem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_and_inside_the_prefix() {
        assert_eq!(node_ip(0), Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(node_ip(254), Ipv4Addr::new(10, 0, 1, 255));
        assert_eq!(node_ip(65_000 - 1), Ipv4Addr::new(10, 0, 254, 232));
        assert_eq!(node_ip(0xffff - 0x0101), Ipv4Addr::new(10, 0, 255, 255));
        assert_eq!(node_ip(0xffff - 0x0101 + 1), Ipv4Addr::new(10, 1, 0, 0));
        assert_eq!(node_ip(MAX_NODES - 1), Ipv4Addr::new(10, 1, 252, 208));
        let prefix: std::net::Ipv4Addr = NODE_PREFIXES.split('/').next().unwrap().parse().unwrap();
        let bits: u32 = NODE_PREFIXES.split('/').nth(1).unwrap().parse().unwrap();
        let inside = |ip: Ipv4Addr| u32::from(ip) >> (32 - bits) == u32::from(prefix) >> (32 - bits);
        assert!(inside(node_ip(MAX_NODES - 1)) && inside(node_ip(0)));
        assert!(generate_nodes(&[MAX_NODES]).is_err());
        let requests = generate(5).unwrap();
        assert_eq!(requests.len(), 5);
        assert_eq!(requests[4].node, "node-4");
        assert!(requests[4].pem.contains("CERTIFICATE REQUEST"));
    }
}
