//! The approval write's body: the CSR with the decision's condition added, and messages cut to
//! what the apiserver stores.

use http::HeaderValue;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

use crate::policy::{Decision, DecisionKind};

/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
pub(super) const MAX_MESSAGE_BYTES: usize = 1024;

/// The Accept header that makes the apiserver answer a write with the object's metadata only
/// (meta.k8s.io/v1 PartialObjectMetadata) instead of the whole CSR and its request.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Writes the decision's condition: PUT of [`with_condition`] to the `approval` subresource,
/// preconditioned on the cached resourceVersion. The apiserver answers with the metadata only, so
/// no reply carries a request back (a hostile one is as large as an object may be).
pub async fn write_condition(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    decision: &Decision,
) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(&with_condition(csr, decision)).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(CertificateSigningRequest::url_path(&(), None))
        .replace_subresource("approval", &csr.name_any(), &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(http::header::ACCEPT, HeaderValue::from_static(METADATA_ONLY));
    api.clone().into_client().request_text(request).await.map(drop)
}

/// The body of the approval write: the CSR with the decision's condition added, carrying the
/// cached resourceVersion as the precondition.
pub fn with_condition(csr: &CertificateSigningRequest, decision: &Decision) -> CertificateSigningRequest {
    let now = Time(Timestamp::now());
    let condition = CertificateSigningRequestCondition {
        type_: if decision.kind == DecisionKind::Approve { "Approved" } else { "Denied" }.to_owned(),
        status: "True".to_owned(),
        reason: Some(decision.reason.as_str().to_owned()),
        message: Some(truncate(&decision.message, MAX_MESSAGE_BYTES)),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    let mut status = csr.status.clone().unwrap_or_default();
    status.conditions.get_or_insert_with(Vec::new).push(condition);
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: csr.metadata.name.clone(),
            resource_version: csr.metadata.resource_version.clone(),
            uid: csr.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        spec: csr.spec.clone(),
        status: Some(status),
    }
}

/// `text` in at most `max` bytes: cut on a character boundary and marked with `…` when longer.
pub(super) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", prefix_within(text, max.saturating_sub('…'.len_utf8())))
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix_within(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Reason;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestSpec, CertificateSigningRequestStatus};

    #[test]
    fn messages_are_cut_to_1024_bytes_on_a_character_boundary() {
        let short = "ä".repeat(512);
        assert_eq!(truncate(&short, MAX_MESSAGE_BYTES), short);
        let long = "ä".repeat(600);
        let cut = truncate(&long, MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES && cut.len() > MAX_MESSAGE_BYTES - 4, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn the_body_adds_one_condition_and_keeps_the_precondition() {
        let earlier =
            CertificateSigningRequestCondition { type_: "Other".into(), status: "True".into(), ..Default::default() };
        let csr = CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                resource_version: Some("42".into()),
                uid: Some("u-1".into()),
                labels: Some([("a".to_owned(), "b".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                signer_name: "kubernetes.io/kubelet-serving".into(),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(vec![earlier.clone()]),
                ..Default::default()
            }),
        };
        for (kind, reason, type_) in [
            (DecisionKind::Approve, Reason::AutoApproved, "Approved"),
            (DecisionKind::Deny, Reason::HostnameMismatch, "Denied"),
        ] {
            let decision = Decision { kind, reason, message: "m".repeat(2000) };
            let body = with_condition(&csr, &decision);
            assert_eq!(body.metadata.name.as_deref(), Some("csr-1"));
            assert_eq!(body.metadata.resource_version.as_deref(), Some("42"));
            assert_eq!(body.metadata.uid.as_deref(), Some("u-1"));
            assert_eq!(body.metadata.labels, None);
            assert_eq!(body.spec, csr.spec);
            let conditions = body.status.and_then(|s| s.conditions).unwrap_or_default();
            assert_eq!(conditions.len(), 2);
            assert_eq!(conditions[0], earlier);
            let added = &conditions[1];
            assert_eq!((added.type_.as_str(), added.status.as_str()), (type_, "True"));
            assert_eq!(added.reason.as_deref(), Some(reason.as_str()));
            assert!(added.message.as_ref().is_some_and(|m| m.len() <= MAX_MESSAGE_BYTES && m.ends_with('…')));
            assert!(added.last_update_time.is_some() && added.last_transition_time.is_some());
        }
    }
}
