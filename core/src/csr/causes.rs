//! What is wrong with a request that is not strict DER, not one reading, or not signed as
//! accepted: the typed causes of [`CsrError`](super::CsrError), each saying it with the offending
//! value.

use std::time::Duration;

use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Error as DerError, Tag};

/// Why the DER is not strictly encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotStrict {
    /// The decoder's error.
    #[error("{0}")]
    Der(DerError),
    /// An OBJECT IDENTIFIER with a subidentifier that starts with 0x80.
    #[error("an OBJECT IDENTIFIER is not minimally encoded")]
    OidNotMinimal,
    /// A part, named, that does not decode or encode.
    #[error("{part}: {error}")]
    Part {
        /// The part, e.g. `the request`.
        part: &'static str,
        /// The decoder's or the encoder's error.
        error: DerError,
    },
    /// A part, named, that does not re-encode to the bytes it was read from.
    #[error("{0} does not re-encode to the same bytes")]
    NotReencoded(&'static str),
    /// A subject value that is not valid in its string type.
    #[error("a subject value: {0}")]
    SubjectValue(DerError),
    /// A certificate that does not decode.
    #[error("certificate: {0}")]
    Certificate(DerError),
    /// A certificate's validity time that is not a time the approver can represent.
    #[error("a validity time {0:?} after the epoch")]
    ValidityTime(Duration),
    /// A BIT STRING, named, with unused bits.
    #[error("the {0} BIT STRING has unused bits")]
    UnusedBits(&'static str),
}

/// What could be read in more than one way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguity {
    /// A subject RDN with other than one attribute.
    #[error("a subject RDN holds {0} attributes, expected one")]
    RdnAttributes(usize),
    /// A subject attribute other than CN and O.
    #[error("subject attribute {0} is not accepted (only CN and O)")]
    SubjectAttribute(ObjectIdentifier),
    /// A subject value of another string type.
    #[error("a subject value is tagged {0}, expected UTF8String or PrintableString")]
    SubjectValueTag(Tag),
    /// A request attribute other than extensionRequest.
    #[error("attribute {0} is not accepted (only extensionRequest)")]
    Attribute(ObjectIdentifier),
    /// Two extensionRequest attributes.
    #[error("more than one extensionRequest attribute")]
    ExtensionRequests,
    /// An extensionRequest attribute with other than one value.
    #[error("the extensionRequest attribute holds {0} values, expected one")]
    ExtensionRequestValues(usize),
    /// An extension that appears twice.
    #[error("extension {0} appears more than once")]
    RepeatedExtension(ObjectIdentifier),
    /// A certificate's SubjectAltName extension that cannot be read.
    #[error("the SubjectAltName extension: {0}")]
    SubjectAltName(DerError),
    /// An IP SAN of neither 4 nor 16 bytes.
    #[error("an IP SAN of {0} bytes")]
    IpSanLength(usize),
}

/// Which algorithm is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// The public key's algorithm, or its parameters.
    #[error("public key algorithm {0} with these parameters (accepted: RSA, ECDSA P-256/P-384, Ed25519)")]
    KeyAlgorithm(ObjectIdentifier),
    /// The signature algorithm, its parameters, or its pairing with the key.
    #[error("signature algorithm {0} with these parameters for this key")]
    SignatureAlgorithm(ObjectIdentifier),
}
