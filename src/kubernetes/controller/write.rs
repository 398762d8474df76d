//! Writing a decision out: the approval condition, written through the CSR's `approval`
//! subresource ([`write_condition`]), and the log line, count and Event that tell every decision
//! ([`Events`], published from a background task).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use http::HeaderValue;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::runtime::events::Reporter;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::Context;
use crate::audit::states::StateChange;
use crate::config::EventLevel;
use crate::display::{prefix_within, short_name};
use crate::kubernetes::csr_name::csr_path;
use crate::kubernetes::csr_object::CsrObject;
use crate::policy::{Decision, DecisionKind, is_dns_subdomain};

/// How a decision is told: the log line's `message` and the prefix of the event's note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Note {
    /// The decision log line's `message`.
    pub log: &'static str,
    /// Put before the decision's message in the event's note.
    pub event_prefix: &'static str,
}

/// A decision written.
const WRITTEN: Note = Note { log: "written", event_prefix: "" };

/// Sends `decision` as `csr`'s condition ([`write_condition`], given up after `timeout`) and, once
/// it is written, counts and tells it ([`tell`]). The caller handles every failure.
pub(super) async fn send<R, C>(
    ctx: &Context<R, C>,
    csr: &CsrObject,
    decision: &Decision,
    node: &str,
    timeout: Duration,
) -> Result<(), WriteError> {
    write_condition(&ctx.api, csr, decision, timeout).await?;
    ctx.metrics.record_decision(decision.kind, decision.reason);
    tell(ctx, csr, decision, node, WRITTEN).await;
    Ok(())
}

/// Tells a decision on `csr` (of `node`): one log line, whose `message` says what was done and
/// `detail` why, and an event carrying the decision's message after the note's prefix.
pub(super) async fn tell<R, C>(ctx: &Context<R, C>, csr: &CsrObject, decision: &Decision, node: &str, note: Note) {
    tracing::info!(
        csr = %short_name(&csr.name),
        node = %node,
        decision = decision.kind.as_str(),
        reason = %decision.reason,
        detail = %decision.message,
        "{}", note.log
    );
    ctx.events.publish(csr.object_ref(), decision, note.event_prefix).await;
}

/// `text` in at most [`MAX_MESSAGE_BYTES`]: cut on a character boundary and marked with `…` when
/// longer.
fn cut_message(text: &str) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text.to_owned();
    }
    format!("{}…", prefix_within(text, MAX_MESSAGE_BYTES - '…'.len_utf8()))
}

/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
const MAX_MESSAGE_BYTES: usize = 1024;

/// The Accept header that makes the apiserver answer a write with the object's metadata only
/// (meta.k8s.io/v1 PartialObjectMetadata) instead of the whole CSR and its request.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The longest one write may take before it counts as failed (and is retried): the client sets no
/// read timeout, and an apiserver that stopped answering mid-write would otherwise hold the CSR.
/// Under leader election the controller cuts it to the time left before its fence closes
/// ([`crate::kubernetes::leader::Leadership::write_timeout`]).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

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
pub async fn write_condition<K: kube::Resource + Clone>(
    api: &Api<K>,
    csr: &CsrObject,
    decision: &Decision,
    timeout: Duration,
) -> Result<(), WriteError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let patch = condition_patch(csr, decision).ok_or(WriteError::NoResourceVersion)?;
    let client = api.clone().into_client();
    let patched = send_approval(&client, http::Method::PATCH, &csr.name, &patch, deadline).await;
    match patched {
        Err(WriteError::Api(kube::Error::Api(status))) if status.code == 422 => {
            update_approval(&client, &csr.name, &patch, deadline).await
        }
        patched => patched,
    }
}

