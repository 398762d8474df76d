//! Strict DER: the request decodes with RustCrypto's `der` (canonical tags, minimal lengths, no
//! indefinite lengths, nothing after the request), re-encodes to the very same bytes, and has one
//! reading of everything the signer copies into a certificate: the subject and the SANs.

use std::net::IpAddr;

use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Any, AnyRef, Decode, Encode, Reader, SliceReader, Tag, Tagged};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::name::Name;
use x509_cert::request::CertReq;

use super::causes::{Ambiguity, NotStrict};
use super::{CsrError, CsrFacts};

const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const ORGANIZATION: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
const EXTENSION_REQUEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.14");
const SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// Decodes a request that is strict DER, re-encodes to exactly `der` and writes every OBJECT
/// IDENTIFIER minimally.
pub(super) fn decode(der: &[u8]) -> Result<CertReq, CsrError> {
    let request = canonical(der, "the request")?;
    minimal_oids(der)?;
    Ok(request)
}

/// Every OBJECT IDENTIFIER in `der` (at any depth of constructed values) has minimal
/// subidentifiers: Go refuses a subidentifier starting with 0x80, which `der` keeps as written.
fn minimal_oids(der: &[u8]) -> Result<(), CsrError> {
    let not_strict = |e: x509_cert::der::Error| CsrError::NotStrictDer(NotStrict::Der(e));
    let mut reader = SliceReader::new(der).map_err(not_strict)?;
    while !reader.is_finished() {
        let value = AnyRef::decode(&mut reader).map_err(not_strict)?;
        if value.tag() == Tag::ObjectIdentifier && !is_minimal_oid(value.value()) {
            return Err(CsrError::NotStrictDer(NotStrict::OidNotMinimal));
        }
        if value.tag().is_constructed() {
            minimal_oids(value.value())?;
        }
    }
    Ok(())
}

/// No subidentifier starts with 0x80, and the last one ends.
fn is_minimal_oid(bytes: &[u8]) -> bool {
    let mut starts_subidentifier = true;
    for byte in bytes {
        if starts_subidentifier && *byte == 0x80 {
            return false;
        }
        starts_subidentifier = byte & 0x80 == 0;
    }
    bytes.last().is_some_and(|last| last & 0x80 == 0)
}

