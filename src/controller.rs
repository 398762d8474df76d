//! The controller: watch CSRs -> evaluate -> write the approval condition -> record.
//!
//! Writes go through the `approval` subresource with the cached resourceVersion as a precondition,
//! so a replica working from a stale view gets a conflict, never a second decision. Only the leader
//! writes; standbys evaluate and wait, and are re-triggered when they gain the Lease.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::cluster::ClusterView;
use crate::config::PolicyConfig;
use crate::dns::Resolver;
use crate::leader::Leadership;
use crate::machines::MachineCache;
use crate::metrics::{Metrics, WriteResult};
use crate::policy::{Decision, DecisionKind, KUBELET_SERVING_SIGNER, Reason, Submission, evaluate};

const RETRY_BASE: Duration = Duration::from_secs(2);
const RETRY_CAP: Duration = Duration::from_secs(60);
const ERROR_BACKOFF: Duration = Duration::from_secs(5);
const CONFLICT_REQUEUE: Duration = Duration::from_millis(200);
const SYNC_POLL: Duration = Duration::from_millis(100);
/// Machine and Node changes re-trigger waiting CSRs at most this often.
const RETRIGGER_PERIOD: Duration = Duration::from_secs(1);
/// Events published at once by the background publisher: low, so that during a burst the
/// approval writes (the required calls) get most of the apiserver and events trail them.
const EVENT_CONCURRENCY: usize = 4;
/// Events waiting to be published; a full queue makes decisions wait (bounded memory).
const EVENT_QUEUE: usize = 10_000;
/// How long shutdown waits for queued events to be published.
const EVENT_DRAIN: Duration = Duration::from_secs(5);
/// The apiserver's limit on an Event note (1 KiB), also applied to condition messages.
const MAX_MESSAGE_BYTES: usize = 1024;
/// The longest object name (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

/// A reconcile step that could not finish; the CSR is tried again later.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The approval write failed for a reason other than a conflict.
    #[error("writing the decision on {name}: {source}")]
    Write {
        /// The CSR.
        name: String,
        /// The API error.
        source: kube::Error,
    },
}

/// Everything a reconcile needs, shared by all of them.
pub struct Context<R, C> {
    /// The CSR API.
    pub api: Api<CertificateSigningRequest>,
    /// The policy.
    pub policy: PolicyConfig,
    /// DNS evidence.
    pub resolver: R,
    /// Cluster evidence.
    pub cluster: C,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// Publishes events on CSRs.
    pub events: Events,
    /// Metrics.
    pub metrics: Metrics,
    /// Evaluate and record, but write nothing.
    pub dry_run: bool,
    /// Per-CSR memory: retry attempts and the events already emitted.
    pub memory: Mutex<HashMap<String, CsrMemory>>,
}

/// What the controller remembers about one pending CSR.
#[derive(Debug, Default)]
pub struct CsrMemory {
    uid: String,
    attempts: u32,
    waiting_on_cluster: bool,
    announced: HashSet<(DecisionKind, Reason)>,
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first. In machine mode
/// `machines` re-triggers the CSRs waiting on a Machine or Node whenever one changes.
pub async fn run<R, C>(
    ctx: Arc<Context<R, C>>,
    concurrency: u16,
    machines: Option<MachineCache>,
    leader_gained: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    on_synced: impl FnOnce() + Send + 'static,
) where
    R: Resolver + 'static,
    C: ClusterView + 'static,
{
    let client_csrs = ctx.policy.machine.as_ref().is_some_and(|m| m.client_approval);
    let config = if client_csrs {
        watcher::Config::default()
    } else {
        watcher::Config::default().fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}"))
    };
    // The cache keeps only what decisions need: no managedFields, and no PKCS#10 request once a
    // CSR is decided. Every watch event carries the whole object, so nothing is lost.
    let (store, writer) = reflector::store();
    let csrs = reflector::reflector(writer, watcher(ctx.api.clone(), config).modify(trim));
    let controller = Controller::for_stream(csrs.applied_objects(), store);
    let ready = controller.store();
    let cache = machines.clone();
    tokio::spawn(async move {
        // The store wakes only one of the tasks waiting for it (the controller's own runner), so
        // ask again on a short period rather than wait for a wake-up that may never come.
        loop {
            match tokio::time::timeout(SYNC_POLL, ready.wait_until_ready()).await {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return,
                Err(_) => continue,
            }
        }
        if let Some(cache) = cache {
            cache.synced().await;
        }
        on_synced();
    });
    let waiting = match &machines {
        Some(cache) => {
            cache.attach_csrs(controller.store());
            waiting_on_cluster(cache.changes(), ctx.clone()).boxed()
        }
        None => futures::stream::empty().boxed(),
    };
    let forget = ctx.clone();
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_all_on(futures::stream::select(leader_gained, waiting))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(object)) = &result {
                forget.forget(&object.name);
            }
            futures::future::ready(())
        })
        .await;
}

