//! A presented serving certificate read into plain values: its names (as the core reads a
//! request's), issuer, validity, public key, and whether the chain carries its own root.

use std::net::IpAddr;

use jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use serde::Serialize;
use x509_cert::Certificate;
use x509_cert::der::asn1::UintRef;
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Reader, SliceReader};
use x509_cert::spki::SubjectPublicKeyInfoOwned;

use crate::csr::{CertificateFacts, CsrError, CsrFacts};
use crate::policy::NODE_USER_PREFIX;

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

/// What a kubelet's serving certificate says, read without trusting it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedCertificate {
    /// The subject, as RFC 4514 text.
    pub subject: String,
    /// The issuer, as RFC 4514 text.
    pub issuer: String,
    /// The serial number, as colon-separated hex bytes.
    pub serial: String,
    /// notBefore.
    #[serde(serialize_with = "as_text")]
    pub not_before: Timestamp,
    /// notAfter.
    #[serde(serialize_with = "as_text")]
    pub not_after: Timestamp,
    /// The public key: `RSA 2048`, `ECDSA P-256`, `Ed25519`, or the algorithm's OID.
    pub key: String,
    /// The leaf is its own issuer, or is issued by a self-issued certificate the server presented
    /// with it (a kubelet's own self-signed CA).
    pub self_issued_chain: bool,
    /// The subject and SANs, read as a request's are.
    pub names: CsrNames,
}

/// The subject and SANs of a certificate, in the form JSON shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CsrNames {
    /// Subject CommonNames.
    pub common_names: Vec<String>,
    /// Subject Organizations.
    pub organizations: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP SANs.
    pub ip_addresses: Vec<IpAddr>,
    /// Email, URI and other SANs, described.
    pub other_sans: Vec<String>,
}

impl CsrNames {
    fn new(facts: &CsrFacts) -> CsrNames {
        let others = facts.emails.iter().map(|e| format!("email:{e}"));
        let others = others.chain(facts.uris.iter().map(|u| format!("URI:{u}")));
        CsrNames {
            common_names: facts.common_names.clone(),
            organizations: facts.organizations.clone(),
            dns_names: facts.dns_names.clone(),
            ip_addresses: facts.ip_addresses.clone(),
            other_sans: others.chain(facts.other_sans.iter().cloned()).collect(),
        }
    }
}

/// Why a presented chain's leaf cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadCertificate {
    /// The chain is empty.
    #[error("no certificate presented")]
    NonePresented,
    /// The leaf is not DER of a certificate.
    #[error("the leaf is not an X.509 certificate: {0}")]
    NotX509(x509_cert::der::Error),
    /// The leaf's names cannot be read as the core reads a request's.
    #[error("the leaf's names: {0}")]
    Names(CsrError),
}

