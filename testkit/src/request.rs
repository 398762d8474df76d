//! Real PKCS#10 requests made with rcgen: a node's serving request by default, and every field a
//! test needs to vary (subject, SANs of each kind, extra extensions, the key type).

use std::net::IpAddr;

use rcgen::{CertificateParams, CustomExtension, DistinguishedName, DnType, KeyPair, SanType};

/// The committed RSA-2048 test key (rcgen with ring signs with RSA but cannot generate RSA keys).
pub const RSA_KEY_PEM: &str = include_str!("../../core/tests/fixtures/rsa-2048.key.pem");

/// The key type a request is signed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The committed RSA-2048 key ([`RSA_KEY_PEM`]), signing with SHA-256.
    Rsa,
    /// A fresh ECDSA P-256 key, signing with SHA-256.
    P256,
    /// A fresh ECDSA P-384 key, signing with SHA-384.
    P384,
    /// A fresh Ed25519 key.
    Ed25519,
}

impl Key {
    /// A key pair of this type (a fresh one, except the committed RSA key).
    pub fn pair(self) -> Result<KeyPair, rcgen::Error> {
        match self {
            Key::Rsa => KeyPair::from_pem_and_sign_algo(RSA_KEY_PEM, &rcgen::PKCS_RSA_SHA256),
            Key::P256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            Key::P384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            Key::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519),
        }
    }
}

/// `<node>.nodes.example.com`: a node's DNS name in the provider regex's domain
/// ([`crate::policy::REGEX`]).
pub fn dns_name(node: &str) -> String {
    format!("{node}.nodes.example.com")
}

/// The legitimate serving request of `node`: its DNS name ([`dns_name`]) and its address 10.0.0.<n>,
/// inside the provider prefixes ([`crate::policy::PREFIXES`]).
pub fn legit(node: &str, n: u8) -> Request {
    Request::node(node).dns(&dns_name(node)).ip(&format!("10.0.0.{n}"))
}

/// A PKCS#10 request to build.
#[derive(Clone, Debug)]
pub struct Request {
    /// The subject's attributes, in order.
    pub subject: Vec<(DnType, String)>,
    /// The subjectAltName entries, in order.
    pub sans: Vec<SanType>,
    /// Extra extensions of the extensionRequest as (OID arcs, DER content).
    pub extensions: Vec<(Vec<u64>, Vec<u8>)>,
    /// The key type [`Request::der`] and [`Request::pem`] sign with.
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

    /// Adds a DNS SAN.
    ///
    /// # Panics
    /// When `name` is not IA5 (ASCII) text.
    #[track_caller]
    pub fn dns(mut self, name: &str) -> Request {
        let name = name.try_into().unwrap_or_else(|e| panic!("DNS SAN {name:?}: {e}"));
        self.sans.push(SanType::DnsName(name));
        self
    }

    /// Adds an IP SAN.
    ///
    /// # Panics
    /// When `ip` is not an IPv4 or IPv6 address.
    #[track_caller]
    pub fn ip(mut self, ip: &str) -> Request {
        let address = ip.parse::<IpAddr>().unwrap_or_else(|e| panic!("IP SAN {ip:?}: {e}"));
        self.sans.push(SanType::IpAddress(address));
        self
    }

    /// Adds an email (rfc822Name) SAN.
    ///
    /// # Panics
    /// When `email` is not IA5 (ASCII) text.
    #[track_caller]
    pub fn email(mut self, email: &str) -> Request {
        let email = email.try_into().unwrap_or_else(|e| panic!("email SAN {email:?}: {e}"));
        self.sans.push(SanType::Rfc822Name(email));
        self
    }

    /// Adds a URI SAN.
    ///
    /// # Panics
    /// When `uri` is not IA5 (ASCII) text.
    #[track_caller]
    pub fn uri(mut self, uri: &str) -> Request {
        let uri = uri.try_into().unwrap_or_else(|e| panic!("URI SAN {uri:?}: {e}"));
        self.sans.push(SanType::URI(uri));
        self
    }

    /// Adds a raw extension to the extensionRequest.
    pub fn extension(mut self, oid: &[u64], der: &[u8]) -> Request {
        self.extensions.push((oid.to_vec(), der.to_vec()));
        self
    }

    /// Signs with another key type.
    pub fn key(mut self, key: Key) -> Request {
        self.key = key;
        self
    }

    /// Replaces the subject.
    pub fn subject(mut self, subject: &[(DnType, &str)]) -> Request {
        self.subject = subject.iter().map(|(t, v)| (t.clone(), (*v).to_owned())).collect();
        self
    }

    /// The request signed by `key`, as DER.
    pub fn der_signed_by(&self, key: &KeyPair) -> Result<Vec<u8>, rcgen::Error> {
        Ok(self.params().serialize_request(key)?.der().to_vec())
    }

    /// The request signed by `key`, as PEM.
    pub fn pem_signed_by(&self, key: &KeyPair) -> Result<String, rcgen::Error> {
        self.params().serialize_request(key)?.pem()
    }

    /// The request signed by a key of its [`Key`] type, as DER.
    ///
    /// # Panics
    /// When rcgen cannot make the key or sign.
    #[track_caller]
    pub fn der(&self) -> Vec<u8> {
        self.key.pair().and_then(|key| self.der_signed_by(&key)).unwrap_or_else(|e| panic!("signing {self:?}: {e}"))
    }

    /// The request signed by a key of its [`Key`] type, as PEM.
    ///
    /// # Panics
    /// When rcgen cannot make the key or sign.
    #[track_caller]
    pub fn pem(&self) -> String {
        self.key.pair().and_then(|key| self.pem_signed_by(&key)).unwrap_or_else(|e| panic!("signing {self:?}: {e}"))
    }

    fn params(&self) -> CertificateParams {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for (ty, value) in &self.subject {
            dn.push(ty.clone(), value.as_str());
        }
        params.distinguished_name = dn;
        params.subject_alt_names = self.sans.clone();
        params.custom_extensions =
            self.extensions.iter().map(|(oid, der)| CustomExtension::from_oid_content(oid, der.clone())).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_request_carries_its_subject_and_sans() {
        let pem = Request::node("n1").dns("n1.example.com").ip("10.0.0.1").pem();
        let der = pem::parse(&pem).map(|block| block.into_contents()).unwrap_or_default();
        let text = String::from_utf8_lossy(&der);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"), "{pem}");
        for part in ["system:node:n1", "system:nodes", "n1.example.com"] {
            assert!(text.contains(part), "{part} missing");
        }
        assert!(der.windows(4).any(|w| w == [10, 0, 0, 1]), "IP SAN missing");
    }

    #[test]
    fn every_key_type_signs() {
        for key in [Key::Rsa, Key::P256, Key::P384, Key::Ed25519] {
            assert!(!Request::node("n1").key(key).der().is_empty(), "{key:?}");
        }
    }
}