/// Decodes `der` as `T` and requires the re-encoding to be the very same bytes, so that nothing
/// (an explicit DEFAULT value, a non-canonical form the decoder tolerates) is read in two ways.
fn canonical<T>(der: &[u8], what: &'static str) -> Result<T, CsrError>
where
    T: for<'a> Decode<'a, Error = x509_cert::der::Error> + Encode,
{
    let part = |error| CsrError::NotStrictDer(NotStrict::Part { part: what, error });
    let value = T::from_der(der).map_err(part)?;
    let encoded = value.to_der().map_err(part)?;
    if encoded != der {
        return Err(CsrError::NotStrictDer(NotStrict::NotReencoded(what)));
    }
    Ok(value)
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
pub(super) fn read_subject(subject: &Name, facts: &mut CsrFacts) -> Result<(), CsrError> {
    for rdn in subject.iter_rdn() {
        if rdn.len() != 1 {
            return Err(CsrError::Ambiguous(Ambiguity::RdnAttributes(rdn.len())));
        }
    }
    for attribute in subject.iter() {
        let value = directory_string(&attribute.value)?;
        match attribute.oid {
            COMMON_NAME => facts.common_names.push(value),
            ORGANIZATION => facts.organizations.push(value),
            other => return Err(CsrError::Ambiguous(Ambiguity::SubjectAttribute(other))),
        }
    }
    Ok(())
}

/// A subject string as Go reads it: UTF8String or PrintableString, universal and primitive.
fn directory_string(value: &Any) -> Result<String, CsrError> {
    let text = match value.tag() {
        Tag::Utf8String => Utf8StringRef::new(value.value()).map(|s| s.as_str().to_owned()),
        Tag::PrintableString => PrintableStringRef::new(value.value()).map(|s| s.as_str().to_owned()),
        other => return Err(CsrError::Ambiguous(Ambiguity::SubjectValueTag(other))),
    };
    text.map_err(|e| CsrError::NotStrictDer(NotStrict::SubjectValue(e)))
}

/// The single SubjectAltName extension of the single extensionRequest attribute, if any.
fn subject_alt_names(request: &CertReq) -> Result<Option<SubjectAltName>, CsrError> {
    let mut extension_requests = request.info.attributes.iter().filter(|attribute| attribute.oid == EXTENSION_REQUEST);
    if let Some(other) = request.info.attributes.iter().find(|attribute| attribute.oid != EXTENSION_REQUEST) {
        return Err(CsrError::Ambiguous(Ambiguity::Attribute(other.oid)));
    }
    let Some(attribute) = extension_requests.next() else { return Ok(None) };
    if extension_requests.next().is_some() {
        return Err(CsrError::Ambiguous(Ambiguity::ExtensionRequests));
    }
    let [value] = attribute.values.as_slice() else {
        return Err(CsrError::Ambiguous(Ambiguity::ExtensionRequestValues(attribute.values.len())));
    };
    let extensions: Vec<Extension> = reencoded(value, "the extensionRequest")?;
    let mut seen = Vec::new();
    for extension in &extensions {
        if seen.contains(&extension.extn_id) {
            return Err(CsrError::Ambiguous(Ambiguity::RepeatedExtension(extension.extn_id)));
        }
        seen.push(extension.extn_id);
    }
    extensions
        .iter()
        .find(|extension| extension.extn_id == SUBJECT_ALT_NAME)
        .map(|extension| canonical(extension.extn_value.as_bytes(), "the SubjectAltName extension"))
        .transpose()
}

/// Decodes `value` as `T`, checking its tag as well as its contents, canonically.
fn reencoded<T>(value: &Any, what: &'static str) -> Result<T, CsrError>
where
    T: for<'a> Decode<'a, Error = x509_cert::der::Error> + Encode,
{
    let der = value.to_der().map_err(|error| CsrError::NotStrictDer(NotStrict::Part { part: what, error }))?;
    canonical(&der, what)
}

impl CsrFacts {
    /// Adds one SAN to the list of its type.
    pub(super) fn add_san(&mut self, name: &GeneralName) -> Result<(), CsrError> {
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
    <[u8; 16]>::try_from(bytes).map(IpAddr::from).map_err(|_| CsrError::Ambiguous(Ambiguity::IpSanLength(bytes.len())))
}

#[cfg(test)]
mod tests {
    use super::is_minimal_oid;

    #[test]
    fn oids_must_be_minimal() {
        assert!(is_minimal_oid(&[0x55, 0x1d, 0x11]));
        assert!(is_minimal_oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]));
        assert!(!is_minimal_oid(&[0x55, 0x80, 0x11]));
        assert!(!is_minimal_oid(&[0x80, 0x55]));
        assert!(!is_minimal_oid(&[0x55, 0x86]));
        assert!(!is_minimal_oid(&[]));
    }
}

#[cfg(test)]
mod reading {
    #![allow(clippy::unwrap_used)]

    use std::net::IpAddr;

    use super::{decode, facts};
    use crate::csr::{CsrError, CsrFacts};

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const OU: &[u8] = &[0x55, 0x04, 0x0b];
    const SAN: &[u8] = &[0x55, 0x1d, 0x11];
    const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
    const EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
    const CHALLENGE_PASSWORD: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x07];
    const UTF8: u8 = 0x0c;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let length = match content.len() {
            n @ 0..=0x7f => vec![n as u8],
            n @ 0x80..=0xff => vec![0x81, n as u8],
            n => vec![0x82, (n >> 8) as u8, n as u8],
        };
        [vec![tag], length, content.to_vec()].concat()
    }

    fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    fn set(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x31, &parts.concat())
    }

    fn rdn(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        set(&[seq(&[tlv(0x06, oid), tlv(tag, value)])])
    }

    fn node_subject() -> Vec<Vec<u8>> {
        vec![rdn(CN, UTF8, b"system:node:n1"), rdn(O, UTF8, b"system:nodes")]
    }

    fn extension(oid: &[u8], value: &[u8]) -> Vec<u8> {
        seq(&[tlv(0x06, oid), tlv(0x04, value)])
    }

    fn san(names: &[Vec<u8>]) -> Vec<u8> {
        extension(SAN, &seq(names))
    }

    fn dns(name: &str) -> Vec<u8> {
        tlv(0x82, name.as_bytes())
    }

    fn extension_request(values: &[Vec<u8>]) -> Vec<u8> {
        seq(&[tlv(0x06, EXTENSION_REQUEST), set(values)])
    }

    /// A request (with a dummy signature: these tests read, they do not verify).
    fn request(subject: &[Vec<u8>], attributes: &[Vec<u8>]) -> Vec<u8> {
        let key = seq(&[
            seq(&[
                tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]),
                tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]),
            ]),
            tlv(0x03, &[[0, 4].as_slice(), &[9; 64]].concat()),
        ]);
        let info = seq(&[tlv(0x02, &[0]), seq(subject), key, tlv(0xa0, &attributes.concat())]);
        let algorithm = seq(&[tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02])]);
        seq(&[info, algorithm, tlv(0x03, &[0, 1, 2, 3])])
    }

    fn read(der: &[u8]) -> Result<CsrFacts, CsrError> {
        facts(&decode(der)?)
    }

    fn with_sans(names: &[Vec<u8>]) -> Vec<u8> {
        request(&node_subject(), &[extension_request(&[seq(&[san(names)])])])
    }

    fn ambiguous(result: Result<CsrFacts, CsrError>, says: &str) {
        match result {
            Err(CsrError::Ambiguous(why)) => assert!(why.to_string().contains(says), "{why:?} does not say {says:?}"),
            other => panic!("expected an ambiguity about {says:?}, got {other:?}"),
        }
    }

    fn not_strict(result: Result<CsrFacts, CsrError>) {
        assert!(matches!(result, Err(CsrError::NotStrictDer(_))), "{result:?}");
    }

    #[test]
    fn a_node_request_is_read_whole() {
        let sans = [
            dns("n1.example.com"),
            tlv(0x87, &[10, 0, 0, 1]),
            tlv(0x87, &[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ];
        let read = read(&with_sans(&sans)).unwrap();
        assert_eq!(read.common_names, ["system:node:n1"]);
        assert_eq!(read.organizations, ["system:nodes"]);
        assert_eq!(read.dns_names, ["n1.example.com"]);
        assert_eq!(read.ip_addresses, ["10.0.0.1".parse::<IpAddr>().unwrap(), "fd00::1".parse().unwrap()]);
        let other = read_other_sans();
        assert_eq!((other.emails.len(), other.uris.len(), other.other_sans.len()), (1, 1, 1));
        assert_eq!(read_no_attributes().dns_names, Vec::<String>::new());
    }

    fn read_other_sans() -> CsrFacts {
        let sans = [tlv(0x81, b"a@b.c"), tlv(0x86, b"spiffe://x/y"), tlv(0x88, &[0x2a, 0x03])];
        read(&with_sans(&sans)).unwrap()
    }

    fn read_no_attributes() -> CsrFacts {
        read(&request(&node_subject(), &[])).unwrap()
    }

    #[test]
    fn printable_strings_are_read_and_checked() {
        let subject = [rdn(CN, 0x13, b"system:node:n1"), rdn(O, 0x13, b"system:nodes")];
        assert_eq!(read(&request(&subject, &[])).unwrap().common_names, ["system:node:n1"]);
        not_strict(read(&request(&[rdn(CN, 0x13, b"system:node:*")], &[])));
    }

    #[test]
    fn the_subject_has_one_reading() {
        ambiguous(read(&request(&[rdn(CN, 0x16, b"system:node:n1")], &[])), "tagged");
        ambiguous(read(&request(&[rdn(CN, 0x8c, b"system:node:n1")], &[])), "tagged");
        ambiguous(read(&request(&[rdn(OU, UTF8, b"x")], &[])), "only CN and O");
        let merged = set(&[
            seq(&[tlv(0x06, O), tlv(UTF8, b"system:nodes")]),
            seq(&[tlv(0x06, CN), tlv(UTF8, b"system:node:n1")]),
        ]);
        ambiguous(read(&request(&[merged], &[])), "holds 2 attributes");
    }

    #[test]
    fn the_attributes_have_one_reading() {
        let one = seq(&[san(&[dns("n1")])]);
        let two = extension_request(std::slice::from_ref(&one));
        ambiguous(read(&request(&node_subject(), &[two.clone(), two])), "more than one extensionRequest");
        let other = extension_request(&[seq(&[san(&[dns("n2")])])]);
        let values =
            extension_request(&[one.clone(), seq(&[san(&[dns("n2")]), extension(KEY_USAGE, &[3, 2, 5, 0xa0])])]);
        assert!(read(&request(&node_subject(), &[values])).is_err());
        ambiguous(read(&request(&node_subject(), &[other.clone(), other])), "more than one extensionRequest");
        let password = seq(&[tlv(0x06, CHALLENGE_PASSWORD), set(&[tlv(UTF8, b"x")])]);
        ambiguous(read(&request(&node_subject(), &[password])), "only extensionRequest");
        let twice = extension_request(&[seq(&[san(&[dns("n1")]), san(&[dns("n2")])])]);
        ambiguous(read(&request(&node_subject(), &[twice])), "more than once");
    }

    #[test]
    fn the_extensions_are_canonical() {
        let explicit_false = seq(&[tlv(0x06, SAN), tlv(0x01, &[0]), tlv(0x04, &seq(&[dns("n1")]))]);
        not_strict(read(&request(&node_subject(), &[extension_request(&[seq(&[explicit_false])])])));
        let trailing = extension(SAN, &[seq(&[dns("n1")]), vec![5, 0]].concat());
        not_strict(read(&request(&node_subject(), &[extension_request(&[seq(&[trailing])])])));
        let not_a_list = extension_request(&[tlv(0x04, &[1])]);
        not_strict(read(&request(&node_subject(), &[not_a_list])));
        ambiguous(read(&with_sans(&[tlv(0x87, &[10, 0, 0, 1, 0])])), "5 bytes");
    }

    #[test]
    fn object_identifiers_are_minimal_at_any_depth() {
        let loose = [0x55, 0x80, 0x1d, 0x11];
        let extension = seq(&[tlv(0x06, &loose), tlv(0x04, &seq(&[dns("n1")]))]);
        not_strict(read(&request(&node_subject(), &[extension_request(&[seq(&[extension])])])));
        not_strict(read(&request(&[rdn(&[0x55, 0x80, 0x04, 0x03], UTF8, b"x")], &[])));
    }

    #[test]
    fn nothing_follows_the_request() {
        not_strict(read(&[with_sans(&[dns("n1")]), vec![0]].concat()));
    }
}
