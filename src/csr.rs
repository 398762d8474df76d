//! PKCS#10 parsing: from the PEM text of a CSR's `spec.request` to plain [`CsrFacts`], with the
//! self-signature verified. Anything ambiguous (extra PEM blocks, trailing DER bytes, duplicate
//! extensions, undecodable SAN entries) is an error, so what we check is what the signer will see.

use std::net::IpAddr;

use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;
use x509_parser::x509::X509Name;

/// The PEM label of a PKCS#10 request.
const PEM_LABEL: &str = "CERTIFICATE REQUEST";

/// Why a request could not be turned into [`CsrFacts`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// No PEM block at all.
    #[error("spec.request holds no PEM block")]
    NoPemBlock,
    /// A PEM block is present but cannot be decoded.
    #[error("spec.request holds an undecodable PEM block: {0}")]
    BadPem(String),
    /// More than one PEM block.
    #[error("spec.request holds {0} PEM blocks, expected exactly one")]
    ManyPemBlocks(usize),
    /// The block is not a `CERTIFICATE REQUEST`.
    #[error("spec.request holds a {0:?} PEM block, expected {PEM_LABEL:?}")]
    WrongLabel(String),
    /// The DER inside the block is not a PKCS#10 request.
    #[error("the request is not valid PKCS#10 DER: {0}")]
    BadDer(String),
    /// The request's structure is valid DER but ambiguous or unusable.
    #[error("the request is ambiguous: {0}")]
    Ambiguous(String),
    /// The self-signature does not verify with the request's own public key.
    #[error("the request's signature does not verify: {0}")]
    BadSignature(String),
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
    /// IP SANs.
    pub ip_addresses: Vec<IpAddr>,
    /// Email (RFC 822) SANs.
    pub emails: Vec<String>,
    /// URI SANs.
    pub uris: Vec<String>,
    /// SANs of any other type, described for messages.
    pub other_sans: Vec<String>,
}

impl CsrFacts {
    /// Parses and verifies `spec.request`: exactly one `CERTIFICATE REQUEST` PEM block.
    pub fn from_pem(pem: &[u8]) -> Result<CsrFacts, CsrError> {
        let der = single_block(pem)?;
        CsrFacts::from_der(&der)
    }

    /// Parses and verifies a DER-encoded PKCS#10 request; trailing bytes are an error.
    pub fn from_der(der: &[u8]) -> Result<CsrFacts, CsrError> {
        let (rest, request) = X509CertificationRequest::from_der(der).map_err(|e| CsrError::BadDer(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CsrError::Ambiguous(format!("{} bytes follow the request", rest.len())));
        }
        request.verify_signature().map_err(|e| CsrError::BadSignature(e.to_string()))?;
        let info = &request.certification_request_info;
        let mut facts = CsrFacts {
            common_names: name_values(&info.subject, NameAttr::CommonName)?,
            organizations: name_values(&info.subject, NameAttr::Organization)?,
            ..CsrFacts::default()
        };
        for name in subject_alt_names(&request)? {
            facts.add_san(name)?;
        }
        Ok(facts)
    }

    fn add_san(&mut self, name: &GeneralName<'_>) -> Result<(), CsrError> {
        match name {
            GeneralName::DNSName(dns) => self.dns_names.push((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => self.ip_addresses.push(ip_from_bytes(bytes)?),
            GeneralName::RFC822Name(email) => self.emails.push((*email).to_owned()),
            GeneralName::URI(uri) => self.uris.push((*uri).to_owned()),
            GeneralName::Invalid(tag, _) => {
                return Err(CsrError::Ambiguous(format!("undecodable SAN entry with tag {tag}")));
            }
            other => self.other_sans.push(describe_other(other)),
        }
        Ok(())
    }
}

fn single_block(pem: &[u8]) -> Result<Vec<u8>, CsrError> {
    let blocks =
        Pem::iter_from_buffer(pem).collect::<Result<Vec<_>, _>>().map_err(|e| CsrError::BadPem(e.to_string()))?;
    match blocks.as_slice() {
        [] => Err(CsrError::NoPemBlock),
        [block] if block.label == PEM_LABEL => Ok(block.contents.clone()),
        [block] => Err(CsrError::WrongLabel(block.label.clone())),
        many => Err(CsrError::ManyPemBlocks(many.len())),
    }
}

#[derive(Clone, Copy)]
enum NameAttr {
    CommonName,
    Organization,
}

fn name_values(subject: &X509Name<'_>, which: NameAttr) -> Result<Vec<String>, CsrError> {
    let attrs: Vec<_> = match which {
        NameAttr::CommonName => subject.iter_common_name().collect(),
        NameAttr::Organization => subject.iter_organization().collect(),
    };
    attrs
        .into_iter()
        .map(|attr| {
            attr.as_str()
                .map(str::to_owned)
                .map_err(|e| CsrError::Ambiguous(format!("subject attribute is not a string: {e}")))
        })
        .collect()
}

/// The SAN entries of the request's single SubjectAltName extension (none if it has none).
fn subject_alt_names<'a>(request: &'a X509CertificationRequest<'a>) -> Result<Vec<&'a GeneralName<'a>>, CsrError> {
    let mut extension_requests = 0;
    let mut san_lists = Vec::new();
    for attr in request.certification_request_info.iter_attributes() {
        let ParsedCriAttribute::ExtensionRequest(extensions) = attr.parsed_attribute() else {
            continue;
        };
        extension_requests += 1;
        for ext in &extensions.extensions {
            match ext.parsed_extension() {
                ParsedExtension::ParseError { error } => {
                    return Err(CsrError::Ambiguous(format!("extension {} does not parse: {error}", ext.oid)));
                }
                ParsedExtension::SubjectAlternativeName(san) => san_lists.push(&san.general_names),
                _ => {}
            }
        }
    }
    if extension_requests > 1 {
        return Err(CsrError::Ambiguous("more than one extensionRequest attribute".into()));
    }
    match san_lists.as_slice() {
        [] => Ok(Vec::new()),
        [names] => Ok(names.iter().collect()),
        _ => Err(CsrError::Ambiguous("more than one SubjectAltName extension".into())),
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Result<IpAddr, CsrError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes)
        .map(IpAddr::from)
        .map_err(|_| CsrError::Ambiguous(format!("IP SAN of {} bytes", bytes.len())))
}

fn describe_other(name: &GeneralName<'_>) -> String {
    match name {
        GeneralName::OtherName(oid, _) => format!("otherName {oid}"),
        GeneralName::DirectoryName(dn) => format!("directoryName {dn}"),
        GeneralName::RegisteredID(oid) => format!("registeredID {oid}"),
        GeneralName::X400Address(_) => "x400Address".into(),
        GeneralName::EDIPartyName(_) => "ediPartyName".into(),
        other => format!("{other:?}"),
    }
}