/// Sends `body` to the `approval` subresource of CSR `name` with `method`, given up at `deadline`.
async fn send_approval(
    client: &Client,
    method: http::Method,
    name: &str,
    body: &Value,
    deadline: tokio::time::Instant,
) -> Result<(), WriteError> {
    let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
    let target = format!("{}?timeout={}", approval_path(name), go_duration(timeout));
    let uri = http::Uri::try_from(target).map_err(|_| WriteError::Unaddressable { bytes: name.len() })?;
    let content_type = if method == http::Method::PATCH { "application/merge-patch+json" } else { "application/json" };
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, HeaderValue::from_static(METADATA_ONLY))
        .header(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type))
        .body(serde_json::to_vec(body).map_err(kube::Error::SerdeError)?)
        .map_err(|error| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(error)))?;
    match tokio::time::timeout_at(deadline, client.request_text(request)).await {
        Ok(answer) => answer.map(drop).map_err(WriteError::Api),
        Err(_) => Err(WriteError::TimedOut(timeout)),
    }
}

/// The approval write for a CSR the apiserver cannot merge a patch into: one that holds a time it
/// accepted but cannot read back (a managedFields time of a five-digit year, written by the
/// requester), which fails every patch with 422. The CSR is read as plain JSON and written back
/// whole (PUT) with `patch`'s conditions and resourceVersion, less its managedFields, which the
/// apiserver then keeps as they are. The resourceVersion precondition holds as for a patch: a CSR
/// changed since it was cached answers with a conflict.
async fn update_approval(
    client: &Client,
    name: &str,
    patch: &Value,
    deadline: tokio::time::Instant,
) -> Result<(), WriteError> {
    let uri = http::Uri::try_from(csr_path(name)).map_err(|_| WriteError::Unaddressable { bytes: name.len() })?;
    let read = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|error| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(error)))?;
    let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
    let text = match tokio::time::timeout_at(deadline, client.request_text(read)).await {
        Ok(text) => text?,
        Err(_) => return Err(WriteError::TimedOut(timeout)),
    };
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

/// Events published at once by the background publisher: low, so that during a burst the
/// approval writes (the required calls) get most of the apiserver and events trail them.
const EVENT_CONCURRENCY: usize = 4;
/// Events waiting to be published; a full queue makes decisions wait (bounded memory).
const EVENT_QUEUE: usize = 10_000;
/// How long shutdown waits for the queued events to be published.
const EVENT_DRAIN: Duration = Duration::from_secs(5);
/// The longest object name (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

/// An event about a CSR or a Node, waiting for the background publisher.
#[derive(Debug)]
struct PendingEvent {
    type_: &'static str,
    reason: &'static str,
    note: String,
    action: &'static str,
    regarding: ObjectReference,
}

/// Publishes events (events.k8s.io/v1, in `default`, where events about cluster-scoped objects go)
/// from a background task, [`EVENT_CONCURRENCY`] at a time, so a decision never waits for its
/// record: the approval write stays the only API call on the approve path. Unlike kube's
/// `Recorder` it keeps no cache of past events: each CSR gets at most one event per decision kind
/// and reason anyway.
#[derive(Debug, Clone)]
pub struct Events {
    queue: mpsc::Sender<PendingEvent>,
    level: EventLevel,
    /// Events queued whose create has not ended (in success or failure): what a cut-short drain
    /// leaves behind.
    unpublished: Arc<AtomicUsize>,
}

/// The background publisher of [`Events`]. [`EventPublisher::drain`] closes its queue, whoever
/// still holds an [`Events`] handle, and the publisher ends once the events the queue held are
/// published.
#[derive(Debug)]
pub struct EventPublisher {
    task: tokio::task::JoinHandle<()>,
    close: oneshot::Sender<()>,
    unpublished: Arc<AtomicUsize>,
}

/// The publisher's queue, and the signal that closes it (`None` once it has).
type Queue = (mpsc::Receiver<PendingEvent>, Option<oneshot::Receiver<()>>);

