//! One reconcile of a CSR.
//!
//! A reconcile ([`Reconciler`]) reads the CSR from the cache (the queue holds names only), and a
//! pending serving CSR, whose request the cache does not keep, from the apiserver too ([`read`]),
//! evaluates it while this replica may write (every replica under `--dry-run`), picks its
//! [`Step`] and carries it out. What it did is one [`Outcome`], which it settles in the per-CSR
//! [`Memory`], and the memory answers when to reconcile the CSR again. Its two apiserver calls,
//! the read by name and the approval write, go through [`CsrApi`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::Context;
use super::csr_api::CsrApi;
use super::memory::Memory;
use super::phase::{Done, Outcome};
use super::read::{self, Read};
use super::work_queue::Reconcile;
use crate::display::short_name;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::request::RequestError;
use crate::kubernetes::write::WRITE_TIMEOUT;
use crate::metrics::WriteResult;
use crate::policy::{ClusterView, Decision, DecisionKind, NODE_USER_PREFIX, Resolver, evaluate};

/// How a decision is told: the log line's `message` and the prefix of the event's note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Note {
    /// The decision log line's `message`.
    log: &'static str,
    /// Put before the decision's message in the event's note.
    event_prefix: &'static str,
}

/// A decision written.
const WRITTEN: Note = Note { log: "written", event_prefix: "" };
/// A decision `--dry-run` would have written.
const DRY_RUN: Note = Note { log: "dry run: not written", event_prefix: "dry run, nothing written: " };
/// A failing rule that a human decides on (`--skip-deny-step`, or a node-client CSR).
const HELD: Note = Note { log: "held for a human", event_prefix: "held for a human: " };
/// A transient condition.
const RETRYING: Note = Note { log: "retrying", event_prefix: "retrying: " };

/// What to do with one evaluated CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Not the approver's: leave it alone (excused) until it changes.
    Ignore,
    /// Another replica writes, or this one's fence has closed (nothing is sent): wait; every CSR
    /// is reconciled again when this one can write.
    Standby,
    /// Write the condition, within the time it may take (the fence's); once written, log, count
    /// and publish it.
    Write(Duration),
    /// Write nothing and leave it alone (excused) until it changes; log, count and publish it
    /// when there is a note (the first time).
    Wait(Option<Note>),
    /// Evaluate again after the backoff; count it every time, log and publish it when there is a
    /// note (the first time).
    Retry(Option<Note>),
}

/// Whether a CSR is evaluated at all: by the leader, and by every replica under `--dry-run`
/// (which writes nothing). Standbys do no work until they take over.
fn evaluates(leading: bool, dry_run: bool) -> bool {
    leading || dry_run
}

/// The step for a decision of `kind`, taken with `write_for` the time a write sent now may take
/// (asked after the evaluation: a leader that lost the Lease, or whose fence closed, meanwhile
/// must not write; `None` then), under `dry_run`, with `announced` true when this decision was
/// already told for this CSR.
fn step_for(kind: DecisionKind, write_for: Option<Duration>, dry_run: bool, announced: bool) -> Step {
    let first = |note: Note| (!announced).then_some(note);
    match kind {
        DecisionKind::Ignore => Step::Ignore,
        DecisionKind::Approve | DecisionKind::Deny if dry_run => Step::Wait(first(DRY_RUN)),
        DecisionKind::Approve | DecisionKind::Deny => write_for.map_or(Step::Standby, Step::Write),
        DecisionKind::Hold => Step::Wait(first(HELD)),
        DecisionKind::Retry => Step::Retry(first(RETRYING)),
    }
}

/// Reconciles CSRs by name, as the work queue hands them out.
pub(super) struct Reconciler<R, C, A> {
    /// What every reconcile shares.
    pub ctx: Arc<Context<R, C>>,
    /// What is remembered of each CSR.
    pub memory: Arc<Memory>,
    /// The CSR cache the watch fills.
    pub csrs: Cache<CsrObject>,
    /// The apiserver, for the read by name and the approval write.
    pub api: A,
}

impl<R: Resolver + 'static, C: ClusterView + 'static, A: CsrApi> Reconcile for Reconciler<R, C, A> {
    /// Reconciles the CSR named `name` as the cache holds it now; answers when to reconcile it
    /// again by itself, if ever. A CSR gone from the cache, or decided (the watch event of every
    /// decision written), needs nothing: [`Memory::prune`] drops what was remembered of it.
    async fn reconcile(self: Arc<Self>, name: Arc<str>) -> Option<Duration> {
        let csr = self.csrs.get(&name)?;
        if csr.is_decided() {
            tracing::debug!(csr = %short_name(&csr.name), "decided: nothing to do");
            return None;
        }
        Box::pin(self.carry_out(&csr)).await
    }
}

