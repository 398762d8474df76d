//! Events (events.k8s.io/v1): what the controller decided about a CSR and what the periodic audit
//! found of a Node, published from one background task ([`Events`], [`EventPublisher`]), so no
//! decision waits for its record. The controller and the periodic audit share one publisher.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::events::Reporter;
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::display::{cut_message, short_name};
use crate::kubernetes::retry_after;
use crate::policy::{Decision, DecisionKind, Reason, is_dns_subdomain};

/// Which decisions are also published as Events (logs and metrics record every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLevel {
    /// Every decision.
    All,
    /// Every decision but approvals and a node's older serving CSRs denied `Superseded` or waiting
    /// for its newer one (`NewerServingCSRPending`): none is a problem to act on, their condition
    /// (or the decision that follows) carries reason and message, and their Events would double
    /// the writes of a burst or a renewal storm.
    Problems,
    /// None.
    None,
}

impl EventLevel {
    /// Whether a decision of `kind` for `reason` is published.
    pub fn publishes(self, kind: DecisionKind, reason: Reason) -> bool {
        match self {
            EventLevel::All => true,
            EventLevel::Problems => !matches!(
                (kind, reason),
                (DecisionKind::Approve, _)
                    | (DecisionKind::Deny, Reason::Superseded)
                    | (DecisionKind::Retry, Reason::NewerServingCSRPending)
            ),
            EventLevel::None => false,
        }
    }

    /// Whether a change of a Node's audit state is published: to a finding (a `problem`), or
    /// back to compliant (only with `all`).
    pub fn publishes_audit(self, problem: bool) -> bool {
        match self {
            EventLevel::All => true,
            EventLevel::Problems => problem,
            EventLevel::None => false,
        }
    }
}

/// Events published at once by the background publisher: low, so that during a burst the
/// approval writes (the required calls) get most of the apiserver and events trail them.
const EVENT_CONCURRENCY: usize = 4;
/// Events waiting to be published; a full queue makes decisions wait (bounded memory).
const EVENT_QUEUE: usize = 10_000;
/// How many times an Event's create is sent when every answer names a wait (a 429's).
const EVENT_ATTEMPTS: u32 = 3;
/// How long shutdown waits for the queued events to be published.
const EVENT_DRAIN: Duration = Duration::from_secs(5);
/// The longest object name (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

/// An event about a CSR or a Node, waiting for the background publisher.
#[derive(Debug)]
pub(crate) struct PendingEvent {
    type_: &'static str,
    reason: &'static str,
    note: String,
    action: &'static str,
    regarding: ObjectReference,
}

