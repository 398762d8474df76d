//! PKCS#10 parsing: from the bytes of a CSR's `spec.request` to plain [`CsrFacts`].
//!
//! kube-apiserver and the kube-controller-manager signer read `spec.request` with Go's
//! `encoding/pem` and `crypto/x509`. Whatever we approve must be exactly what they sign, so a
//! request is read only when it is in the one form Go writes and reads unambiguously:
//! - [`canonical_pem`]: the bytes `pem.EncodeToMemory` writes for one `CERTIFICATE REQUEST` block,
//!   with nothing but whitespace around them, at most [`MAX_REQUEST_BYTES`];
//! - [`strict_der`]: DER that decodes strictly (canonical tags and lengths) and re-encodes to the
//!   very same bytes, with one reading of the subject and the SubjectAltName extension;
//! - [`signature`]: a self-signature by an allowed algorithm that verifies.
//!
//! Anything else is a [`CsrError`], which the policy turns into a denial.

mod canonical_pem;
mod causes;
mod served_certificate;
mod signature;
mod strict_der;

use std::net::IpAddr;

pub use canonical_pem::{MAX_REQUEST_BYTES, NotCanonical};
pub use causes::{Ambiguity, NotStrict, Unsupported};
pub use served_certificate::CertificateFacts;

/// Why a request could not be turned into [`CsrFacts`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// The request is larger than [`MAX_REQUEST_BYTES`] (the CSR cache keeps one byte more of an
    /// oversized request, so its whole length is not known here).
    #[error("spec.request is larger than the {MAX_REQUEST_BYTES} bytes accepted")]
    TooLarge,
    /// The bytes are not one canonical `CERTIFICATE REQUEST` PEM block.
    #[error("spec.request is not one canonical CERTIFICATE REQUEST PEM block: {0}")]
    NotCanonicalPem(NotCanonical),
    /// The DER inside the block is not a strictly encoded PKCS#10 request.
    #[error("the request is not strict DER PKCS#10: {0}")]
    NotStrictDer(NotStrict),
    /// The request's structure is valid DER but could be read in more than one way.
    #[error("the request is ambiguous: {0}")]
    Ambiguous(Ambiguity),
    /// The request is signed with an algorithm or key this approver does not accept.
    #[error("the request's signature algorithm is not accepted: {0}")]
    UnsupportedSignature(Unsupported),
    /// The self-signature does not verify with the request's own public key.
    #[error("the request's signature does not verify")]
    BadSignature,
}

/// What a CSR asks for, in plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsrFacts {
    /// Every subject CommonName value, in order.
    pub common_names: Vec<String>,
    /// Every subject Organization value, in order.
    pub organizations: Vec<String>,
    /// DNS SANs, as written.
    pub dns_names: Vec<String>,
    /// IP SANs, as written (4 or 16 bytes).
    pub ip_addresses: Vec<IpAddr>,
    /// Email (RFC 822) SANs.
    pub emails: Vec<String>,
    /// URI SANs.
    pub uris: Vec<String>,
    /// SANs of any other type, described for messages.
    pub other_sans: Vec<String>,
}

impl CsrFacts {
    /// Reads `spec.request`: one canonical PEM block holding a strict-DER, verified PKCS#10 request.
    pub fn from_pem(pem: &[u8]) -> Result<CsrFacts, CsrError> {
        let der = canonical_pem::decode(pem)?;
        CsrFacts::from_der(&der)
    }

    /// The DER inside `pem` when it is one canonical `CERTIFICATE REQUEST` block: the first gate
    /// of [`CsrFacts::from_pem`], whose error it returns otherwise.
    pub fn canonical_der(pem: &[u8]) -> Result<Vec<u8>, CsrError> {
        canonical_pem::decode(pem)
    }

    /// The canonical block of `der` without whitespace around it: for every `pem` whose
    /// [`CsrFacts::canonical_der`] is `der`, no longer than `pem` and read by
    /// [`CsrFacts::from_pem`] as `pem` is.
    pub fn canonical_block(der: &[u8]) -> String {
        let mut block = canonical_pem::encode(der);
        block.truncate(block.trim_end_matches('\n').len());
        block
    }

    /// Reads a DER-encoded PKCS#10 request: strict DER, one reading, a verifying self-signature.
    pub fn from_der(der: &[u8]) -> Result<CsrFacts, CsrError> {
        let request = strict_der::decode(der)?;
        signature::verify(&request)?;
        strict_der::facts(&request)
    }
}
