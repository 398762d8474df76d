//! The approval write: a decision's condition written through the CSR's `approval` subresource
//! ([`write_condition`]), preconditioned on the cached resourceVersion.

use std::time::Duration;

use http::HeaderValue;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::display::cut_message;
use crate::kubernetes::csr_name::csr_path;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::request::{RequestError, built, within};
use crate::policy::{Decision, DecisionKind};

/// The Accept header that makes the apiserver answer a write with the object's metadata only
/// (meta.k8s.io/v1 PartialObjectMetadata) instead of the whole CSR and its request.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The longest one write may take before it counts as failed (and is retried): the client sets no
/// read timeout, and an apiserver that stopped answering mid-write would otherwise hold the CSR.
/// Under leader election the controller cuts it to the time left before its fence closes
/// ([`crate::kubernetes::leader::Leadership::write_timeout`]).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes the decision's condition: a JSON merge patch ([`condition_patch`]) to the `approval`
/// subresource, preconditioned on the cached resourceVersion. A patch leaves the labels,
/// annotations and finalizers others keep on the CSR as they are (the subresource takes metadata
/// from a PUT's body), and the cache need not hold them. The apiserver answers with the metadata
/// only, so no reply carries a request back (a hostile one is as large as an object may be). The
/// write is given up after `timeout`, and the apiserver is told the same (`?timeout=`), so it gives
/// up too, also if it never learns that the client went away.
pub async fn write_condition(
    client: &Client,
    csr: &CsrObject,
    decision: &Decision,
    timeout: Duration,
) -> Result<(), RequestError> {
    let deadline = Instant::now() + timeout;
    let patch = condition_patch(csr, decision).ok_or(RequestError::NoResourceVersion)?;
    let patched = send_approval(client, http::Method::PATCH, &csr.name, &patch, deadline).await;
    match patched {
        Err(error) if error.status() == Some(422) => update_approval(client, &csr.name, &patch, deadline).await,
        patched => patched,
    }
}

/// Sends `body` to the `approval` subresource of CSR `name` with `method`, given up at `deadline`.
async fn send_approval(
    client: &Client,
    method: http::Method,
    name: &str,
    body: &Value,
    deadline: Instant,
) -> Result<(), RequestError> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    let target = format!("{}?timeout={}", approval_path(name), go_duration(timeout));
    let uri = http::Uri::try_from(target).map_err(|_| RequestError::Unaddressable { bytes: name.len() })?;
    let content_type = if method == http::Method::PATCH { "application/merge-patch+json" } else { "application/json" };
    let builder = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, HeaderValue::from_static(METADATA_ONLY))
        .header(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let request = built(builder, serde_json::to_vec(body).map_err(kube::Error::SerdeError)?)?;
    within(deadline, client.request_text(request)).await.map(drop)
}

/// The approval write for a CSR the apiserver cannot merge a patch into: one that holds a time it
/// accepted but cannot read back (a managedFields time of a five-digit year, written by the
/// requester), which fails every patch with 422. The CSR is read as plain JSON and written back
/// whole (PUT) with `patch`'s conditions and resourceVersion, less its managedFields, which the
/// apiserver then keeps as they are. The resourceVersion precondition holds as for a patch: a CSR
/// changed since it was cached answers with a conflict.
async fn update_approval(client: &Client, name: &str, patch: &Value, deadline: Instant) -> Result<(), RequestError> {
    let uri = http::Uri::try_from(csr_path(name)).map_err(|_| RequestError::Unaddressable { bytes: name.len() })?;
    let read = built(http::Request::get(uri), Vec::new())?;
    let text = within(deadline, client.request_text(read)).await?;
    let mut object: Value = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    let whole = update_body(&mut object, patch);
    send_approval(client, http::Method::PUT, name, whole, deadline).await
}

/// `object` (a CSR as read) as the body of a PUT of its approval: `patch`'s conditions and
/// resourceVersion in place of its own, no managedFields.
fn update_body<'a>(object: &'a mut Value, patch: &Value) -> &'a Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        metadata.insert("resourceVersion".into(), patch["metadata"]["resourceVersion"].clone());
    }
    if let Some(object) = object.as_object_mut() {
        let status = object.entry("status").or_insert_with(|| json!({}));
        if let Some(status) = status.as_object_mut() {
            status.insert("conditions".into(), patch["status"]["conditions"].clone());
        }
    }
    object
}

/// The path of a CSR's `approval` subresource, its name one percent-encoded path segment.
fn approval_path(name: &str) -> String {
    format!("{}/approval", csr_path(name))
}