impl Events {
    /// Starts the publisher on the current runtime; it publishes the decisions `level` names.
    pub fn start(client: Client, reporter: Reporter, level: EventLevel) -> (Events, EventPublisher) {
        let (queue, receiver) = mpsc::channel::<PendingEvent>(EVENT_QUEUE);
        let (close, closed) = oneshot::channel();
        let unpublished = Arc::new(AtomicUsize::new(0));
        let api: Api<K8sEvent> = Api::namespaced(client, "default");
        let reporter = Arc::new(reporter);
        let published = unpublished.clone();
        let task = tokio::spawn(async move {
            futures::stream::unfold((receiver, Some(closed)), next_event)
                .for_each_concurrent(EVENT_CONCURRENCY, |event| {
                    let (api, reporter, published) = (&api, reporter.clone(), &published);
                    async move {
                        let name = event.regarding.name.clone().unwrap_or_default();
                        let body = k8s_event(event, &reporter);
                        if let Err(error) = api.create(&PostParams::default(), &body).await {
                            tracing::warn!(regarding = %crate::display::short_name(&name), %error, "publishing an event");
                        }
                        published.fetch_sub(1, Ordering::AcqRel);
                    }
                })
                .await;
        });
        let events = Events { queue, level, unpublished: unpublished.clone() };
        (events, EventPublisher { task, close, unpublished })
    }

    /// Queues an event about `regarding` carrying the decision's reason code, its message after
    /// `prefix`, when the level publishes decisions of its kind and reason; waits only while the queue
    /// is full.
    /// Failures are logged, never fatal.
    pub(super) async fn publish(&self, regarding: ObjectReference, decision: &Decision, prefix: &str) {
        if !self.level.publishes(decision.kind, decision.reason) {
            return;
        }
        self.enqueue(PendingEvent {
            type_: match decision.kind {
                DecisionKind::Approve | DecisionKind::Retry => "Normal",
                _ => "Warning",
            },
            reason: decision.reason.as_str(),
            note: cut_message(&format!("{prefix}{}", decision.message)),
            action: match decision.kind {
                DecisionKind::Approve => "Approve",
                DecisionKind::Deny => "Deny",
                DecisionKind::Hold => "Hold",
                DecisionKind::Retry => "Retry",
                DecisionKind::Ignore => "Ignore",
            },
            regarding,
        })
        .await;
    }

    /// Queues an event (action `Audit`) about Node `node` (its uid when known) whose audit state
    /// changed: a Warning for a `problem`, else Normal, published as the level says (`problems`:
    /// Warnings only). Waits only while the queue is full.
    pub(super) async fn publish_audit(&self, node: &str, uid: Option<String>, change: &StateChange) {
        if !self.level.publishes_audit(change.problem) {
            return;
        }
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_owned()),
            uid,
            ..ObjectReference::default()
        };
        self.enqueue(PendingEvent {
            type_: if change.problem { "Warning" } else { "Normal" },
            reason: change.reason,
            note: cut_message(&change.note),
            action: "Audit",
            regarding,
        })
        .await;
    }

    async fn enqueue(&self, event: PendingEvent) {
        self.unpublished.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(event).await.is_err() {
            self.unpublished.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("publishing an event: the publisher has stopped");
        }
    }
}

/// The next event of the queue. Once the close signal comes (or its sender is gone) the queue
/// takes no more, and yields what it holds, then ends.
async fn next_event((mut receiver, mut close): Queue) -> Option<(PendingEvent, Queue)> {
    if let Some(signal) = close.as_mut() {
        tokio::select! {
            biased;
            event = receiver.recv() => return event.map(|event| (event, (receiver, close))),
            _ = signal => {
                receiver.close();
                close = None;
            }
        }
    }
    let event = receiver.recv().await?;
    Some((event, (receiver, close)))
}

impl EventPublisher {
    /// Closes the queue (an event queued later is dropped, and logged) and waits, at most
    /// [`EVENT_DRAIN`], until the events it holds are published; returns as soon as they are.
    /// Logs how many were not when the wait is cut short.
    pub async fn drain(self) {
        let EventPublisher { task, close, unpublished } = self;
        let _ = close.send(());
        if tokio::time::timeout(EVENT_DRAIN, task).await.is_err() {
            let events = unpublished.load(Ordering::Acquire);
            tracing::warn!(events, "shutdown: some queued events were not published");
        }
    }
}

