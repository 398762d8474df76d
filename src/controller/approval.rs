//! The approval write: a merge patch of the CSR's conditions through the `approval` subresource,
//! and messages cut to what the apiserver stores.

use http::HeaderValue;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::policy::{Decision, DecisionKind};

/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
pub(super) const MAX_MESSAGE_BYTES: usize = 1024;

/// The Accept header that makes the apiserver answer a write with the object's metadata only
/// (meta.k8s.io/v1 PartialObjectMetadata) instead of the whole CSR and its request.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Writes the decision's condition: a JSON merge patch ([`condition_patch`]) to the `approval`
/// subresource, preconditioned on the cached resourceVersion. A patch leaves the labels,
/// annotations and finalizers others keep on the CSR as they are (the subresource takes metadata
/// from a PUT's body), and the cache need not hold them. The apiserver answers with the metadata
/// only, so no reply carries a request back (a hostile one is as large as an object may be).
pub async fn write_condition(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    decision: &Decision,
) -> Result<(), kube::Error> {
    let patch = condition_patch(csr, decision).ok_or_else(|| {
        kube::Error::BuildRequest(kube::core::request::Error::Validation(format!(
            "CSR {} has no resourceVersion to precondition the write on",
            csr.name_any()
        )))
    })?;
    let mut request = kube::core::Request::new(CertificateSigningRequest::url_path(&(), None))
        .patch_subresource("approval", &csr.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(http::header::ACCEPT, HeaderValue::from_static(METADATA_ONLY));
    api.clone().into_client().request_text(request).await.map(drop)
}

/// The body of the approval write: the cached conditions and the decision's, and the cached
/// resourceVersion, which the apiserver checks (a CSR changed since it was read answers with a
/// conflict, so a stale view never writes). None when the CSR has no resourceVersion.
fn condition_patch(csr: &CertificateSigningRequest, decision: &Decision) -> Option<Value> {
    let resource_version = csr.metadata.resource_version.as_deref()?;
    let now = Time(Timestamp::now());
    let condition = CertificateSigningRequestCondition {
        type_: if decision.kind == DecisionKind::Approve { "Approved" } else { "Denied" }.to_owned(),
        status: "True".to_owned(),
        reason: Some(decision.reason.as_str().to_owned()),
        message: Some(truncate(&decision.message, MAX_MESSAGE_BYTES)),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    // A merge patch replaces a list whole: the cached conditions go first, unchanged.
    let cached = csr.status.as_ref().and_then(|status| status.conditions.as_deref()).unwrap_or_default();
    let conditions: Vec<&CertificateSigningRequestCondition> = cached.iter().chain([&condition]).collect();
    Some(json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": conditions},
    }))
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn messages_are_cut_to_1024_bytes_on_a_character_boundary() {
        let short = "ä".repeat(512);
        assert_eq!(truncate(&short, MAX_MESSAGE_BYTES), short);
        let long = "ä".repeat(600);
        let cut = truncate(&long, MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES && cut.len() > MAX_MESSAGE_BYTES - 4, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }

    fn csr(
        resource_version: Option<&str>,
        conditions: Option<Vec<CertificateSigningRequestCondition>>,
    ) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                resource_version: resource_version.map(Into::into),
                uid: Some("u-1".into()),
                labels: Some([("a".to_owned(), "b".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                signer_name: "kubernetes.io/kubelet-serving".into(),
                request: k8s_openapi::ByteString(b"request".to_vec()),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus { conditions, ..Default::default() }),
        }
    }

    #[test]
    fn the_patch_sets_the_conditions_and_the_precondition_only() {
        let earlier =
            CertificateSigningRequestCondition { type_: "Other".into(), status: "True".into(), ..Default::default() };
        for (kind, reason, type_) in [
            (DecisionKind::Approve, Reason::AutoApproved, "Approved"),
            (DecisionKind::Deny, Reason::HostnameMismatch, "Denied"),
        ] {
            let decision = Decision { kind, reason, message: "m".repeat(2000) };
            for cached in [None, Some(vec![]), Some(vec![earlier.clone()])] {
                let patch = condition_patch(&csr(Some("42"), cached.clone()), &decision).unwrap();
                assert_eq!(patch["metadata"], serde_json::json!({"resourceVersion": "42"}), "{patch}");
                let keys: Vec<&String> = patch.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["metadata", "status"], "{patch}");
                assert_eq!(patch["status"].as_object().unwrap().len(), 1, "{patch}");
                let conditions: Vec<CertificateSigningRequestCondition> =
                    serde_json::from_value(patch["status"]["conditions"].clone()).unwrap();
                let cached = cached.unwrap_or_default();
                assert_eq!(conditions.len(), cached.len() + 1);
                assert_eq!(conditions[..cached.len()], cached[..]);
                let added = &conditions[cached.len()];
                assert_eq!((added.type_.as_str(), added.status.as_str()), (type_, "True"));
                assert_eq!(added.reason.as_deref(), Some(reason.as_str()));
                assert!(added.message.as_ref().is_some_and(|m| m.len() <= MAX_MESSAGE_BYTES && m.ends_with('…')));
                assert!(added.last_update_time.is_some() && added.last_transition_time.is_some());
            }
        }
    }

    #[test]
    fn no_patch_without_a_resource_version_to_precondition_it_on() {
        let decision = Decision { kind: DecisionKind::Approve, reason: Reason::AutoApproved, message: "m".into() };
        assert_eq!(condition_patch(&csr(None, None), &decision), None);
    }
}
