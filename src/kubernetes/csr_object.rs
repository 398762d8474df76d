//! A CertificateSigningRequest object read into the decision core's [`Submission`], and the
//! decision state of the object itself (decided, approved).

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use crate::policy::Submission;

/// The parts of `csr` that decisions read.
pub fn submission(csr: &CertificateSigningRequest) -> Submission {
    let spec = &csr.spec;
    Submission {
        name: csr.metadata.name.clone().unwrap_or_default(),
        created: csr.metadata.creation_timestamp.as_ref().map(|t| t.0),
        signer_name: spec.signer_name.clone(),
        username: spec.username.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
        usages: spec.usages.clone().unwrap_or_default(),
        expiration_seconds: spec.expiration_seconds,
        request: spec.request.0.clone(),
        decided: decided_by(csr),
        approved: is_approved(csr),
    }
}

/// True when an Approved or Denied condition or an issued certificate is present.
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    decided_by(csr).is_some()
}

/// True when an Approved condition is present and no Denied or Failed one.
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    let types = || csr.status.iter().flat_map(|status| status.conditions.iter().flatten()).map(|c| c.type_.as_str());
    types().any(|t| t == "Approved") && !types().any(|t| t == "Denied" || t == "Failed")
}

fn decided_by(csr: &CertificateSigningRequest) -> Option<String> {
    let status = csr.status.as_ref()?;
    if status.certificate.as_ref().is_some_and(|c| !c.0.is_empty()) {
        return Some("a certificate was issued".into());
    }
    status.conditions.iter().flatten().find_map(|c| {
        matches!(c.type_.as_str(), "Approved" | "Denied").then(|| format!("condition {} is present", c.type_))
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestCondition, CertificateSigningRequestStatus};

    use super::*;

    fn with_status(certificate: &[u8], conditions: &[&str]) -> CertificateSigningRequest {
        let conditions = conditions
            .iter()
            .map(|type_| CertificateSigningRequestCondition { type_: (*type_).into(), ..Default::default() })
            .collect();
        let status = CertificateSigningRequestStatus {
            certificate: Some(ByteString(certificate.to_vec())),
            conditions: Some(conditions),
        };
        CertificateSigningRequest { status: Some(status), ..Default::default() }
    }

    #[test]
    fn a_certificate_or_an_approved_or_denied_condition_decides_a_csr() {
        let cases = [
            (with_status(b"PEM", &[]), Some("a certificate was issued")),
            (with_status(b"", &["Approved"]), Some("condition Approved is present")),
            (with_status(b"", &["Failed", "Denied"]), Some("condition Denied is present")),
            (with_status(b"", &[]), None),
            (with_status(b"", &["Failed"]), None),
            (CertificateSigningRequest::default(), None),
        ];
        for (csr, decided) in cases {
            assert_eq!(submission(&csr).decided.as_deref(), decided, "{:?}", csr.status);
            assert_eq!(is_decided(&csr), decided.is_some(), "{:?}", csr.status);
        }
    }

    #[test]
    fn approved_means_an_approved_condition_and_no_denied_or_failed_one() {
        let cases = [
            (&["Approved"][..], true),
            (&["Failed", "Approved"], false),
            (&["Approved", "Denied"], false),
            (&["Denied"], false),
            (&[], false),
        ];
        for (conditions, approved) in cases {
            assert_eq!(submission(&with_status(b"", conditions)).approved, approved, "{conditions:?}");
        }
        assert!(!submission(&with_status(b"PEM", &[])).approved, "a certificate without a condition");
    }
}