/// Yields after a Machine or Node changed while some CSR waits on the cluster, at most once per
/// [`RETRIGGER_PERIOD`] (changes in between are coalesced).
fn waiting_on_cluster<R, C>(
    changes: tokio::sync::watch::Receiver<u64>,
    ctx: Arc<Context<R, C>>,
) -> impl Stream<Item = ()> + Send
where
    R: Send + Sync + 'static,
    C: Send + Sync + 'static,
{
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        tokio::time::sleep(RETRIGGER_PERIOD).await;
        changes.borrow_and_update();
        Some(((), changes))
    })
    .filter(move |()| futures::future::ready(ctx.anyone_waiting_on_cluster()))
}

async fn reconcile<R: Resolver, C: ClusterView>(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context<R, C>>,
) -> Result<Action, ControllerError> {
    let sub = Submission::from(csr.as_ref());
    let started = Instant::now();
    let evaluation = evaluate(&sub, &ctx.policy, &ctx.resolver, &ctx.cluster, Timestamp::now()).await;
    ctx.metrics.observe_evaluation(started.elapsed());
    let decision = evaluation.decision;
    let node = sub.username.strip_prefix(crate::policy::NODE_USER_PREFIX).unwrap_or_default();
    match decision.kind {
        DecisionKind::Ignore => {
            tracing::debug!(csr = %sub.name, reason = %decision.reason, "ignored");
            ctx.forget(&sub.name);
            Ok(Action::await_change())
        }
        DecisionKind::Approve | DecisionKind::Deny if ctx.dry_run => {
            if ctx.first_time(&csr, &decision) {
                log_decision(&sub.name, node, &decision, "dry run: not written");
                ctx.metrics.record_decision(decision.kind, decision.reason);
                ctx.publish(&csr, &decision, "dry run, nothing written: ").await;
            }
            Ok(Action::await_change())
        }
        DecisionKind::Approve | DecisionKind::Deny if !ctx.leadership.is_leader() => {
            tracing::debug!(csr = %sub.name, decision = decision.kind.as_str(), "not the leader: waiting");
            Ok(Action::await_change())
        }
        DecisionKind::Approve | DecisionKind::Deny => ctx.write(&csr, &decision, node).await,
        DecisionKind::Hold => {
            if ctx.first_time(&csr, &decision) {
                log_decision(&sub.name, node, &decision, "held for a human");
                ctx.metrics.record_decision(decision.kind, decision.reason);
                ctx.publish(&csr, &decision, "held for a human (--skip-deny-step): ").await;
            }
            Ok(Action::await_change())
        }
        DecisionKind::Retry => {
            let first = ctx.first_time(&csr, &decision);
            let delay = ctx.next_retry(&csr, waits_on_cluster(decision.reason));
            if first {
                log_decision(&sub.name, node, &decision, "retrying");
                ctx.publish(&csr, &decision, "retrying: ").await;
            }
            ctx.metrics.record_decision(decision.kind, decision.reason);
            Ok(Action::requeue(delay))
        }
    }
}

