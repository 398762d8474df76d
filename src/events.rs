//! Events (events.k8s.io/v1): what the controller decided about a CSR and what the periodic audit
//! found of a Node, published in the background ([`Events`], [`EventPublisher`]), so no decision
//! waits for its record. The decisions and the periodic audit have a lane each (a bounded queue and
//! its publisher, [`lane`]), so a scan's Events never make a decision wait: a full audit queue
//! makes the scan wait instead.

mod lane;
mod name;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Reporter;
use kube::{Api, Client};

pub(crate) use self::lane::PendingEvent;
use self::lane::{Lane, Publisher, Quiet, Room, Target};
use crate::display::cut_message;
use crate::policy::{Decision, DecisionKind, Reason};

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

/// Decisions' Events published at once: low, so that during a burst the approval writes (the
/// required calls) get most of the apiserver and events trail them.
const EVENT_CONCURRENCY: usize = 4;
/// Decisions' Events waiting to be published; a full queue makes decisions wait (bounded memory).
const EVENT_QUEUE: usize = 10_000;
/// The periodic audit's Events published at once: fewer than the decisions', whose Events and
/// approval writes keep most of the apiserver while a scan tells many Nodes.
const AUDIT_EVENT_CONCURRENCY: usize = 1;
/// The periodic audit's Events waiting to be published, with the room held for the Nodes being
/// dialled: four times the most dials at once (256), so that room leaves most of it to Events.
const AUDIT_EVENT_QUEUE: usize = 1_024;
/// How long shutdown waits for the queued events of both lanes to be published.
const EVENT_DRAIN: Duration = Duration::from_secs(5);

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
/// from background tasks, so a decision never waits for its record: the approval write stays the
/// only API call on the approve path. Decisions' Events go [`EVENT_CONCURRENCY`] at a time from a
/// queue of [`EVENT_QUEUE`]; the periodic audit's [`AUDIT_EVENT_CONCURRENCY`] at a time from a
/// queue of their own ([`AUDIT_EVENT_QUEUE`]), so a scan telling many Nodes never fills the
/// decisions' queue. Both share one client and obey one 429's `Retry-After`. Unlike kube's
/// `Recorder` it keeps no cache of past events: each CSR gets at most one event per decision kind
/// and reason anyway.
#[derive(Debug, Clone)]
pub struct Events {
    decisions: Lane,
    audit: Lane,
    level: EventLevel,
}

/// Room in the periodic audit's queue for the Event of one Node, held while the Node is audited,
/// so telling its change never waits ([`Events::audit_room`]).
#[derive(Debug)]
pub(crate) struct AuditRoom {
    room: Room,
    level: EventLevel,
}

/// The background publishers of [`Events`], one per lane. [`EventPublisher::drain`] closes both
/// queues, whoever still holds an [`Events`] handle, and the publishers end once the events the
/// queues held are published.
#[derive(Debug)]
pub struct EventPublisher {
    decisions: Publisher,
    audit: Publisher,
}

impl Events {
    /// Starts the publishers on the current runtime; they publish the Events `level` names.
    pub fn start(client: Client, reporter: Reporter, level: EventLevel) -> (Events, EventPublisher) {
        let api = Api::namespaced(client, "default");
        let target = Arc::new(Target { api, reporter, quiet: Quiet::default() });
        let (decisions, decision_publisher) = lane::start(target.clone(), EVENT_QUEUE, EVENT_CONCURRENCY);
        let (audit, audit_publisher) = lane::start(target, AUDIT_EVENT_QUEUE, AUDIT_EVENT_CONCURRENCY);
        let publisher = EventPublisher { decisions: decision_publisher, audit: audit_publisher };
        (Events { decisions, audit, level }, publisher)
    }

