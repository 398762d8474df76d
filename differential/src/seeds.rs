//! Valid kubelet-serving requests of node [`NODE`], with their keys so that mutations can be
//! re-signed: every key type the approver accepts, DNS and IP SANs of both families.

use rcgen::KeyPair;
use testkit::{Key, Request};

/// The node every seed is for.
pub const NODE: &str = "n1";

/// A valid request and the key that signed it.
pub struct Seed {
    /// What it is, for reports.
    pub name: &'static str,
    /// The request as DER.
    pub der: Vec<u8>,
    /// Its signing key.
    pub key: KeyPair,
}

/// Every seed.
pub struct Seeds(pub Vec<Seed>);

impl Seeds {
    /// Makes the seeds (fresh EC and Ed25519 keys, the committed RSA key).
    pub fn new() -> Result<Seeds, rcgen::Error> {
        let host = format!("{NODE}.nodes.example.com");
        let request = Request::node(NODE);
        let specs: Vec<(&'static str, Key, Request)> = vec![
            ("ecdsa p-256, dns + ipv4", Key::P256, request.clone().dns(&host).ip("10.0.0.11")),
            ("ecdsa p-384, dns + ipv6", Key::P384, request.clone().dns(&host).ip("fd00::11")),
            (
                "ed25519, two of each",
                Key::Ed25519,
                request
                    .clone()
                    .dns(&host)
                    .dns(&format!("{NODE}.internal.nodes.example.com"))
                    .ip("10.0.0.11")
                    .ip("fd00::11"),
            ),
            ("rsa-2048, dns only", Key::Rsa, request.clone().dns(&host)),
            ("ecdsa p-256, ip only", Key::P256, request.ip("10.0.0.11")),
        ];
        let mut seeds = Vec::new();
        for (name, key, request) in specs {
            let key = key.pair()?;
            let der = request.der_signed_by(&key)?;
            seeds.push(Seed { name, der, key });
        }
        Ok(Seeds(seeds))
    }
}