fn error_policy<R, C>(
    _csr: Arc<CertificateSigningRequest>,
    error: &ControllerError,
    _ctx: Arc<Context<R, C>>,
) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(ERROR_BACKOFF)
}

/// Reasons a Machine or Node change can resolve.
fn waits_on_cluster(reason: Reason) -> bool {
    matches!(reason, Reason::MachineNotFound | Reason::NodeNotFound | Reason::TooManyPending)
}

/// One log line per decision: `message` says what was done (`note`), `detail` why.
fn log_decision(name: &str, node: &str, decision: &Decision, note: &str) {
    tracing::info!(
        csr = %name,
        node = %node,
        decision = decision.kind.as_str(),
        reason = %decision.reason,
        detail = %decision.message,
        "{note}"
    );
}

impl<R, C> Context<R, C> {
    /// Writes the condition through the approval subresource, preconditioned on the cached
    /// resourceVersion.
    async fn write(
        &self,
        csr: &CertificateSigningRequest,
        decision: &Decision,
        node: &str,
    ) -> Result<Action, ControllerError> {
        let name = csr.name_any();
        let body = with_condition(csr, decision);
        match self.api.replace_subresource("approval", &name, &PostParams::default(), &body).await {
            Ok(_) => {
                self.metrics.record_write(WriteResult::Success);
                self.metrics.record_decision(decision.kind, decision.reason);
                log_decision(&name, node, decision, "written");
                self.publish(csr, decision, "").await;
                self.forget(&name);
                Ok(Action::await_change())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.metrics.record_write(WriteResult::Conflict);
                tracing::debug!(csr = %name, "conflict: re-reading and deciding again");
                Ok(Action::requeue(CONFLICT_REQUEUE))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.metrics.record_write(WriteResult::NotFound);
                tracing::debug!(csr = %name, "gone before the decision was written: forgotten");
                self.forget(&name);
                Ok(Action::await_change())
            }
            Err(source) => {
                self.metrics.record_write(WriteResult::Error);
                Err(ControllerError::Write { name, source })
            }
        }
    }

    /// Queues an event carrying the reason code for the background publisher; failures are
    /// logged, never fatal.
    async fn publish(&self, csr: &CertificateSigningRequest, decision: &Decision, prefix: &str) {
        let event = PendingEvent {
            type_: match decision.kind {
                DecisionKind::Approve | DecisionKind::Retry => "Normal",
                _ => "Warning",
            },
            reason: decision.reason.as_str(),
            note: truncate(&format!("{prefix}{}", decision.message), MAX_MESSAGE_BYTES),
            action: match decision.kind {
                DecisionKind::Approve => "Approve",
                DecisionKind::Deny => "Deny",
                DecisionKind::Hold => "Hold",
                DecisionKind::Retry => "Retry",
                DecisionKind::Ignore => "Ignore",
            },
            regarding: ObjectReference::default(),
        };
        self.events.publish(event, csr.object_ref(&())).await;
    }

    /// True the first time this decision kind and reason are seen for this CSR.
    fn first_time(&self, csr: &CertificateSigningRequest, decision: &Decision) -> bool {
        self.with_memory(csr, |memory| memory.announced.insert((decision.kind, decision.reason)))
    }

    /// The next retry delay: capped exponential backoff per CSR.
    fn next_retry(&self, csr: &CertificateSigningRequest, on_cluster: bool) -> Duration {
        let delay = self.with_memory(csr, |memory| {
            memory.waiting_on_cluster = on_cluster;
            memory.attempts = memory.attempts.saturating_add(1);
            RETRY_BASE.saturating_mul(1 << memory.attempts.min(16).saturating_sub(1)).min(RETRY_CAP)
        });
        self.metrics.set_waiting_retry(self.waiting());
        delay
    }

    fn waiting(&self) -> usize {
        self.memory.lock().map(|m| m.values().filter(|c| c.attempts > 0).count()).unwrap_or(0)
    }

    /// True when some CSR's last evaluation waited on a Machine, a Node or the pending brake.
    fn anyone_waiting_on_cluster(&self) -> bool {
        let memory = self.memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        memory.values().any(|m| m.waiting_on_cluster)
    }