impl<R: Resolver, C: ClusterView, A: CsrApi> Reconciler<R, C, A> {
    /// Evaluates `cached` (only while leading, or under `--dry-run`) and carries out its
    /// [`Step`]; what it did settles in the memory, which answers when to reconcile it again.
    async fn carry_out(&self, cached: &Arc<CsrObject>) -> Option<Duration> {
        let ctx = &*self.ctx;
        let csr: &CsrObject = cached;
        let logged = short_name(&csr.name);
        if !evaluates(ctx.leadership.is_leader(), ctx.dry_run) {
            ctx.leadership.skipped();
            tracing::debug!(csr = %logged, "not the leader: not evaluated");
            return None;
        }
        match self.memory.done_with(csr) {
            Some(Done::Unaddressable) => return None,
            Some(Done::Written) => {
                // A pass or a retry came before the watch brought our own write back: this is the
                // version the decision was written on, so the cache is behind, not the CSR undecided.
                tracing::debug!(csr = %logged, "decision written on this version: waiting for the watch");
                return None;
            }
            None => {}
        }
        if let Some(wait) = self.memory.held_back(csr, tokio::time::Instant::now()) {
            tracing::debug!(csr = %logged, wait = ?wait, "the apiserver asked to wait: nothing sent before then");
            return Some(wait);
        }
        if csr.name_cut {
            // No request can name it, so no decision can be written: told once, never evaluated,
            // and not counted as the oldest undecided CSR.
            ctx.metrics.record_unaddressable_csr();
            tracing::warn!(csr = %logged, "cannot decide this CSR: its name is longer than 253 bytes, so only a bounded stand-in of it is kept, which no request can name; left alone");
            return self.memory.settle(csr, Outcome::Unaddressable);
        }
        // A pending serving CSR's request is left in the apiserver: the CSR is decided as read
        // from there (the same uid, still undecided), on that request and resourceVersion.
        // A CSR retried on what was read keeps that read while its version stays the same, so a
        // CSR waiting on a newer one of its node is read once, not at every retry.
        let read = csr.request_in_apiserver();
        let whole;
        let csr = if read {
            match self.memory.kept_read(csr) {
                Some(kept) => whole = kept,
                None => match self.read_whole(csr).await {
                    Ok(fetched) => whole = fetched,
                    Err(retry_in) => return retry_in,
                },
            }
            &whole
        } else {
            csr
        };
        // Held until the decision is written: no other client CSR for the same node name, nor serving
        // CSR of the same node, is decided meanwhile, and a client approval is settled (the
        // ledger counts it from then) before the turn passes on.
        let _turn = self.memory.node_turn(csr).await;
        let sub = csr.submission();
        let started = Instant::now();
        let evaluation = evaluate(&sub, &ctx.policy, &ctx.resolver, &ctx.cluster, Timestamp::now()).await;
        ctx.metrics.observe_evaluation(started.elapsed());
        let decision = evaluation.decision;
        let node = sub.username.strip_prefix(NODE_USER_PREFIX).unwrap_or_default();
        let told = (decision.kind, decision.reason);
        // The write may run only while the fence stays open, so it cannot land after the Lease
        // it is sent under can have expired; with no time left, nothing is sent.
        let write_for = ctx.leadership.write_timeout(WRITE_TIMEOUT);
        let outcome = match step_for(decision.kind, write_for, ctx.dry_run, self.memory.announced(csr, told)) {
            Step::Ignore => {
                tracing::debug!(csr = %logged, reason = %decision.reason, "ignored");
                Outcome::Excused { announced: None }
            }
            Step::Standby => {
                ctx.leadership.skipped();
                tracing::debug!(csr = %logged, decision = decision.kind.as_str(), "not the leader: waiting");
                return None;
            }
            Step::Write(timeout) => return self.write(csr, &decision, node, timeout).await,
            Step::Wait(note) => {
                if let Some(note) = note {
                    ctx.metrics.record_decision(decision.kind, decision.reason);
                    tell(ctx, csr, &decision, node, note).await;
                }
                Outcome::Excused { announced: note.map(|_| told) }
            }
            Step::Retry(note) => {
                if let Some(note) = note {
                    tell(ctx, csr, &decision, node, note).await;
                }
                ctx.metrics.record_decision(decision.kind, decision.reason);
                let on_cluster = decision.reason.resolved_by_cluster_change();
                Outcome::Retried { on_cluster, announced: note.map(|_| told), read }
            }
        };
        let retry_in = self.memory.settle(csr, outcome);
        if matches!(outcome, Outcome::Excused { .. }) {
            self.leave_request_in_apiserver(cached);
        }
        retry_in
    }