    /// Queues an event about `regarding` carrying the decision's reason code, its message after
    /// `prefix`, when the level publishes decisions of its kind and reason; waits only while the
    /// decisions' queue is full.
    /// Failures are logged, never fatal.
    pub(crate) async fn publish(&self, regarding: ObjectReference, decision: &Decision, prefix: &str) {
        if !self.level.publishes(decision.kind, decision.reason) {
            return;
        }
        self.decisions
            .enqueue(PendingEvent {
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

    /// Room for the Event of one Node about to be audited, once the periodic audit's queue has it:
    /// the scan waits here while the queue is full, never a decision. `None` when the level
    /// publishes no audit Event (or the publisher has stopped, logged).
    pub(crate) async fn audit_room(&self) -> Option<AuditRoom> {
        if self.level == EventLevel::None {
            return None;
        }
        let room = self.audit.room().await?;
        Some(AuditRoom { room, level: self.level })
    }
}

impl AuditRoom {
    /// Queues, in the room held, an event (action `Audit`) about Node `node` (its uid when known)
    /// whose audit state changed: a Warning for a `problem`, else Normal, published as the level
    /// says (`problems`: Warnings only). Never waits.
    pub(crate) fn publish(self, node: &str, uid: Option<String>, change: NodeChange<'_>) {
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
        self.room.send(PendingEvent {
            type_: if change.problem { "Warning" } else { "Normal" },
            reason: change.reason,
            note: cut_message(change.note),
            action: "Audit",
            regarding,
        });
    }
}

impl EventPublisher {
    /// Closes both queues (an event queued later is dropped, and logged) and waits, at most
    /// [`EVENT_DRAIN`] for both, until the events they hold are published; returns as soon as
    /// they are. Logs how many were not when the wait is cut short.
    pub async fn drain(self) {
        let (decisions, decisions_left) = self.decisions.close();
        let (audit, audit_left) = self.audit.close();
        if tokio::time::timeout(EVENT_DRAIN, futures::future::join(decisions, audit)).await.is_err() {
            let audit_events = audit_left.load(Ordering::Acquire);
            let events = decisions_left.load(Ordering::Acquire) + audit_events;
            tracing::warn!(events, audit_events, "shutdown: some queued events were not published");
        }
    }
}

/// Events as the controller's unit tests read them.
#[cfg(test)]
impl Events {
    /// Events that `level` publishes, queued and never published: the receiver holds the
    /// decisions'; the audit's queue has no reader.
    pub(crate) fn queued(level: EventLevel) -> (Events, tokio::sync::mpsc::Receiver<PendingEvent>) {
        let (decisions, receiver) = lane::queued(EVENT_QUEUE);
        let (audit, _) = lane::queued(AUDIT_EVENT_QUEUE);
        (Events { decisions, audit, level }, receiver)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::{BodyExt, Full};
    use kube::client::{Body, ClientBuilder, DynBody};
    use tokio::time::timeout;
    use tower::ServiceExt as _;

    use super::*;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    fn reporter() -> Reporter {
        Reporter { controller: "node-csr-approver".into(), instance: None }
    }

    /// A client of an apiserver that answers every request 201 after `delay`, and the count of
    /// those answered.
    fn counting(delay: Duration) -> (Client, Arc<AtomicUsize>) {
        let created = Arc::new(AtomicUsize::new(0));
        let count = created.clone();
        let service = tower::service_fn(move |_: Request<Body>| {
            let count = count.clone();
            async move {
                tokio::time::sleep(delay).await;
                count.fetch_add(1, Ordering::AcqRel);
                let body: Box<DynBody> =
                    Box::new(Full::new(Bytes::from("{}")).map_err(|never: Infallible| -> BoxError { match never {} }));
                Ok::<_, BoxError>(Response::builder().status(201).body(body).unwrap())
            }
        });
        (ClientBuilder::new(service.map_err(BoxError::from), "default").build(), created)
    }

    /// Events published to an apiserver that takes every connection and never answers, so that
    /// nothing queued is ever published; the listener runs as long as the runtime.
    async fn stalled(level: EventLevel) -> (Events, EventPublisher) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        Events::start(client, reporter(), level)
    }

    #[tokio::test]
    async fn the_drain_publishes_what_both_queues_hold() {
        let (client, created) = counting(Duration::from_millis(20));
        let (events, publisher) = Events::start(client, reporter(), EventLevel::All);
        let denial = Decision { kind: DecisionKind::Deny, reason: Reason::SubjectMismatch, message: "forged".into() };
        for i in 0..20 {
            let regarding = ObjectReference { name: Some(format!("csr-{i}")), ..ObjectReference::default() };
            events.publish(regarding, &denial, "").await;
            let change = NodeChange { problem: true, reason: "KubeletUnreachable", note: "dial timed out" };
            events.audit_room().await.unwrap().publish(&format!("node-{i}"), None, change);
        }
        publisher.drain().await;
        assert_eq!(created.load(Ordering::Acquire), 40, "20 decisions' Events and 20 of the audit's");
    }

    #[tokio::test]
    async fn a_decision_s_event_is_queued_at_once_while_the_audit_s_queue_is_full() {
        let (events, _publisher) = stalled(EventLevel::Problems).await;
        // The scan tells Nodes until the audit's queue has no more room: it waits now.
        let mut told = 0;
        while let Ok(Some(room)) = timeout(Duration::from_millis(200), events.audit_room()).await {
            let change = NodeChange { problem: true, reason: "KubeletUnreachable", note: "dial timed out" };
            room.publish(&format!("node-{told}"), None, change);
            told += 1;
            assert!(told <= 2 * EVENT_QUEUE, "the audit's queue took {told} Events and never filled");
        }
        assert!(told >= AUDIT_EVENT_QUEUE, "room for {told} Events only");
        // A decision's Event does not wait for the audit's.
        let regarding = ObjectReference { name: Some("csr-a".into()), ..ObjectReference::default() };
        let denial = Decision { kind: DecisionKind::Deny, reason: Reason::SubjectMismatch, message: "forged".into() };
        let queued = timeout(Duration::from_secs(1), events.publish(regarding, &denial, "")).await;
        assert!(queued.is_ok(), "a decision's Event waited for the audit's queue ({told} audit Events queued)");
    }
}
