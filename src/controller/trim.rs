//! What the CSR cache keeps: only what decisions read, so the cache of a large cluster stays small.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

/// Drops what decisions never read from a watched CSR before it is cached: managedFields always,
/// and, once an Approved or Denied condition is present (triage stops there), everything but the
/// signer, the username and the conditions' types.
pub(super) fn trim(csr: &mut CertificateSigningRequest) {
    csr.metadata.managed_fields = None;
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
    use super::trim;
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