impl ServedCertificate {
    /// Reads the leaf of `chain` (leaf first); the rest of the chain only to tell whether it
    /// carries its own root. The names are also returned as the core reads them.
    pub fn read(chain: &[CertificateDer<'_>]) -> Result<(ServedCertificate, CsrFacts), UnreadCertificate> {
        let (leaf_der, rest) = chain.split_first().ok_or(UnreadCertificate::NonePresented)?;
        let leaf = Certificate::from_der(leaf_der).map_err(UnreadCertificate::NotX509)?;
        let facts = CertificateFacts::from_der(leaf_der).map_err(UnreadCertificate::Names)?;
        let tbs = leaf.tbs_certificate();
        let presented_roots = rest
            .iter()
            .filter_map(|der| Certificate::from_der(der).ok())
            .filter(|c| c.tbs_certificate().issuer() == c.tbs_certificate().subject());
        let self_issued_chain = tbs.issuer() == tbs.subject()
            || presented_roots.into_iter().any(|root| root.tbs_certificate().subject() == tbs.issuer());
        let served = ServedCertificate {
            subject: tbs.subject().to_string(),
            issuer: tbs.issuer().to_string(),
            serial: facts.serial.clone(),
            not_before: facts.not_before,
            not_after: facts.not_after,
            key: key_description(tbs.subject_public_key_info()),
            self_issued_chain,
            names: CsrNames::new(&facts.names),
        };
        Ok((served, facts.names))
    }

    /// Whether the subject is exactly one CommonName `system:node:<node>` (what KEP-4872's
    /// `KubeletCertCNValidation` requires of a kubelet's serving certificate).
    pub fn cn_is_node(&self, node: &str) -> bool {
        matches!(self.names.common_names.as_slice(), [cn] if cn.strip_prefix(NODE_USER_PREFIX) == Some(node))
    }
}

/// A time in JSON: RFC 3339 text.
fn as_text<S: serde::Serializer>(time: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(time)
}

/// The key's type and size.
fn key_description(spki: &SubjectPublicKeyInfoOwned) -> String {
    let algorithm = &spki.algorithm;
    let curve = algorithm.parameters.as_ref().and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
    match (algorithm.oid, curve) {
        (RSA_ENCRYPTION, _) => match spki.subject_public_key.as_bytes().and_then(rsa_modulus_bits) {
            Some(bits) => format!("RSA {bits}"),
            None => "RSA (unreadable key)".into(),
        },
        (EC_PUBLIC_KEY, Some(P256)) => "ECDSA P-256".into(),
        (EC_PUBLIC_KEY, Some(P384)) => "ECDSA P-384".into(),
        (EC_PUBLIC_KEY, Some(P521)) => "ECDSA P-521".into(),
        (EC_PUBLIC_KEY, curve) => format!("ECDSA {}", curve.map_or("(no curve)".into(), |c| c.to_string())),
        (ED25519, _) => "Ed25519".into(),
        (oid, _) => format!("algorithm {oid}"),
    }
}

/// The size in bits of an RSAPublicKey's modulus.
fn rsa_modulus_bits(key: &[u8]) -> Option<usize> {
    let mut reader = SliceReader::new(key).ok()?;
    let modulus = reader
        .sequence(|inner| {
            let modulus = UintRef::decode(inner)?;
            UintRef::decode(inner)?;
            Ok::<_, x509_cert::der::Error>(modulus)
        })
        .ok()?;
    let bytes = modulus.as_bytes();
    let first = bytes.first()?;
    Some((bytes.len() - 1) * 8 + (8 - first.leading_zeros() as usize))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn leaf(cn: &str, key: &rcgen::KeyPair, issuer: Option<&rcgen::Issuer<'_, &rcgen::KeyPair>>) -> rcgen::Certificate {
        let mut params = rcgen::CertificateParams::new(vec!["node-1.example.com".into()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        match issuer {
            Some(issuer) => params.signed_by(key, issuer),
            None => params.self_signed(key),
        }
        .unwrap()
    }

    #[test]
    fn reads_names_key_and_whether_the_chain_carries_its_own_root() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let own = leaf("system:node:node-1", &key, None);
        let (served, names) = ServedCertificate::read(&[own.der().clone()]).unwrap();
        assert_eq!(served.key, "ECDSA P-256");
        assert!(served.self_issued_chain && served.cn_is_node("node-1") && !served.cn_is_node("node-2"));
        assert_eq!(names.dns_names, ["node-1.example.com"]);

        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "node-1-ca@1700000000");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let issued = leaf("node-1@1700000000", &leaf_key, Some(&rcgen::Issuer::from_params(&ca_params, &ca_key)));
        let (served, _) = ServedCertificate::read(&[issued.der().clone()]).unwrap();
        assert!(!served.self_issued_chain, "the issuer was not presented");
        assert_eq!(served.key, "Ed25519");
        assert!(!served.cn_is_node("node-1"));
        let (served, _) = ServedCertificate::read(&[issued.der().clone(), ca.der().clone()]).unwrap();
        assert!(served.self_issued_chain, "the kubelet's own CA came with it");
    }

    #[test]
    fn an_unreadable_certificate_is_an_error_never_a_panic() {
        for bytes in [&b""[..], b"\x30\x03\x02\x01\x01", &[0x30; 64]] {
            assert!(ServedCertificate::read(&[CertificateDer::from(bytes.to_vec())]).is_err());
        }
        assert!(ServedCertificate::read(&[]).is_err());
    }

    #[test]
    fn an_rsa_modulus_is_measured_in_bits() {
        // SEQUENCE { INTEGER 0x00 0x80 0x01 (a 16-bit modulus), INTEGER 3 }
        assert_eq!(rsa_modulus_bits(&[0x30, 0x08, 0x02, 0x03, 0x00, 0x80, 0x01, 0x02, 0x01, 0x03]), Some(16));
        assert_eq!(rsa_modulus_bits(&[0x30, 0x00]), None);
    }
}