    /// Leaves the request of `cached`, just excused (held for a human, not the approver's, or a
    /// dry run's decision told), in the apiserver: nothing reads it before the CSR is evaluated
    /// again, which reads it from there, and the cache's room for requests goes to the CSRs it
    /// decides. Not when the watch brought a newer version meanwhile (its own event evaluates it).
    fn leave_request_in_apiserver(&self, cached: &Arc<CsrObject>) {
        if cached.request().is_some() {
            let mut slim = CsrObject::clone(cached);
            if slim.leave_request_in_apiserver() {
                self.csrs.replace(cached, slim);
            }
        }
    }

    /// Reads `csr` from the apiserver ([`read::read_whole`]): the same CSR, still undecided,
    /// whole, or (`Err`) when to reconcile it again: never when it is decided, gone or replaced by
    /// another CSR of its name (the watch brings what there is now, and triggers it), after the
    /// failed write's backoff when the read failed (a read failing is never a decision).
    async fn read_whole(&self, csr: &CsrObject) -> Result<CsrObject, Option<Duration>> {
        let logged = short_name(&csr.name);
        let error = match read::read_whole(&self.api, csr, read::READ_TIMEOUT).await {
            Ok(Read::Same(whole)) => return Ok(whole),
            Ok(other) => {
                tracing::debug!(csr = %logged, read = ?other, "read before deciding: nothing to decide now");
                return Err(None);
            }
            Err(error) => error,
        };
        let outcome = error.retry_after().map_or(Outcome::ReadFailed, |wait| Outcome::Throttled { wait });
        let retry_in = self.memory.settle(csr, outcome);
        let error = format!("reading {logged} before deciding it: {error}");
        tracing::warn!(%error, retry_in = ?retry_in, "reconcile failed; retrying");
        Err(retry_in)
    }

    /// Writes `decision` on `csr`, preconditioned on the cached resourceVersion and given up after
    /// `timeout` (when the fence would close). The one place every way a write ends is handled:
    /// counted, logged, and settled in the memory, which gives the backoff (and keeps a client
    /// approval for the ledger also when it may have been written: no answer).
    async fn write(&self, csr: &CsrObject, decision: &Decision, node: &str, timeout: Duration) -> Option<Duration> {
        let ctx = &*self.ctx;
        let logged = short_name(&csr.name);
        let written = self.api.write(csr, decision, timeout).await;
        if written.is_ok() {
            ctx.metrics.record_decision(decision.kind, decision.reason);
            tell(ctx, csr, decision, node, WRITTEN).await;
        }
        let result = match &written {
            Ok(()) => WriteResult::Success,
            Err(error) if error.status() == Some(409) => WriteResult::Conflict,
            Err(error) if error.status() == Some(404) => WriteResult::NotFound,
            Err(_) => WriteResult::Error,
        };
        ctx.metrics.record_write(result);
        let approval = decision.kind == DecisionKind::Approve;
        // Asked to wait (a 429): not written, and not sent again before the wait is over.
        let outcome = match written.as_ref().err().and_then(RequestError::retry_after) {
            Some(wait) => Outcome::Throttled { wait },
            None => Outcome::Write { result, approval },
        };
        let retry_in = self.memory.settle(csr, outcome);
        if let Err(error) = written {
            match result {
                WriteResult::Conflict => {
                    tracing::debug!(csr = %logged, retry_in = ?retry_in, "conflict: re-reading and deciding again");
                }
                WriteResult::NotFound => {
                    tracing::debug!(csr = %logged, "gone before the decision was written: forgotten");
                }
                WriteResult::Success | WriteResult::Error => {
                    let error = format!("writing the decision on {logged}: {error}");
                    tracing::warn!(%error, retry_in = ?retry_in, "reconcile failed; retrying");
                }
            }
        }
        retry_in
    }
}

