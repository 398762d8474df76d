//! What the CSR cache keeps: only what decisions read, so the cache of a large cluster stays small.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use crate::csr::MAX_REQUEST_BYTES;

/// Drops what decisions never read from a watched CSR before it is cached: managedFields always;
/// of a request larger than [`MAX_REQUEST_BYTES`], all but its first `MAX_REQUEST_BYTES + 1` bytes
/// (the canonical gate refuses it on its length alone, so a hostile CSR costs the cache at most
/// that); and, once an Approved or Denied condition is present (triage stops there), everything
/// but the signer, the username and the conditions' types.
pub(super) fn trim(csr: &mut CertificateSigningRequest) {
    csr.metadata.managed_fields = None;
    let request = &mut csr.spec.request.0;
    if request.len() > MAX_REQUEST_BYTES + 1 {
        request.truncate(MAX_REQUEST_BYTES + 1);
        request.shrink_to_fit();
    }
    let decided = csr
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| matches!(c.type_.as_str(), "Approved" | "Denied")));
    if decided {
        // Triage needs the signer and the decided condition; the machine-mode brake the signer,
        // the username and the creation time. Nothing reads the rest of a decided CSR.
        let spec = &mut csr.spec;
        spec.request.0 = Vec::new();
        (spec.groups, spec.usages, spec.extra, spec.uid) = (None, None, None, None);
        if let Some(status) = csr.status.as_mut() {
            status.certificate = None;
            for condition in status.conditions.iter_mut().flatten() {
                (condition.message, condition.reason) = (None, None);
                (condition.last_update_time, condition.last_transition_time) = (None, None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_REQUEST_BYTES, trim};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

    fn csr(conditions: &[&str]) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                creation_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(b"request".to_vec()),
                signer_name: "kubernetes.io/kubelet-serving".into(),
                username: Some("system:node:n".into()),
                groups: Some(vec!["system:nodes".into()]),
                usages: Some(vec!["server auth".into()]),
                uid: Some("u".into()),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus {
                certificate: Some(ByteString(b"cert".to_vec())),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|type_| CertificateSigningRequestCondition {
                            type_: (*type_).into(),
                            status: "True".into(),
                            reason: Some("R".into()),
                            message: Some("M".into()),
                            last_update_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                            last_transition_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                        })
                        .collect(),
                ),
            }),
        }
    }

    #[test]
    fn a_pending_csr_loses_only_its_managed_fields() {
        let mut pending = csr(&["Other"]);
        trim(&mut pending);
        let mut expected = csr(&["Other"]);
        expected.metadata.managed_fields = None;
        assert_eq!(pending, expected);
    }

    #[test]
    fn an_oversized_request_keeps_one_byte_more_than_the_gate_accepts_and_is_still_refused() {
        let oversized = || {
            let mut csr = csr(&["Other"]);
            csr.spec.request = ByteString(vec![b'A'; 1024 * 1024]);
            csr
        };
        let mut cached = oversized();
        trim(&mut cached);
        assert_eq!(cached.spec.request.0.len(), MAX_REQUEST_BYTES + 1);
        assert!(cached.spec.request.0.capacity() <= MAX_REQUEST_BYTES + 1);
        let refused = |csr: &CertificateSigningRequest| crate::csr::CsrFacts::from_pem(&csr.spec.request.0).err();
        assert_eq!(refused(&cached), Some(crate::csr::CsrError::TooLarge));
        assert_eq!(refused(&cached), refused(&oversized()));
        // At the limit and one over, nothing is cut.
        for len in [MAX_REQUEST_BYTES, MAX_REQUEST_BYTES + 1] {
            let mut csr = csr(&["Other"]);
            csr.spec.request = ByteString(vec![b'A'; len]);
            trim(&mut csr);
            assert_eq!(csr.spec.request.0.len(), len);
        }
    }

    #[test]
    fn a_decided_csr_keeps_what_triage_and_the_brake_read() {
        for decided in ["Approved", "Denied"] {
            let mut csr = csr(&["Other", decided]);
            trim(&mut csr);
            assert_eq!(csr.metadata.managed_fields, None);
            assert!(csr.spec.request.0.is_empty());
            assert_eq!((csr.spec.groups.as_ref(), csr.spec.usages.as_ref(), csr.spec.uid.as_ref()), (None, None, None));
            assert_eq!(csr.spec.signer_name, "kubernetes.io/kubelet-serving");
            assert_eq!(csr.spec.username.as_deref(), Some("system:node:n"));
            assert!(csr.metadata.creation_timestamp.is_some());
            let status = csr.status.unwrap_or_default();
            assert_eq!(status.certificate, None);
            let conditions = status.conditions.unwrap_or_default();
            let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
            assert_eq!(types, ["Other", decided]);
            assert!(conditions.iter().all(|c| c.message.is_none() && c.reason.is_none()));
            assert!(conditions.iter().all(|c| c.last_update_time.is_none() && c.last_transition_time.is_none()));
        }
    }
}
