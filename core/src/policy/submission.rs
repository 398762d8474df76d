//! The parts of a CertificateSigningRequest object that decisions read.

use jiff::Timestamp;

/// A CSR object reduced to what the policy needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    /// metadata.name.
    pub name: String,
    /// metadata.creationTimestamp, if known.
    pub created: Option<Timestamp>,
    /// spec.signerName.
    pub signer_name: String,
    /// spec.username, as filled in by the apiserver.
    pub username: String,
    /// spec.groups.
    pub groups: Vec<String>,
    /// spec.usages.
    pub usages: Vec<String>,
    /// spec.expirationSeconds.
    pub expiration_seconds: Option<i32>,
    /// spec.request: the PEM-encoded PKCS#10 request.
    pub request: Vec<u8>,
    /// What already decided the CSR: an Approved or Denied condition, or an issued certificate.
    pub decided: Option<String>,
    /// Whether an Approved condition is present and no Denied or Failed one: the signer issues
    /// (or issued) its certificate.
    pub approved: bool,
}
