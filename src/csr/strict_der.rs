//! Strict DER: the request decodes with RustCrypto's `der` (canonical tags, minimal lengths, no
//! indefinite lengths, nothing after the request), re-encodes to the very same bytes, and has one
//! reading of everything the signer copies into a certificate: the subject and the SANs.

use std::net::IpAddr;

use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Any, Decode, Encode, Tag, Tagged};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::name::Name;
use x509_cert::request::CertReq;

use super::{CsrError, CsrFacts};

const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const ORGANIZATION: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
const EXTENSION_REQUEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.14");
const SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// Decodes a request that is strict DER and re-encodes to exactly `der`.
pub(super) fn decode(der: &[u8]) -> Result<CertReq, CsrError> {
    let request = CertReq::from_der(der).map_err(|e| CsrError::NotStrictDer(e.to_string()))?;
    let encoded = request.to_der().map_err(|e| CsrError::NotStrictDer(e.to_string()))?;
    if encoded != der {
        return Err(CsrError::NotStrictDer("the request does not re-encode to the same bytes".into()));
    }
    Ok(request)
}

/// The subject and SANs of a decoded request, each with exactly one reading.
pub(super) fn facts(request: &CertReq) -> Result<CsrFacts, CsrError> {
    let mut facts = CsrFacts::default();
    read_subject(&request.info.subject, &mut facts)?;
    if let Some(sans) = subject_alt_names(request)? {
        for name in &sans.0 {
            facts.add_san(name)?;
        }
    }
    Ok(facts)
}

/// Each RDN holds one attribute; only CN and O, as UTF8String or PrintableString.
fn read_subject(subject: &Name, facts: &mut CsrFacts) -> Result<(), CsrError> {
    for rdn in subject.iter_rdn() {
        if rdn.len() != 1 {
            return Err(CsrError::Ambiguous(format!("a subject RDN holds {} attributes, expected one", rdn.len())));
        }
    }
    for attribute in subject.iter() {
        let value = directory_string(&attribute.value)?;
        match attribute.oid {
            COMMON_NAME => facts.common_names.push(value),
            ORGANIZATION => facts.organizations.push(value),
            other => {
                return Err(CsrError::Ambiguous(format!("subject attribute {other} is not accepted (only CN and O)")));
            }
        }
    }
    Ok(())
}

/// A subject string as Go reads it: UTF8String or PrintableString, universal and primitive.
fn directory_string(value: &Any) -> Result<String, CsrError> {
    let text = match value.tag() {
        Tag::Utf8String => Utf8StringRef::new(value.value()).map(|s| s.as_str().to_owned()),
        Tag::PrintableString => PrintableStringRef::new(value.value()).map(|s| s.as_str().to_owned()),
        other => {
            return Err(CsrError::Ambiguous(format!(
                "a subject value is tagged {other}, expected UTF8String or PrintableString"
            )));
        }
    };
    text.map_err(|e| CsrError::NotStrictDer(format!("a subject value: {e}")))
}

/// The single SubjectAltName extension of the single extensionRequest attribute, if any.
fn subject_alt_names(request: &CertReq) -> Result<Option<SubjectAltName>, CsrError> {
    let mut extension_requests = request.info.attributes.iter().filter(|attribute| attribute.oid == EXTENSION_REQUEST);
    if let Some(other) = request.info.attributes.iter().find(|attribute| attribute.oid != EXTENSION_REQUEST) {
        return Err(CsrError::Ambiguous(format!("attribute {} is not accepted (only extensionRequest)", other.oid)));
    }
    let Some(attribute) = extension_requests.next() else { return Ok(None) };
    if extension_requests.next().is_some() {
        return Err(CsrError::Ambiguous("more than one extensionRequest attribute".into()));
    }
    let [value] = attribute.values.as_slice() else {
        return Err(CsrError::Ambiguous(format!(
            "the extensionRequest attribute holds {} values, expected one",
            attribute.values.len()
        )));
    };
    let extensions: Vec<Extension> = reencoded(value, "the extensionRequest")?;
    let mut seen = Vec::new();
    for extension in &extensions {
        if seen.contains(&extension.extn_id) {
            return Err(CsrError::Ambiguous(format!("extension {} appears more than once", extension.extn_id)));
        }
        seen.push(extension.extn_id);
    }
    extensions
        .iter()
        .find(|extension| extension.extn_id == SUBJECT_ALT_NAME)
        .map(|extension| {
            SubjectAltName::from_der(extension.extn_value.as_bytes())
                .map_err(|e| CsrError::NotStrictDer(format!("the SubjectAltName extension: {e}")))
        })
        .transpose()
}

/// Decodes `value` as `T`, checking its tag as well as its contents.
fn reencoded<T: for<'a> Decode<'a, Error = x509_cert::der::Error>>(value: &Any, what: &str) -> Result<T, CsrError> {
    let der = value.to_der().map_err(|e| CsrError::NotStrictDer(format!("{what}: {e}")))?;
    T::from_der(&der).map_err(|e| CsrError::NotStrictDer(format!("{what}: {e}")))
}

impl CsrFacts {
    fn add_san(&mut self, name: &GeneralName) -> Result<(), CsrError> {
        match name {
            GeneralName::DnsName(dns) => self.dns_names.push(dns.to_string()),
            GeneralName::IpAddress(bytes) => self.ip_addresses.push(ip_from_bytes(bytes.as_bytes())?),
            GeneralName::Rfc822Name(email) => self.emails.push(email.to_string()),
            GeneralName::UniformResourceIdentifier(uri) => self.uris.push(uri.to_string()),
            GeneralName::OtherName(other) => self.other_sans.push(format!("otherName {}", other.type_id)),
            GeneralName::DirectoryName(name) => self.other_sans.push(format!("directoryName {name}")),
            GeneralName::EdiPartyName(_) => self.other_sans.push("ediPartyName".into()),
            GeneralName::RegisteredId(oid) => self.other_sans.push(format!("registeredID {oid}")),
        }
        Ok(())
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Result<IpAddr, CsrError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes)
        .map(IpAddr::from)
        .map_err(|_| CsrError::Ambiguous(format!("an IP SAN of {} bytes", bytes.len())))
}