/// `duration` as a Go duration in whole milliseconds, rounded down, so never later than the
/// client's own deadline, but at least `1ms` (the apiserver reads `0s` as no timeout at all).
fn go_duration(duration: Duration) -> String {
    let millis = duration.as_millis().max(1);
    format!("{millis}ms")
}

/// The body of the approval write: the cached conditions and the decision's, and the cached
/// resourceVersion, which the apiserver checks (a CSR changed since it was read answers with a
/// conflict, so a stale view never writes). None when the CSR has no resourceVersion.
fn condition_patch(csr: &CsrObject, decision: &Decision) -> Option<Value> {
    let resource_version = csr.resource_version.as_deref()?;
    let now = Time(Timestamp::now());
    let condition = CertificateSigningRequestCondition {
        type_: if decision.kind == DecisionKind::Approve { "Approved" } else { "Denied" }.to_owned(),
        status: "True".to_owned(),
        reason: Some(decision.reason.as_str().to_owned()),
        message: Some(cut_message(&decision.message)),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    // A merge patch replaces a list whole: the cached conditions go first, as they were served.
    let mut conditions: Vec<Value> = csr.conditions().iter().map(|cached| json!(cached)).collect();
    conditions.push(json!(condition));
    Some(json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": conditions},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::MAX_MESSAGE_BYTES;
    use crate::policy::Reason;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn csr(resource_version: Option<&str>, conditions: Option<Vec<CertificateSigningRequestCondition>>) -> CsrObject {
        CsrObject::from(CertificateSigningRequest {
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
        })
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
    fn the_update_body_is_the_csr_as_read_with_the_patch_conditions_and_version_and_no_managed_fields() {
        let decision = Decision { kind: DecisionKind::Approve, reason: Reason::AutoApproved, message: "m".into() };
        let patch = condition_patch(&csr(Some("42"), None), &decision).unwrap();
        let mut read = serde_json::json!({
            "metadata": {"name": "csr-1", "resourceVersion": "43", "labels": {"kept": "yes"},
                "managedFields": [{"manager": "kubelet", "time": "10000-01-01T04:00:00Z"}]},
            "spec": {"request": "cmVxdWVzdA=="},
            "status": {"conditions": [{"type": "Other", "status": "True"}]},
        });
        let body = update_body(&mut read, &patch).clone();
        assert_eq!(body["metadata"]["resourceVersion"], "42", "the cached version: a changed CSR conflicts");
        assert!(body["metadata"].get("managedFields").is_none());
        assert_eq!(body["metadata"]["labels"]["kept"], "yes", "the rest of the metadata as read");
        assert_eq!(body["spec"]["request"], "cmVxdWVzdA==");
        assert_eq!(body["status"]["conditions"], patch["status"]["conditions"]);
        let mut no_status = serde_json::json!({"metadata": {"name": "csr-1"}});
        assert_eq!(update_body(&mut no_status, &patch)["status"]["conditions"], patch["status"]["conditions"]);
    }

    #[test]
    fn a_name_is_one_path_segment_whatever_it_holds() {
        let base = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        for (name, segment) in [
            ("csr-a.b_c~1", "csr-a.b_c~1"),
            ("a?x", "a%3Fx"),
            ("a#x", "a%23x"),
            ("a/b", "a%2Fb"),
            ("a%2Fb", "a%252Fb"),
            ("a b\n\u{1b}", "a%20b%0A%1B"),
            ("ä", "%C3%A4"),
        ] {
            let path = approval_path(name);
            assert_eq!(path, format!("{base}/{segment}/approval"), "{name:?}");
            let uri = http::Uri::try_from(path).unwrap();
            assert_eq!(uri.query(), None, "{name:?}");
        }
    }

    #[test]
    fn a_name_too_long_for_a_uri_is_unaddressable_not_a_panic() {
        assert!(http::Uri::try_from(approval_path(&"a".repeat(60_000))).is_ok());
        assert!(http::Uri::try_from(approval_path(&"a".repeat(70_000))).is_err());
    }

    #[test]
    fn the_apiserver_is_told_the_timeout_in_whole_milliseconds_never_zero() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10000ms");
        assert_eq!(go_duration(Duration::from_micros(2_500_999)), "2500ms");
        assert_eq!(go_duration(Duration::from_micros(999)), "1ms");
        assert_eq!(go_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(go_duration(Duration::ZERO), "1ms");
    }

    #[test]
    fn no_patch_without_a_resource_version_to_precondition_it_on() {
        let decision = Decision { kind: DecisionKind::Approve, reason: Reason::AutoApproved, message: "m".into() };
        assert_eq!(condition_patch(&csr(None, None), &decision), None);
    }
}
