//! What the CSR cache keeps: only what decisions read, so the cache of a large cluster stays small.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::csr::MAX_REQUEST_BYTES;
use crate::kubernetes::csr_object::is_approved;
use crate::policy::KUBELET_CLIENT_SIGNER;

/// Drops what decisions and the approval write never read from a watched CSR before it is cached:
/// of its metadata all but the name, uid, resourceVersion and creation time (labels, annotations,
/// finalizers and managedFields may be as large as an object is; the write is a patch of the
/// conditions, so it needs none of them); `spec.extra` and `spec.uid`; of a request larger than
/// [`MAX_REQUEST_BYTES`], all but its first `MAX_REQUEST_BYTES + 1` bytes (the canonical gate
/// refuses it on its length alone, so a hostile CSR costs the cache at most that); and, once an
/// Approved or Denied condition is present (triage stops there), everything but the signer, the
/// username, the conditions' types and (of an approved client CSR) the request. A pending CSR keeps its conditions whole: the write sends
/// them back.
pub(super) fn trim(csr: &mut CertificateSigningRequest) {
    let metadata = std::mem::take(&mut csr.metadata);
    csr.metadata = ObjectMeta {
        name: metadata.name,
        uid: metadata.uid,
        resource_version: metadata.resource_version,
        creation_timestamp: metadata.creation_timestamp,
        ..ObjectMeta::default()
    };
    (csr.spec.extra, csr.spec.uid) = (None, None);
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
        // the username and the creation time; one client certificate per Machine the request of
        // an approved client CSR (its common name). Nothing reads the rest of a decided CSR.
        let issued_client = csr.spec.signer_name == KUBELET_CLIENT_SIGNER && is_approved(csr);
        let spec = &mut csr.spec;
        if !issued_client {
            spec.request.0 = Vec::new();
        }
        (spec.groups, spec.usages) = (None, None);
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference, Time};

    fn csr(conditions: &[&str]) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: kept_metadata(),
            spec: CertificateSigningRequestSpec {
                request: ByteString(b"request".to_vec()),
                signer_name: "kubernetes.io/kubelet-serving".into(),
                username: Some("system:node:n".into()),
                groups: Some(vec!["system:nodes".into()]),
                usages: Some(vec!["server auth".into()]),
                uid: Some("u".into()),
                extra: Some([("k".to_owned(), vec!["v".to_owned()])].into()),
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

    /// The metadata the cache keeps.
    fn kept_metadata() -> ObjectMeta {
        ObjectMeta {
            name: Some("csr-1".into()),
            uid: Some("uid-1".into()),
            resource_version: Some("42".into()),
            creation_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
    }

    /// `csr` with everything in its metadata that the cache drops.
    fn with_dropped_metadata(mut csr: CertificateSigningRequest) -> CertificateSigningRequest {
        let strings = || Some([("k".to_owned(), "v".to_owned())].into());
        csr.metadata = ObjectMeta {
            labels: strings(),
            annotations: strings(),
            finalizers: Some(vec!["example.com/f".into()]),
            owner_references: Some(vec![OwnerReference::default()]),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            generate_name: Some("csr-".into()),
            generation: Some(1),
            deletion_grace_period_seconds: Some(0),
            deletion_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            namespace: Some("n".into()),
            self_link: Some("/x".into()),
            ..csr.metadata
        };
        csr
    }

    #[test]
    fn a_pending_csr_keeps_what_decisions_and_the_write_read() {
        let mut pending = with_dropped_metadata(csr(&["Other"]));
        trim(&mut pending);
        let mut expected = csr(&["Other"]);
        (expected.spec.extra, expected.spec.uid) = (None, None);
        assert_eq!(pending, expected);
        assert_eq!(pending.metadata, kept_metadata());
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
            let mut csr = with_dropped_metadata(csr(&["Other", decided]));
            trim(&mut csr);
            assert_eq!(csr.metadata, kept_metadata());
            assert!(csr.spec.request.0.is_empty());
            assert_eq!((csr.spec.groups.as_ref(), csr.spec.usages.as_ref()), (None, None));
            assert_eq!((csr.spec.uid.as_ref(), csr.spec.extra.as_ref()), (None, None));
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

    #[test]
    fn an_approved_client_csr_keeps_its_request_for_one_client_certificate_per_machine() {
        let client = |conditions: &[&str]| {
            let mut csr = csr(conditions);
            csr.spec.signer_name = crate::policy::KUBELET_CLIENT_SIGNER.into();
            trim(&mut csr);
            csr.spec.request.0
        };
        assert_eq!(client(&["Approved"]), b"request");
        for conditions in [&["Denied"][..], &["Approved", "Failed"], &["Approved", "Denied"]] {
            assert!(client(conditions).is_empty(), "{conditions:?}");
        }
    }
}
