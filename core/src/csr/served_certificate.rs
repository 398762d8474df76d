//! A certificate a kubelet serves, read into plain values: its subject and SANs (read as strictly
//! as a request's, so both compare as the same kinds of values), serial number and validity.

use jiff::Timestamp;
use x509_cert::Certificate;
use x509_cert::der::Decode;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::time::Time;

use super::causes::{Ambiguity, NotStrict};
use super::strict_der::read_subject;
use super::{CsrError, CsrFacts};

/// What a served certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// The subject and SANs, as a request's are read.
    pub names: CsrFacts,
    /// The serial number, as colon-separated hex bytes.
    pub serial: String,
    /// notBefore.
    pub not_before: Timestamp,
    /// notAfter.
    pub not_after: Timestamp,
}

impl CertificateFacts {
    /// Reads a DER-encoded X.509 certificate; its chain is not verified here.
    pub fn from_der(der: &[u8]) -> Result<CertificateFacts, CsrError> {
        let certificate = Certificate::from_der(der).map_err(|e| CsrError::NotStrictDer(NotStrict::Certificate(e)))?;
        let tbs = certificate.tbs_certificate();
        let mut names = CsrFacts::default();
        read_subject(tbs.subject(), &mut names)?;
        let sans =
            tbs.get_extension::<SubjectAltName>().map_err(|e| CsrError::Ambiguous(Ambiguity::SubjectAltName(e)))?;
        for name in sans.iter().flat_map(|(_, sans)| sans.0.iter()) {
            names.add_san(name)?;
        }
        let validity = tbs.validity();
        Ok(CertificateFacts {
            names,
            serial: tbs.serial_number().to_string(),
            not_before: timestamp(validity.not_before)?,
            not_after: timestamp(validity.not_after)?,
        })
    }
}

fn timestamp(time: Time) -> Result<Timestamp, CsrError> {
    let since_epoch = time.to_unix_duration();
    i64::try_from(since_epoch.as_secs())
        .ok()
        .and_then(|seconds| Timestamp::from_second(seconds).ok())
        .ok_or(CsrError::NotStrictDer(NotStrict::ValidityTime(since_epoch)))
}
