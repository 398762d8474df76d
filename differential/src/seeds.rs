//! Valid kubelet-serving requests of node [`NODE`], with their keys so that mutations can be
//! re-signed: every key type the approver accepts, DNS and IP SANs of both families.

use std::net::IpAddr;

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

/// The node every seed is for.
pub const NODE: &str = "n1";
/// The committed RSA-2048 test key (rcgen with ring signs with RSA but cannot generate RSA keys).
const RSA_KEY: &str = include_str!("../../tests/fixtures/rsa-2048.key.pem");

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
        let dns = |name: &str| SanType::DnsName(name.try_into().unwrap_or_else(|_| unreachable!("a valid name")));
        let ip = |text: &str| SanType::IpAddress(text.parse::<IpAddr>().unwrap_or_else(|_| unreachable!("an IP")));
        let host = format!("{NODE}.nodes.example.com");
        let specs: Vec<(&'static str, KeyPair, Vec<SanType>)> = vec![
            (
                "ecdsa p-256, dns + ipv4",
                KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
                vec![dns(&host), ip("10.0.0.11")],
            ),
            (
                "ecdsa p-384, dns + ipv6",
                KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384)?,
                vec![dns(&host), ip("fd00::11")],
            ),
            (
                "ed25519, two of each",
                KeyPair::generate_for(&rcgen::PKCS_ED25519)?,
                vec![dns(&host), dns(&format!("{NODE}.internal.nodes.example.com")), ip("10.0.0.11"), ip("fd00::11")],
            ),
            (
                "rsa-2048, dns only",
                KeyPair::from_pem_and_sign_algo(RSA_KEY, &rcgen::PKCS_RSA_SHA256)?,
                vec![dns(&host)],
            ),
            ("ecdsa p-256, ip only", KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?, vec![ip("10.0.0.11")]),
        ];
        let mut seeds = Vec::new();
        for (name, key, sans) in specs {
            let der = request(&key, sans)?;
            seeds.push(Seed { name, der, key });
        }
        Ok(Seeds(seeds))
    }
}

/// A request with CN `system:node:<NODE>`, O `system:nodes` and `sans`, signed by `key`.
fn request(key: &KeyPair, sans: Vec<SanType>) -> Result<Vec<u8>, rcgen::Error> {
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, format!("system:node:{NODE}"));
    subject.push(DnType::OrganizationName, "system:nodes");
    params.distinguished_name = subject;
    params.subject_alt_names = sans;
    Ok(params.serialize_request(key)?.der().to_vec())
}
