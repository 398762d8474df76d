//! One lane of Events: a bounded queue and the background task that publishes what it holds, a set
//! number at a time, each create sent again after a 429's `Retry-After`; closed on shutdown, then
//! emptied.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::events::Reporter;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::name::event_name;
use crate::display::short_name;
use crate::kubernetes::retry_after;

/// How many times an Event's create is sent when every answer names a wait (a 429's).
const EVENT_ATTEMPTS: u32 = 3;

/// An event about a CSR or a Node, waiting for its lane's publisher.
#[derive(Debug)]
pub(crate) struct PendingEvent {
    pub(super) type_: &'static str,
    pub(super) reason: &'static str,
    pub(super) note: String,
    pub(super) action: &'static str,
    pub(super) regarding: ObjectReference,
}

/// What the lanes of one publisher share: where Events are created, who reports them, and until
/// when nothing is sent.
#[derive(Debug)]
pub(super) struct Target {
    /// Events in `default`.
    pub(super) api: Api<K8sEvent>,
    /// The reporting controller and instance.
    pub(super) reporter: Reporter,
    /// The last wait the apiserver named, kept for every lane: it tells of the apiserver.
    pub(super) quiet: Quiet,
}

/// The sending end of a lane: queues an Event, or holds room for one.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    queue: mpsc::Sender<PendingEvent>,
    /// Events queued whose create has not ended (in success or failure): what a cut-short drain
    /// leaves behind.
    unpublished: Arc<AtomicUsize>,
}

/// Room held in a lane's queue for one Event: sending it never waits.
#[derive(Debug)]
pub(super) struct Room {
    permit: mpsc::OwnedPermit<PendingEvent>,
    unpublished: Arc<AtomicUsize>,
}

/// The publishing end of a lane: its task, and the signal that closes its queue.
#[derive(Debug)]
pub(super) struct Publisher {
    task: tokio::task::JoinHandle<()>,
    close: oneshot::Sender<()>,
    unpublished: Arc<AtomicUsize>,
}

/// A lane's queue, and the signal that closes it (`None` once it has).
type Queue = (mpsc::Receiver<PendingEvent>, Option<oneshot::Receiver<()>>);

/// Starts a lane on the current runtime: a queue of `capacity` Events, `concurrency` of them
/// created at once.
pub(super) fn start(target: Arc<Target>, capacity: usize, concurrency: usize) -> (Lane, Publisher) {
    let (queue, receiver) = mpsc::channel::<PendingEvent>(capacity);
    let (close, closed) = oneshot::channel();
    let unpublished = Arc::new(AtomicUsize::new(0));
    let published = unpublished.clone();
    let task = tokio::spawn(async move {
        futures::stream::unfold((receiver, Some(closed)), next_event)
            .for_each_concurrent(concurrency, |event| {
                let (target, published) = (&target, &published);
                async move {
                    let name = event.regarding.name.clone().unwrap_or_default();
                    let body = k8s_event(event, &target.reporter);
                    create(&target.api, &body, &target.quiet, &name).await;
                    published.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .await;
    });
    (Lane { queue, unpublished: unpublished.clone() }, Publisher { task, close, unpublished })
}

impl Lane {
    /// Queues `event`; waits only while the queue is full. A lane whose publisher has stopped
    /// drops it, and logs that.
    pub(super) async fn enqueue(&self, event: PendingEvent) {
        self.unpublished.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(event).await.is_err() {
            self.unpublished.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("publishing an event: the publisher has stopped");
        }
    }

    /// Room for one Event, once the queue has it; `None` (logged) once the publisher has stopped.
    pub(super) async fn room(&self) -> Option<Room> {
        match self.queue.clone().reserve_owned().await {
            Ok(permit) => Some(Room { permit, unpublished: self.unpublished.clone() }),
            Err(_) => {
                tracing::warn!("publishing an event: the publisher has stopped");
                None
            }
        }
    }
}

impl Room {
    /// Queues `event` in the room held.
    pub(super) fn send(self, event: PendingEvent) {
        self.unpublished.fetch_add(1, Ordering::AcqRel);
        self.permit.send(event);
    }
}

impl Publisher {
    /// Closes the queue: an Event queued later is dropped (and logged); the task ends once the
    /// Events the queue held are published.
    pub(super) fn close(self) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
        let Publisher { task, close, unpublished } = self;
        let _ = close.send(());
        (task, unpublished)
    }
}

/// Until when no lane sends an Event: the end of the last wait the apiserver named (a 429's
/// `Retry-After`).
#[derive(Debug, Default)]
pub(super) struct Quiet(Mutex<Option<Instant>>);

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

/// A lane whose queue is read by the caller, never published.
#[cfg(test)]
pub(super) fn queued(capacity: usize) -> (Lane, mpsc::Receiver<PendingEvent>) {
    let (queue, receiver) = mpsc::channel(capacity);
    (Lane { queue, unpublished: Arc::default() }, receiver)
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
    use kube::Client;
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
}