/// A change of a Node's audit state as its Event tells it (the periodic audit makes it).
#[derive(Debug, Clone, Copy)]
pub struct NodeChange<'a> {
    /// A problem (a Warning), or back to `compliant` (Normal).
    pub problem: bool,
    /// The Event's reason: the new state, e.g. `ServingCertificateSelfSigned`.
    pub reason: &'static str,
    /// What changed and why.
    pub note: &'a str,
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
            let quiet = Quiet::default();
            futures::stream::unfold((receiver, Some(closed)), next_event)
                .for_each_concurrent(EVENT_CONCURRENCY, |event| {
                    let (api, reporter, published, quiet) = (&api, reporter.clone(), &published, &quiet);
                    async move {
                        let name = event.regarding.name.clone().unwrap_or_default();
                        let body = k8s_event(event, &reporter);
                        create(api, &body, quiet, &name).await;
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
    pub(crate) async fn publish(&self, regarding: ObjectReference, decision: &Decision, prefix: &str) {
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
    pub(crate) async fn publish_audit(&self, node: &str, uid: Option<String>, change: NodeChange<'_>) {
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
            note: cut_message(change.note),
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

/// Until when the publisher sends no Event: the end of the last wait the apiserver named (a 429's
/// `Retry-After`). One for the whole publisher: the wait tells of the apiserver, not of one Event.
#[derive(Debug, Default)]
struct Quiet(Mutex<Option<Instant>>);

impl Quiet {
    /// Resolves once no wait named is running.
    async fn wait(&self) {
        loop {
            let until = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match until {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Sends nothing for `wait` from now, unless a wait named earlier runs longer.
    fn extend(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if current.is_none_or(|current| current < until) {
            *current = Some(until);
        }
    }
}

/// Creates `body`, an Event regarding `regarding`, once `quiet` lets it; after an answer naming a
/// wait (a 429's `Retry-After`, [`retry_after::told`]) nothing is sent before that wait is over,
/// and this Event is tried again, [`EVENT_ATTEMPTS`] times in all. Logs the failure that ends it.
async fn create(api: &Api<K8sEvent>, body: &K8sEvent, quiet: &Quiet, regarding: &str) {
    for attempt in 1..=EVENT_ATTEMPTS {
        quiet.wait().await;
        let error = match api.create(&PostParams::default(), body).await {
            Ok(_) => return,
            Err(error) => error,
        };
        if let kube::Error::Api(status) = &error
            && let Some(wait) = retry_after::told(status)
        {
            quiet.extend(wait);
            if attempt < EVENT_ATTEMPTS {
                continue;
            }
        }
        tracing::warn!(regarding = %short_name(regarding), %error, attempt, "publishing an event");
        return;
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

/// Events as the controller's unit tests read them.
#[cfg(test)]
impl Events {
    /// Events that `level` publishes, queued and never published: the receiver holds them.
    pub(crate) fn queued(level: EventLevel) -> (Events, mpsc::Receiver<PendingEvent>) {
        let (queue, receiver) = mpsc::channel(EVENT_QUEUE);
        (Events { queue, level, unpublished: Arc::default() }, receiver)
    }
}

#[cfg(test)]
impl PendingEvent {
    /// The event's reason.
    pub(crate) fn reason(&self) -> &str {
        self.reason
    }

    /// The event's note.
    pub(crate) fn note(&self) -> &str {
        &self.note
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::{BodyExt, Full};
    use kube::client::{Body, ClientBuilder, DynBody};
    use tower::ServiceExt as _;
    use tower::util::AndThenLayer;

    use super::*;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// The seconds at which Event creates arrive at an apiserver that answers the first
    /// `throttled` of them 429 with `Retry-After: 2`, through a client that carries the header;
    /// one create started at each of `starts` (seconds).
    async fn arrivals(starts: &[u64], throttled: usize) -> Vec<u64> {
        let (seen, start) = (Arc::new(Mutex::new(Vec::new())), Instant::now());
        let record = seen.clone();
        let service = tower::service_fn(move |_: Request<Body>| {
            let record = record.clone();
            async move {
                let mut seen = record.lock().unwrap();
                seen.push((Instant::now() - start).as_secs());
                let (code, body) = if seen.len() <= throttled { (429, "slow down") } else { (201, "{}") };
                let body: Box<DynBody> =
                    Box::new(Full::new(Bytes::from(body)).map_err(|never: Infallible| -> BoxError { match never {} }));
                Ok::<_, BoxError>(Response::builder().status(code).header("Retry-After", "2").body(body).unwrap())
            }
        });
        let carry = AndThenLayer::new(retry_after::carry_header);
        let client: Client = ClientBuilder::new(service.map_err(BoxError::from), "default").with_layer(&carry).build();
        let (api, quiet) = (Api::<K8sEvent>::namespaced(client, "default"), Quiet::default());
        let creates = starts.iter().map(|after| async {
            tokio::time::sleep(Duration::from_secs(*after)).await;
            create(&api, &K8sEvent::default(), &quiet, "csr-a").await;
        });
        futures::future::join_all(creates).await;
        seen.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_answered_429_is_sent_again_after_its_retry_after_three_times_at_most() {
        assert_eq!(arrivals(&[0], 1).await, [0, 2]);
        assert_eq!(arrivals(&[0], 5).await, [0, 2, 4], "given up after three 429s");
    }

    #[tokio::test(start_paused = true)]
    async fn no_event_is_sent_before_the_retry_after_another_one_was_told() {
        assert_eq!(arrivals(&[0, 1], 1).await, [0, 2, 2]);
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
