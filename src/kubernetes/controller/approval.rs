//! The approval write: a merge patch of the CSR's conditions through the `approval` subresource,
//! addressed by the CSR's name encoded as one path segment, and messages cut to what the
//! apiserver stores.

use std::time::Duration;

use http::HeaderValue;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Resource};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use crate::kubernetes::csr_object::CsrObject;
use crate::policy::{Decision, DecisionKind};

/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
pub(super) const MAX_MESSAGE_BYTES: usize = 1024;

/// The Accept header that makes the apiserver answer a write with the object's metadata only
/// (meta.k8s.io/v1 PartialObjectMetadata) instead of the whole CSR and its request.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The longest one write may take before it counts as failed (and is retried): the client sets no
/// read timeout, and an apiserver that stopped answering mid-write would otherwise hold the CSR.
/// Under leader election the controller cuts it to the time left before its fence closes
/// ([`crate::kubernetes::leader::Leadership::write_timeout`]).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What is percent-encoded in a path segment: everything but RFC 3986's unreserved characters,
/// so `?`, `#`, `/`, `%`, spaces and control characters in a name stay inside its segment.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Why a decision could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The cached CSR has no resourceVersion to precondition the write on.
    #[error("the CSR has no resourceVersion to precondition the write on")]
    NoResourceVersion,
    /// The CSR's name does not fit into a request URL (a URI holds at most 64 KiB).
    #[error("a name of {bytes} bytes does not fit into a request URL")]
    Unaddressable {
        /// The name's length in bytes.
        bytes: usize,
    },
    /// No answer within the write's timeout (given up; the fence or the next attempt decides).
    #[error("no answer within {:.1?}", .0)]
    TimedOut(Duration),
    /// The apiserver answered with an error, or the request failed on its way.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl WriteError {
    /// The HTTP status the apiserver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            WriteError::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }
}

/// Writes the decision's condition: a JSON merge patch ([`condition_patch`]) to the `approval`
/// subresource, preconditioned on the cached resourceVersion. A patch leaves the labels,
/// annotations and finalizers others keep on the CSR as they are (the subresource takes metadata
/// from a PUT's body), and the cache need not hold them. The apiserver answers with the metadata
/// only, so no reply carries a request back (a hostile one is as large as an object may be). The
/// write is given up after `timeout`, and the apiserver is told the same (`?timeout=`), so it gives
/// up too, also if it never learns that the client went away.
pub async fn write_condition(
    api: &Api<CertificateSigningRequest>,
    csr: &CsrObject,
    decision: &Decision,
    timeout: Duration,
) -> Result<(), WriteError> {
    let patch = condition_patch(csr, decision).ok_or(WriteError::NoResourceVersion)?;
    let name = &csr.name;
    let target = format!("{}?timeout={}", approval_path(name), go_duration(timeout));
    let uri = http::Uri::try_from(target).map_err(|_| WriteError::Unaddressable { bytes: name.len() })?;
    let body = serde_json::to_vec(&patch).map_err(kube::Error::SerdeError)?;
    let request = http::Request::patch(uri)
        .header(http::header::ACCEPT, HeaderValue::from_static(METADATA_ONLY))
        .header(http::header::CONTENT_TYPE, HeaderValue::from_static("application/merge-patch+json"))
        .body(body)
        .map_err(|error| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(error)))?;
    let client = api.clone().into_client();
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Ok(answer) => answer.map(drop).map_err(WriteError::Api),
        Err(_) => Err(WriteError::TimedOut(timeout)),
    }
}

/// The path of a CSR's `approval` subresource, its name one percent-encoded path segment.
fn approval_path(name: &str) -> String {
    let collection = CertificateSigningRequest::url_path(&(), None);
    format!("{collection}/{}/approval", utf8_percent_encode(name, PATH_SEGMENT))
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
        message: Some(truncate(&decision.message, MAX_MESSAGE_BYTES)),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    // A merge patch replaces a list whole: the cached conditions go first, unchanged.
    let conditions: Vec<&CertificateSigningRequestCondition> = csr.conditions.iter().chain([&condition]).collect();
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