/// Tells a decision on `csr` (of `node`): one log line, whose `message` says what was done and
/// `detail` why, and an event carrying the decision's message after the note's prefix.
async fn tell<R, C>(ctx: &Context<R, C>, csr: &CsrObject, decision: &Decision, node: &str, note: Note) {
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::IpAddr;
    use std::sync::Mutex;

    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::runtime::watcher::Event;
    use testkit::request::legit;

    use super::*;
    use crate::events::EventLevel;
    use crate::events::{Events, PendingEvent};
    use crate::kubernetes::csr_cache::{self, CacheWriter};
    use crate::kubernetes::csr_ledger::CsrLedger;
    use crate::kubernetes::decoded::Skipped;
    use crate::kubernetes::leader::Leadership;
    use crate::kubernetes::node_index::NodeIndex;
    use crate::kubernetes::request::RequestError;
    use crate::metrics::Metrics;
    use crate::policy::{
        AddressClaim, ApiserverAddresses, BrakeInputs, ClusterError, KubeletCertificate, MachineInfo, NodeInfo,
        PolicyConfig, Resolution, ServingCsr, ServingCsrState,
    };

    const WRITES: [DecisionKind; 2] = [DecisionKind::Approve, DecisionKind::Deny];
    const LIMIT: Duration = WRITE_TIMEOUT;

    /// The apiserver as a test scripts it: each read and write takes the next answer given
    /// (a read finds nothing, a write succeeds, once the answers run out); what was sent is kept.
    #[derive(Default)]
    struct FakeApi {
        reads: Mutex<VecDeque<Result<Option<CsrObject>, RequestError>>>,
        writes: Mutex<VecDeque<Result<(), RequestError>>>,
        /// Each read's name.
        read: Mutex<Vec<String>>,
        /// Each write's CSR version, decision and time limit.
        written: Mutex<Vec<(Option<String>, DecisionKind, Duration)>>,
    }

    impl CsrApi for FakeApi {
        async fn read(&self, name: &str, _: Duration) -> Result<Option<CsrObject>, RequestError> {
            self.read.lock().unwrap().push(name.to_owned());
            self.reads.lock().unwrap().pop_front().unwrap_or(Ok(None))
        }

        async fn write(&self, csr: &CsrObject, decision: &Decision, timeout: Duration) -> Result<(), RequestError> {
            self.written.lock().unwrap().push((
                csr.resource_version.as_deref().map(str::to_owned),
                decision.kind,
                timeout,
            ));
            self.writes.lock().unwrap().pop_front().unwrap_or(Ok(()))
        }
    }

    /// What happens to this replica's leadership while a CSR is evaluated.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum During {
        Nothing,
        LosesTheLease,
        FenceCloses,
    }

    /// A cluster with no Node, Machine or other CSR but the newer serving CSRs it is given; asking
    /// for a requester's serving CSRs (which every serving CSR's evaluation does) is when the
    /// leadership changes as `during` says.
    struct Cluster {
        newer: Vec<ServingCsr>,
        machines: Vec<Arc<MachineInfo>>,
        leadership: Leadership,
        during: During,
        asked: Mutex<usize>,
    }

    impl ClusterView for Cluster {
        async fn node(&self, _: &str) -> Result<Option<NodeInfo>, ClusterError> {
            Ok(None)
        }
        async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
            Ok(self.machines.clone())
        }
        async fn load(&self) -> Result<BrakeInputs, ClusterError> {
            Ok(BrakeInputs::default())
        }
        async fn apiserver_addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
            Ok(ApiserverAddresses::default())
        }
        async fn nodes_claiming(&self, _: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
            Ok(Vec::new())
        }
        async fn client_certificates(&self, _: &str) -> Result<Vec<String>, ClusterError> {
            Ok(Vec::new())
        }
        async fn serving_csrs(&self, _: &str) -> Result<Vec<ServingCsr>, ClusterError> {
            *self.asked.lock().unwrap() += 1;
            match self.during {
                During::Nothing => {}
                During::LosesTheLease => self.leadership.lose(),
                During::FenceCloses => self.leadership.close_fence(),
            }
            Ok(self.newer.clone())
        }
        async fn kubelet_certificate(&self, _: &str) -> Result<KubeletCertificate, ClusterError> {
            Ok(KubeletCertificate::Unusable("none".into()))
        }
    }

    /// DNS that knows no name (the policy bypasses DNS resolution).
    struct NoDns;

    impl Resolver for NoDns {
        async fn resolve(&self, _: &str) -> Resolution {
            Resolution::NotFound
        }
    }

    /// A reconciler over a cache the test fills, the fakes, the Events it queued, and the ledger
    /// reading its cache and the approvals it wrote.
    struct Fixture {
        reconciler: Arc<Reconciler<NoDns, Cluster, FakeApi>>,
        cache: CacheWriter<CsrObject>,
        events: tokio::sync::mpsc::Receiver<PendingEvent>,
        ledger: CsrLedger,
    }

    struct Setup {
        policy: PolicyConfig,
        leadership: Leadership,
        dry_run: bool,
        during: During,
        newer: Vec<ServingCsr>,
        machines: Vec<Arc<MachineInfo>>,
        api: FakeApi,
    }

    impl Default for Setup {
        fn default() -> Setup {
            Setup {
                policy: testkit::policy::config(),
                leadership: Leadership::always(),
                dry_run: false,
                during: During::Nothing,
                newer: Vec::new(),
                machines: Vec::new(),
                api: FakeApi::default(),
            }
        }
    }

    fn fixture(setup: Setup) -> Fixture {
        let Setup { policy, leadership, dry_run, during, newer, machines, api } = setup;
        let (csrs, cache) = csr_cache::cache::<CsrObject>();
        let (events, queued) = Events::queued(EventLevel::All);
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cluster = Cluster { newer, machines, leadership: leadership.clone(), during, asked: Mutex::new(0) };
        let metrics = Metrics::new();
        let memory = Arc::new(Memory::new(metrics.clone()));
        let ledger = CsrLedger::new(csrs.clone(), policy.machine.clone(), Some(memory.clone()));
        let ctx = Context {
            api: kube::Api::all(client.clone()),
            policy,
            resolver: NoDns,
            cluster,
            nodes: NodeIndex::new(client, Skipped::logged(), false),
            leadership,
            events,
            metrics: metrics.clone(),
            skipped: Skipped::logged(),
            dry_run,
        };
        let reconciler = Arc::new(Reconciler { ctx: Arc::new(ctx), memory, csrs, api });
        Fixture { reconciler, cache, events: queued, ledger }
    }

    /// Node n1's legitimate serving CSR `name`, uid `uid`, at `version`, its request kept when
    /// `request`.
    fn serving(name: &str, version: &str, request: bool) -> CsrObject {
        serving_in(name, version, request, &["system:nodes", "system:authenticated"])
    }

    /// [`serving`] requested by a member of `groups`.
    fn serving_in(name: &str, version: &str, request: bool, groups: &[&str]) -> CsrObject {
        let mut csr: CertificateSigningRequest = testkit::csr::node_serving(name, "n1", 1_700_000_000, None);
        csr.spec.request = k8s_openapi::ByteString(legit("n1", 1).pem().into_bytes());
        csr.spec.groups = Some(groups.iter().map(|group| (*group).to_owned()).collect());
        csr.metadata.resource_version = Some(version.into());
        let csr = CsrObject::from(csr);
        if request {
            csr
        } else {
            let mut slim = csr;
            assert!(slim.leave_request_in_apiserver());
            slim
        }
    }

    /// Node n1's bootstrap client CSR `name` at `version`, made a minute after its Machine.
    fn client(name: &str, version: &str) -> CsrObject {
        use testkit::machine::{BOOTSTRAPPER, GROUPS, MACHINE_CREATED};
        let usages = ["digital signature", "client auth"];
        let pem = testkit::request::Request::node("n1").pem();
        let mut csr = testkit::csr::object(name, crate::policy::KUBELET_CLIENT_SIGNER, &usages, &pem);
        csr.metadata.uid = Some(format!("uid-{name}"));
        csr.metadata.resource_version = Some(version.into());
        let created = MACHINE_CREATED.parse::<jiff::Timestamp>().unwrap() + jiff::SignedDuration::from_secs(60);
        csr.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created));
        csr.spec.username = Some(BOOTSTRAPPER.into());
        csr.spec.groups = Some(GROUPS.iter().map(|group| (*group).to_owned()).collect());
        CsrObject::from(csr)
    }

    impl Fixture {
        /// Puts `csr` into the cache, as the watch would.
        fn watch(&mut self, csr: &CsrObject) {
            self.cache.apply(Event::Apply(csr.clone()));
        }

        /// One reconcile of `name`: when it asks to run again.
        async fn reconcile(&self, name: &str) -> Option<Duration> {
            self.reconciler.clone().reconcile(name.into()).await
        }

        fn api(&self) -> &FakeApi {
            &self.reconciler.api
        }

        fn written(&self) -> Vec<(Option<String>, DecisionKind, Duration)> {
            self.api().written.lock().unwrap().clone()
        }

        /// The reasons and notes of the Events queued since the last call.
        fn events(&mut self) -> Vec<(String, String)> {
            let mut told = Vec::new();
            while let Ok(event) = self.events.try_recv() {
                told.push((event.reason().to_owned(), event.note().to_owned()));
            }
            told
        }

        /// The value of `series` in the metrics.
        fn metric(&self, series: &str) -> String {
            let text = self.reconciler.ctx.metrics.encode().unwrap();
            let line = text.lines().find(|line| line.starts_with(&format!("{series} ")));
            line.map(|line| line[series.len() + 1..].to_owned()).unwrap_or_default()
        }

        fn writes(&self, result: &str) -> String {
            self.metric(&format!("node_csr_approver_writes_total{{result=\"{result}\"}}"))
        }

        fn asked_the_cluster(&self) -> usize {
            *self.reconciler.ctx.cluster.asked.lock().unwrap()
        }
    }

    fn conflict(code: u16) -> RequestError {
        let status = kube::core::Status { code, ..kube::core::Status::default() };
        RequestError::Api(kube::Error::Api(Box::new(status)))
    }

    #[tokio::test]
    async fn an_approval_is_written_once_told_and_counted_and_its_version_waits_for_the_watch() {
        let mut fixture = fixture(Setup::default());
        let csr = serving("csr-a", "7", true);
        fixture.watch(&csr);
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.written(), [(Some("7".into()), DecisionKind::Approve, LIMIT)]);
        let told = fixture.events();
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0].0, "AutoApproved");
        assert_eq!(fixture.writes("success"), "1");
        assert_eq!(fixture.reconcile("csr-a").await, None, "a pass before the watch brought the write");
        assert_eq!(fixture.written().len(), 1, "the same version is not written twice");
        fixture.watch(&serving("csr-a", "8", true));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.written().len(), 2, "a newer version is evaluated and written");
    }

    #[tokio::test]
    async fn a_conflict_is_read_again_after_a_growing_backoff_and_never_told() {
        let api = FakeApi::default();
        api.writes.lock().unwrap().extend([Err(conflict(409)), Err(conflict(409))]);
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(200)));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(400)));
        assert_eq!(fixture.writes("conflict"), "2");
        assert_eq!(fixture.writes("success"), "0");
        assert_eq!(fixture.events(), [], "nothing was decided");
        assert_eq!(fixture.reconcile("csr-a").await, None, "written at the third attempt");
        assert_eq!(fixture.written().len(), 3);
    }

    #[tokio::test]
    async fn a_csr_gone_before_its_write_is_forgotten_without_a_retry() {
        let api = FakeApi::default();
        api.writes.lock().unwrap().push_back(Err(conflict(404)));
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.writes("not_found"), "1");
        assert_eq!(fixture.events(), []);
        assert_eq!(fixture.metric("node_csr_approver_csrs_waiting_retry"), "0");
    }

    fn too_many(retry_after_seconds: u32) -> RequestError {
        let details = kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds,
        };
        let status = kube::core::Status { code: 429, details: Some(details), ..kube::core::Status::default() };
        RequestError::Api(kube::Error::Api(Box::new(status)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_answered_429_is_sent_again_only_once_its_retry_after_is_over_even_when_triggered() {
        let api = FakeApi::default();
        api.writes.lock().unwrap().extend([Err(too_many(3)), Err(too_many(1))]);
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(3)), "the wait asked, not 0.5 s");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(2)), "triggered: held back");
        assert_eq!(fixture.written().len(), 1, "nothing sent before the wait is over");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(1)), "the second 429's wait");
        assert_eq!(fixture.written().len(), 2);
        assert_eq!(fixture.writes("error"), "2");
        assert_eq!(fixture.metric("node_csr_approver_csrs_waiting_retry"), "1");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(fixture.reconcile("csr-a").await, None, "written once the wait is over");
        assert_eq!(fixture.written().len(), 3);
        assert_eq!(fixture.events().len(), 1, "told once, when written");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_answered_429_is_sent_again_only_once_its_retry_after_is_over() {
        let api = FakeApi::default();
        api.reads.lock().unwrap().push_back(Err(too_many(5)));
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", false));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(5)));
        tokio::time::advance(Duration::from_millis(4999)).await;
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(1)), "held back");
        assert_eq!(fixture.api().read.lock().unwrap().len(), 1, "read once");
    }

    #[tokio::test]
    async fn a_write_with_no_answer_or_a_server_error_is_retried_soon_and_not_told() {
        let api = FakeApi::default();
        api.writes.lock().unwrap().extend([Err(RequestError::TimedOut(LIMIT)), Err(conflict(500))]);
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(500)));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(1000)));
        assert_eq!(fixture.writes("error"), "2");
        assert_eq!(fixture.metric("node_csr_approver_csrs_waiting_retry"), "1");
        assert_eq!(fixture.events(), []);
    }

    #[tokio::test]
    async fn a_write_runs_at_most_until_the_fence_closes() {
        let leadership = Leadership::held(Duration::from_secs(3));
        let mut fixture = fixture(Setup { leadership, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        let written = fixture.written();
        assert_eq!(written.len(), 1);
        let timeout = written[0].2;
        assert!(timeout <= Duration::from_secs(3) && timeout > Duration::from_secs(2), "{timeout:?}");
    }

    #[tokio::test]
    async fn a_replica_that_loses_the_lease_or_whose_fence_closes_while_it_evaluates_writes_nothing() {
        for during in [During::LosesTheLease, During::FenceCloses] {
            let leadership = Leadership::held(Duration::from_secs(60));
            let mut fixture = fixture(Setup { leadership: leadership.clone(), during, ..Setup::default() });
            fixture.watch(&serving("csr-a", "7", true));
            assert_eq!(fixture.reconcile("csr-a").await, None, "{during:?}: the pass when it can write again");
            assert_eq!(fixture.asked_the_cluster(), 1, "{during:?}: evaluated");
            assert_eq!(fixture.written(), [], "{during:?}");
            assert_eq!(fixture.events(), [], "{during:?}");
            assert_eq!(fixture.writes("success"), "0");
            assert!(leadership.took_skipped(), "{during:?}: the next time it can write, it says so");
        }
    }

    #[tokio::test]
    async fn a_standby_evaluates_nothing() {
        let leadership = Leadership::held(Duration::from_secs(60));
        leadership.lose();
        let mut fixture = fixture(Setup { leadership: leadership.clone(), ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.asked_the_cluster(), 0);
        assert_eq!(fixture.written(), []);
        assert_eq!(fixture.events(), []);
        assert!(leadership.took_skipped());
    }

    #[tokio::test]
    async fn a_dry_run_tells_its_decision_once_and_writes_nothing() {
        let leadership = Leadership::held(Duration::from_secs(60));
        leadership.lose();
        let mut fixture = fixture(Setup { leadership, dry_run: true, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", true));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.written(), []);
        let told = fixture.events();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].1.starts_with("dry run, nothing written: "), "{told:?}");
        assert_eq!(
            fixture.metric("node_csr_approver_decisions_total{decision=\"approve\",reason=\"AutoApproved\"}"),
            "1"
        );
    }

    #[tokio::test]
    async fn a_csr_waiting_on_a_newer_one_retries_tells_once_and_keeps_what_was_read() {
        let newer =
            ServingCsr { name: "csr-b".into(), created: Some(jiff::Timestamp::now()), state: ServingCsrState::Pending };
        let api = FakeApi::default();
        let reads = [Ok(Some(serving("csr-a", "7", true))), Ok(Some(serving("csr-a", "8", true)))];
        api.reads.lock().unwrap().extend(reads);
        let mut fixture = fixture(Setup { newer: vec![newer], api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", false));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(2)));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(4)));
        assert_eq!(fixture.api().read.lock().unwrap().len(), 1, "read once while its version stays");
        let told = fixture.events();
        assert_eq!(told.len(), 1, "{told:?}");
        assert_eq!(told[0].0, "NewerServingCSRPending");
        assert!(told[0].1.starts_with("retrying: "), "{told:?}");
        assert_eq!(fixture.written(), []);
        fixture.watch(&serving("csr-a", "8", false));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_secs(8)));
        assert_eq!(fixture.api().read.lock().unwrap().len(), 2, "a new version is read again");
    }

    #[tokio::test]
    async fn a_csr_read_before_its_decision_is_decided_as_read_or_left_alone() {
        let api = FakeApi::default();
        let mut decided = serving("csr-a", "8", true);
        decided.certificate_issued = true;
        let mut replaced = serving("csr-a", "8", true);
        replaced.uid = "other".into();
        api.reads.lock().unwrap().extend([
            Err(RequestError::TimedOut(read::READ_TIMEOUT)),
            Ok(None),
            Ok(Some(decided)),
            Ok(Some(replaced)),
            Ok(Some(serving("csr-a", "8", true))),
        ]);
        let mut fixture = fixture(Setup { api, ..Setup::default() });
        fixture.watch(&serving("csr-a", "7", false));
        assert_eq!(fixture.reconcile("csr-a").await, Some(Duration::from_millis(500)), "a failed read is retried");
        for gone in ["gone", "decided", "replaced"] {
            assert_eq!(fixture.reconcile("csr-a").await, None, "{gone}: the watch brings it");
        }
        assert_eq!(fixture.written(), []);
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.written(), [(Some("8".into()), DecisionKind::Approve, LIMIT)], "on what was read");
        assert_eq!(fixture.api().read.lock().unwrap().len(), 5);
    }

    #[tokio::test]
    async fn a_csr_gone_or_decided_in_the_cache_needs_nothing() {
        let mut fixture = fixture(Setup::default());
        assert_eq!(fixture.reconcile("csr-a").await, None);
        let mut decided = serving("csr-a", "7", true);
        decided.certificate_issued = true;
        fixture.watch(&decided);
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.asked_the_cluster(), 0);
        assert_eq!(fixture.written(), []);
    }

    #[tokio::test]
    async fn a_held_csr_is_told_once_and_leaves_its_request_in_the_apiserver_which_is_read_again() {
        let policy = PolicyConfig { skip_deny_step: true, ..testkit::policy::config() };
        let api = FakeApi::default();
        api.reads.lock().unwrap().push_back(Ok(Some(serving_in("csr-a", "7", true, &["system:nodes"]))));
        let mut fixture = fixture(Setup { policy, api, ..Setup::default() });
        fixture.watch(&serving_in("csr-a", "7", true, &["system:nodes"]));
        assert_eq!(fixture.reconcile("csr-a").await, None, "left alone until it changes");
        let told = fixture.events();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].1.starts_with("held for a human: "), "{told:?}");
        let cached = fixture.reconciler.csrs.get("csr-a").unwrap();
        assert!(cached.request_in_apiserver(), "the cache keeps no request of a held CSR");
        assert_eq!(fixture.api().read.lock().unwrap().len(), 0);
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.api().read.lock().unwrap().len(), 1, "its next evaluation reads it");
        assert_eq!(fixture.events(), [], "told once");
        assert_eq!(fixture.written(), []);
        fixture.api().reads.lock().unwrap().push_back(Ok(Some(serving_in("csr-a", "7", true, &["system:nodes"]))));
        assert_eq!(fixture.reconcile("csr-a").await, None);
        assert_eq!(fixture.api().read.lock().unwrap().len(), 2, "what a held CSR's read found is not kept");
    }

    #[tokio::test]
    async fn a_client_approval_counts_in_the_ledger_once_sent_even_unanswered_but_not_when_refused() {
        let answers = [(Ok(()), true), (Err(RequestError::TimedOut(LIMIT)), true), (Err(conflict(409)), false)];
        for (answer, counted) in answers {
            let api = FakeApi::default();
            api.writes.lock().unwrap().push_back(answer);
            let machines = vec![testkit::machine::n1_machine(None)];
            let policy = testkit::machine::machine_config();
            let mut fixture = fixture(Setup { policy, machines, api, ..Setup::default() });
            fixture.watch(&client("client-n1", "7"));
            fixture.reconcile("client-n1").await;
            assert_eq!(fixture.written(), [(Some("7".into()), DecisionKind::Approve, LIMIT)], "{counted}");
            let listed = fixture.ledger.client_certificates("n1");
            assert_eq!(listed, if counted { vec!["client-n1".to_owned()] } else { Vec::new() }, "{counted}");
        }
    }

    #[test]
    fn only_a_leader_outside_dry_run_writes() {
        for kind in WRITES {
            for announced in [false, true] {
                assert_eq!(step_for(kind, Some(LIMIT), false, announced), Step::Write(LIMIT));
                assert_eq!(step_for(kind, None, false, announced), Step::Standby);
            }
        }
    }

    #[test]
    fn dry_run_tells_a_would_be_write_once_whoever_leads() {
        for kind in WRITES {
            for leading in [None, Some(LIMIT)] {
                assert_eq!(step_for(kind, leading, true, false), Step::Wait(Some(DRY_RUN)));
                assert_eq!(step_for(kind, leading, true, true), Step::Wait(None));
            }
        }
    }

    #[test]
    fn holds_and_retries_are_told_once_and_never_written() {
        for (leading, dry_run) in [(Some(LIMIT), false), (None, false), (Some(LIMIT), true), (None, true)] {
            assert_eq!(step_for(DecisionKind::Hold, leading, dry_run, false), Step::Wait(Some(HELD)));
            assert_eq!(step_for(DecisionKind::Hold, leading, dry_run, true), Step::Wait(None));
            assert_eq!(step_for(DecisionKind::Retry, leading, dry_run, false), Step::Retry(Some(RETRYING)));
            assert_eq!(step_for(DecisionKind::Retry, leading, dry_run, true), Step::Retry(None));
            assert_eq!(step_for(DecisionKind::Ignore, leading, dry_run, false), Step::Ignore);
        }
    }

    #[test]
    fn standbys_evaluate_only_under_dry_run() {
        assert!(evaluates(true, false));
        assert!(evaluates(true, true));
        assert!(evaluates(false, true));
        assert!(!evaluates(false, false));
    }
}
