//! The CSRs of a run: one node per CSR, each with its own ECDSA P-256 key and a real PKCS#10
//! request, generated in parallel before anything is timed.

use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use testkit::{Key, Request};

/// The most nodes a run can have: addresses are numbered inside 10.0.0.0/16, above 10.0.0.0/24.
pub const MAX_NODES: usize = 65_000;

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
    /// Its address inside `testkit::policy::PREFIXES`, the DNS name's A record and the request's
    /// IP SAN.
    pub ip: Ipv4Addr,
    /// The PEM-encoded PKCS#10 request.
    pub pem: String,
}

/// The address of node `i`: 10.0.x.y counted from 10.0.1.1.
pub fn node_ip(i: usize) -> Ipv4Addr {
    let n = i as u32 + FIRST_NODE;
    Ipv4Addr::new(10, 0, (n >> 8) as u8, (n & 0xff) as u8)
}

/// Generates the requests of nodes `0..n` on every core.
pub fn generate(n: usize) -> Result<Vec<NodeRequest>> {
    anyhow::ensure!(n <= MAX_NODES, "at most {MAX_NODES} nodes fit the address plan");
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1).max(1);
    let chunk = n.div_ceil(threads).max(1);
    let indices: Vec<usize> = (0..n).collect();
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
        assert_eq!(node_ip(MAX_NODES - 1), Ipv4Addr::new(10, 0, 254, 232));
        let requests = generate(5).unwrap();
        assert_eq!(requests.len(), 5);
        assert_eq!(requests[4].node, "node-4");
        assert!(requests[4].pem.contains("CERTIFICATE REQUEST"));
    }
}
