//! Shared test helpers: real PKCS#10 requests made with rcgen, CSR submissions and a policy
//! configuration with the documented defaults.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod chart;
pub mod cluster;
pub mod table;

use std::net::IpAddr;
use std::time::Duration;

use node_csr_approver::policy::Submission;
use node_csr_approver::policy::{HostnameMatch, PolicyConfig};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

/// The committed RSA-2048 test key (rcgen with ring signs with RSA but cannot generate RSA keys).
const RSA_KEY: &str = include_str!("../fixtures/rsa-2048.key.pem");

/// The key type a request is signed with.
#[derive(Clone, Copy, Debug)]
pub enum Key {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl Key {
    pub fn pair(self) -> KeyPair {
        match self {
            Key::Rsa => KeyPair::from_pem_and_sign_algo(RSA_KEY, &rcgen::PKCS_RSA_SHA256).unwrap(),
            Key::P256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
            Key::P384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
            Key::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        }
    }
}

/// A PKCS#10 request to build.
#[derive(Clone, Debug)]
pub struct Request {
    pub subject: Vec<(DnType, String)>,
    pub sans: Vec<SanType>,
    /// Extra extensions as (OID arcs, DER content).
    pub extensions: Vec<(Vec<u64>, Vec<u8>)>,
    pub key: Key,
}

impl Request {
    /// CN `system:node:<node>`, O `system:nodes`, no SANs, ECDSA P-256.
    pub fn node(node: &str) -> Request {
        Request {
            subject: vec![
                (DnType::CommonName, format!("system:node:{node}")),
                (DnType::OrganizationName, "system:nodes".into()),
            ],
            sans: Vec::new(),
            extensions: Vec::new(),
            key: Key::P256,
        }
    }

    pub fn dns(mut self, name: &str) -> Request {
        self.sans.push(SanType::DnsName(name.try_into().unwrap()));
        self
    }

    pub fn ip(mut self, ip: &str) -> Request {
        self.sans.push(SanType::IpAddress(ip.parse::<IpAddr>().unwrap()));
        self
    }

    pub fn email(mut self, email: &str) -> Request {
        self.sans.push(SanType::Rfc822Name(email.try_into().unwrap()));
        self
    }

    pub fn uri(mut self, uri: &str) -> Request {
        self.sans.push(SanType::URI(uri.try_into().unwrap()));
        self
    }

    /// Adds a raw extension to the extensionRequest.
    pub fn extension(mut self, oid: &[u64], der: &[u8]) -> Request {
        self.extensions.push((oid.to_vec(), der.to_vec()));
        self
    }

    pub fn key(mut self, key: Key) -> Request {
        self.key = key;
        self
    }

    /// Replaces the subject.
    pub fn subject(mut self, subject: &[(DnType, &str)]) -> Request {
        self.subject = subject.iter().map(|(t, v)| (t.clone(), (*v).to_owned())).collect();
        self
    }

    /// The request as DER.
    pub fn der(&self) -> Vec<u8> {
        let key = self.key.pair();
        self.params().serialize_request(&key).unwrap().der().to_vec()
    }

    /// The request as PEM.
    pub fn pem(&self) -> String {
        let key = self.key.pair();
        self.params().serialize_request(&key).unwrap().pem().unwrap()
    }

    fn params(&self) -> CertificateParams {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for (ty, value) in &self.subject {
            dn.push(ty.clone(), value.as_str());
        }
        params.distinguished_name = dn;
        params.subject_alt_names = self.sans.clone();
        params.custom_extensions = self
            .extensions
            .iter()
            .map(|(oid, der)| rcgen::CustomExtension::from_oid_content(oid, der.clone()))
            .collect();
        params
    }
}

/// PEM-encodes DER with the given label, as Go's `pem.EncodeToMemory` does (LF line endings).
pub fn pem_block(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// A second O attribute (rcgen keeps one value per DnType; a custom type with O's OID adds another).
pub fn extra_organization() -> DnType {
    DnType::CustomDnType(vec![2, 5, 4, 10])
}

/// A second CN attribute.
pub fn extra_common_name() -> DnType {
    DnType::CustomDnType(vec![2, 5, 4, 3])
}

pub const SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];

/// A pending kubelet-serving CSR from `system:node:<node>` carrying `request`.
pub fn serving(node: &str, request: &str) -> Submission {
    Submission {
        name: format!("csr-{node}"),
        created: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        signer_name: "kubernetes.io/kubelet-serving".into(),
        username: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: SERVING_USAGES.iter().map(|u| (*u).to_owned()).collect(),
        expiration_seconds: None,
        request: request.as_bytes().to_vec(),
        decided: None,
    }
}

/// The documented defaults, with DNS resolution bypassed, the regex `^[a-z0-9-]+\.nodes\.example\.com$`
/// and the prefixes 10.0.0.0/16 and fd00::/64.
pub fn config() -> PolicyConfig {
    PolicyConfig {
        provider_regex: regex::Regex::new(r"^[a-z0-9-]+\.nodes\.example\.com$").unwrap(),
        ip_prefixes: vec!["10.0.0.0/16".parse().unwrap(), "fd00::/64".parse().unwrap()],
        max_expiration_secs: 367 * 24 * 3600,
        allowed_dns_names: 1,
        allowed_ip_addresses: 16,
        bypass_dns_resolution: true,
        bypass_hostname_check: false,
        hostname_match: HostnameMatch::Strict,
        ignore_non_system_node: false,
        skip_deny_step: false,
        dns_grace_period: Duration::from_secs(300),
        verify_node_addresses: false,
        machine: None,
    }
}

/// The time the age-based rules are evaluated at: `minutes` after [`serving`]'s creation time.
pub fn minutes_after_creation(minutes: i64) -> jiff::Timestamp {
    let created: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    created + jiff::SignedDuration::from_mins(minutes)
}