    fn with_memory<T>(&self, csr: &CertificateSigningRequest, f: impl FnOnce(&mut CsrMemory) -> T) -> T {
        let uid = csr.uid().unwrap_or_default();
        let mut memory = self.memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = memory.entry(csr.name_any()).or_default();
        if entry.uid != uid {
            *entry = CsrMemory { uid, ..CsrMemory::default() };
        }
        f(entry)
    }

    /// Drops what was remembered about a CSR that is decided or gone.
    fn forget(&self, name: &str) {
        let removed = self.memory.lock().map(|mut m| m.remove(name).is_some()).unwrap_or(false);
        if removed {
            self.metrics.set_waiting_retry(self.waiting());
        }
    }
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
fn truncate(text: &str, max: usize) -> String {
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

/// Drops what decisions never read from a watched CSR before it is cached: managedFields always,
/// and, once an Approved or Denied condition is present (triage stops there), everything but the
/// signer, the username and the conditions' types.
fn trim(csr: &mut CertificateSigningRequest) {
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

/// An event about a CSR, waiting for the background publisher.
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
}

/// The background publisher of [`Events`]; it ends once every [`Events`] handle is dropped and
/// the queue is drained.
#[derive(Debug)]
pub struct EventPublisher(tokio::task::JoinHandle<()>);

impl Events {
    /// Starts the publisher on the current runtime.
    pub fn start(client: Client, reporter: Reporter) -> (Events, EventPublisher) {
        let (queue, receiver) = mpsc::channel::<PendingEvent>(EVENT_QUEUE);
        let api: Api<K8sEvent> = Api::namespaced(client, "default");
        let reporter = Arc::new(reporter);
        let task = tokio::spawn(async move {
            futures::stream::unfold(receiver, |mut receiver| async move {
                receiver.recv().await.map(|event| (event, receiver))
            })
            .for_each_concurrent(EVENT_CONCURRENCY, |event| {
                let (api, reporter) = (&api, reporter.clone());
                async move {
                    let name = event.regarding.name.clone().unwrap_or_default();
                    let body = k8s_event(event, &reporter);
                    if let Err(error) = api.create(&PostParams::default(), &body).await {
                        tracing::warn!(csr = %name, %error, "publishing an event");
                    }
                }
            })
            .await;
        });
        (Events { queue }, EventPublisher(task))
    }

    /// Queues an event about `regarding`; waits only while the queue is full.
    async fn publish(&self, mut event: PendingEvent, regarding: ObjectReference) {
        event.regarding = regarding;
        if self.queue.send(event).await.is_err() {
            tracing::warn!("publishing an event: the publisher has stopped");
        }
    }
}

impl EventPublisher {
    /// Waits (at most a few seconds) until the queued events are published; call after every
    /// [`Events`] handle was dropped.
    pub async fn drain(self) {
        if tokio::time::timeout(EVENT_DRAIN, self.0).await.is_err() {
            tracing::warn!("shutdown: some queued events were not published");
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

/// Whether `name` is a DNS subdomain as the apiserver checks object names: at most 253
/// characters, dot-separated labels of lowercase letters, digits and `-` that start and end with
/// a letter or digit.
fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= MAX_NAME_LEN
        && name.split('.').all(|label| {
            edge(label.chars().next())
                && edge(label.chars().last())
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// The 64-bit FNV-1a hash: stable across builds, so every replica names alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::{MAX_MESSAGE_BYTES, MAX_NAME_LEN, event_name, is_dns_subdomain, truncate};

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
    fn dns_subdomains_as_the_apiserver_checks_them() {
        for valid in ["a", "a-b.c", "0.1", &"a".repeat(253)] {
            assert!(is_dns_subdomain(valid), "{valid:?}");
        }
        for invalid in ["", "A", "a_b", "-a", "a-", "a..b", ".a", "a.", "ü", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(invalid), "{invalid:?}");
        }
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