/// The events.k8s.io/v1 Event kube's `Recorder` would create for `event`.
fn k8s_event(event: PendingEvent, reporter: &Reporter) -> K8sEvent {
    let now = Timestamp::now();
    let regarding = event.regarding.name.as_deref().unwrap_or(&reporter.controller);
    let name = event_name(regarding, now.as_nanosecond().unsigned_abs());
    K8sEvent {
        action: Some(event.action.to_owned()),
        reason: Some(event.reason.to_owned()),
        event_time: Some(MicroTime(now)),
        note: Some(event.note),
        metadata: ObjectMeta {
            namespace: event.regarding.namespace.clone(),
            name: Some(name),
            ..ObjectMeta::default()
        },
        regarding: Some(event.regarding),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone().unwrap_or_else(|| reporter.controller.clone())),
        type_: Some(event.type_.to_owned()),
        ..K8sEvent::default()
    }
}

/// A valid Event name (a DNS subdomain) for an event about the object `regarding`:
/// `<regarding>.<unique>`, `unique` in hexadecimal. CSR names need only be path segments: a name
/// that does not make a valid Event name that way (too long, upper case, other characters) is cut
/// and made valid, and followed by a hash of the whole name, so distinct names still get distinct
/// events.
fn event_name(regarding: &str, unique: u128) -> String {
    let unique = format!("{unique:x}");
    let plain = format!("{regarding}.{unique}");
    if is_dns_subdomain(&plain) {
        return plain;
    }
    let hash = format!("{:016x}", fnv1a(regarding.as_bytes()));
    let head = dns_subdomain_prefix(regarding, MAX_NAME_LEN - unique.len() - hash.len() - 2);
    [head.as_str(), &hash, &unique].into_iter().filter(|part| !part.is_empty()).collect::<Vec<_>>().join(".")
}

/// At most `room` bytes of `name` shaped as a DNS subdomain (possibly empty): lowercased, every
/// character but letters, digits, `.` and `-` replaced by `-`, each label stripped of leading and
/// trailing `-`, empty labels dropped.
fn dns_subdomain_prefix(name: &str, room: usize) -> String {
    let mapped: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' { c } else { '-' })
        .take(room)
        .collect();
    mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// The 64-bit FNV-1a hash: stable across builds, so every replica names alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Reason;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn messages_are_cut_to_1024_bytes_on_a_character_boundary() {
        let short = "ä".repeat(512);
        assert_eq!(cut_message(&short), short);
        let long = "ä".repeat(600);
        let cut = cut_message(&long);
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

    #[test]
    fn event_names_stay_valid_for_the_longest_object_names() {
        assert_eq!(event_name("csr-a", 255), "csr-a.ff");
        let longest = format!("{}-b", "a".repeat(MAX_NAME_LEN - 2));
        let name = event_name(&longest, u128::from(u64::MAX));
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with("aaaa") && name.ends_with(".ffffffffffffffff"), "{name}");
        let dotted = format!("{}.{}", "a".repeat(235), "b".repeat(17));
        assert!(!event_name(&dotted, u128::from(u64::MAX)).contains(".."));
    }

    #[test]
    fn event_names_are_valid_and_distinct_for_any_csr_name() {
        let now = u128::from(u64::MAX);
        let long_a = format!("{}-a", "x".repeat(251));
        let long_b = format!("{}-b", "x".repeat(251));
        let long_dotted = format!("{}.{}", "y".repeat(230), "z".repeat(22));
        let odd = ["Foo_Bar", "foo-bar", "-a.", "a..b", "ünï", "a b:c", "..", "_", &"Ü".repeat(300)];
        let names = [&long_a, &long_b, &long_dotted, "csr-abc"].into_iter().chain(odd);
        let events: Vec<String> = names.clone().map(|name| event_name(name, now)).collect();
        for (name, event) in names.zip(&events) {
            assert!(is_dns_subdomain(event), "{name:?}: {event:?} ({} bytes)", event.len());
        }
        let distinct: std::collections::HashSet<&String> = events.iter().collect();
        assert_eq!(distinct.len(), events.len(), "{events:#?}");
        assert!(event_name("Foo_Bar", now).starts_with("foo-bar."));
        assert_ne!(event_name(&long_a, now), event_name(&long_a, now - 1));
    }
}
