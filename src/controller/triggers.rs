//! What makes the controller look at a CSR, as one stream of [`Trigger`]s ([`triggers`]). Live
//! watch events name the CSR they changed; besides them, a *pass* reconciles every undecided CSR
//! in the cache, after each completed list or relist of the watch (its objects reach the cache
//! only when the list completes), whenever this replica becomes able to write, and every resync
//! period; in machine mode a Machine or Node change makes one too while some CSR waits on the
//! cluster. So the controller is level-triggered: a CSR whose event was missed or skipped is found
//! by the next pass.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, oneshot};

use crate::kubernetes::csr_cache::{Cache, CacheWriter};
use crate::kubernetes::csr_object::{CsrObject, RequestRoom, Watched};
use crate::kubernetes::decoded::{Decoded, Skipped, Undecodable};
use crate::kubernetes::kube_watch;
use crate::kubernetes::machines::MachineCache;
use crate::kubernetes::object_fields::Csr;
use crate::kubernetes::object_fields::{Meta, ObjectKind};
use crate::metrics::{Metrics, PassTrigger};
use crate::policy::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

/// Machine and Node changes re-trigger waiting CSRs at most this often.
const RETRIGGER_PERIOD: Duration = Duration::from_secs(1);

/// What makes a CSR be reconciled: its name, its requester, and whether the trigger saw it decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trigger {
    /// metadata.name.
    pub name: Arc<str>,
    /// spec.username: whose turn it takes.
    pub requester: Arc<str>,
    /// A decided CSR needs no reconcile unless one is queued (it then ends at once).
    pub decided: bool,
}

/// Where the triggers come from.
pub(super) struct Sources<W, F> {
    /// The CSRs, watched.
    pub api: Api<Decoded<Csr>>,
    /// Machine mode decides client CSRs too: they are watched beside kubelet-serving ones.
    pub client_csrs: bool,
    /// The CSR cache the watch fills.
    pub cache: CacheWriter<CsrObject>,
    /// Whether a pending CSR keeps its request in the cache; past the room, its reconcile reads
    /// it from the apiserver.
    pub request_room: RequestRoom,
    /// Told once the first list of the watch is complete.
    pub synced: oneshot::Sender<()>,
    /// Yields whenever this replica becomes able to write.
    pub writable: W,
    /// Every undecided CSR is reconciled again at this interval.
    pub resync_period: Duration,
    /// Where passes are counted.
    pub metrics: Metrics,
    /// Where CSRs that cannot be decoded are reported.
    pub skipped: Skipped,
    /// Machine mode's Machines and Nodes.
    pub machines: Option<MachineCache>,
    /// Whether some CSR waits on a Machine, a Node or the pending brake.
    pub waiting_on_cluster: F,
}

/// Every trigger of `sources`: live watch events, the passes, and Machine and Node changes.
pub(super) fn triggers<W, F>(sources: Sources<W, F>) -> impl Stream<Item = Trigger> + Send
where
    W: Stream<Item = ()> + Send + 'static,
    F: Fn() -> bool + Send + 'static,
{
    let Sources {
        api,
        client_csrs,
        mut cache,
        request_room,
        synced,
        writable,
        resync_period,
        metrics,
        skipped,
        machines,
        waiting_on_cluster,
    } = sources;
    // A streaming list (WatchList, on by default since Kubernetes 1.34) sends what exists one
    // object at a time, where a paged list holds up to 500 objects at once: a few hostile CSRs at
    // the apiserver's maximum object size would be hundreds of MiB in one page.
    // A field selector names one signer: machine mode, which decides two, watches every CSR and
    // drops those of any other signer as they come, before the cache ([`decided_here`]).
    let config = watcher::Config::default().streaming_lists();
    let config = if client_csrs { config } else { config.fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}")) };
    // The cache keeps only what decisions and the write need (`CsrObject::cached`): no labels,
    // annotations or managedFields, no PKCS#10 request once a CSR is decided, nor, past the
    // cache's room for requests, that of a pending CSR (its reconcile reads it from the
    // apiserver). Every watch event carries the whole object, so nothing is lost.
    let store = cache.reader();
    let watch = kube_watch::stream(api, config).try_filter_map(move |event| {
        let keep_request = |csr: &Csr| request_room.keeps(csr, cache.size(), cache.weight());
        let applied = watched(event, keep_request, client_csrs, &skipped).map(|event| cache.apply(event));
        futures::future::ready(Ok(applied))
    });
    let relisted = Arc::new(Notify::new());
    let live = live_triggers(watch, relisted.clone(), synced, store.clone());
    let passes = undecided_in_each_pass(passes(relisted, writable, resync_period), store.clone(), metrics);
    let changes = match machines {
        Some(machines) => on_cluster_change(machines.changes(), waiting_on_cluster, store).boxed(),
        None => futures::stream::empty().boxed(),
    };
    futures::stream::select(live, futures::stream::select(passes, changes))
}

/// Whether the controller decides CSRs of `csr`'s signer: kubelet-serving ones, and with
/// `client_csrs` (machine mode) kube-apiserver-client-kubelet ones. Triage ignores any other, and
/// nothing else reads it, so the cache holds none (a signer never changes).
fn decided_here(csr: &Csr, client_csrs: bool) -> bool {
    let signer = csr.spec.signer_name.as_str();
    signer == KUBELET_SERVING_SIGNER || (client_csrs && signer == KUBELET_CLIENT_SIGNER)
}

/// `event` with its CSR as the watch brought it, to be kept as [`CsrObject::cached`] (its request
/// too when `keep_request` says so), or nothing for a CSR of a signer not [`decided_here`]. A CSR
/// that could not be decoded is reported to `skipped` and left out: listed, it is not cached;
/// changed, the version cached before is dropped, as if deleted (nothing decides on what it no
/// longer is).
fn watched(
    event: Event<Decoded<Csr>>,
    keep_request: impl Fn(&Csr) -> bool,
    client_csrs: bool,
    skipped: &Skipped,
) -> Option<Event<Watched>> {
    let watched = |csr: Csr| {
        let keep_request = keep_request(&csr);
        decided_here(&csr, client_csrs).then_some(Watched { csr, keep_request })
    };
    let gone = |undecodable: &Undecodable| {
        skipped.report(ObjectKind::Csr, undecodable);
        let name = ObjectMeta { name: undecodable.metadata.name.clone(), ..ObjectMeta::default() };
        Event::Delete(Watched { csr: Csr { metadata: Meta(name), ..Csr::default() }, keep_request: false })
    };
    Some(match event {
        Event::Apply(Decoded::Object(csr)) => Event::Apply(watched(csr)?),
        Event::Apply(Decoded::Undecodable(undecodable)) => gone(&undecodable),
        Event::Delete(Decoded::Object(csr)) => Event::Delete(watched(csr)?),
        Event::Delete(Decoded::Undecodable(undecodable)) => gone(&undecodable),
        Event::Init => Event::Init,
        Event::InitApply(csr) => Event::InitApply(watched(skipped.keep(ObjectKind::Csr, csr)?)?),
        Event::InitDone => Event::InitDone,
    })
}

/// The trigger of `csr`: its name and requester shared with the cache, not copied.
fn trigger_of(csr: &CsrObject) -> Trigger {
    Trigger { name: csr.name.clone(), requester: csr.username.clone(), decided: csr.is_decided() }
}

/// The triggers of an applied `csr`: its own and, when it is a decided kubelet-serving CSR that
/// can release its node's older ones, those of its requester's undecided serving CSRs in `store`
/// that are older than it. An older one waits while a newer one is undecided
/// (`NewerServingCSRPending`), so it is decided as soon as that one is, not after its retry
/// backoff (up to a minute). Only an approval, or a refusal with no newer CSR of the node
/// undecided or approved (the one the others waited on), can release them: a `Superseded` denial
/// (an approved one is newer) triggers nothing more, so a node's flood of duplicates is not
/// triggered again at each of its denials.
fn applied(csr: &CsrObject, store: &Cache<CsrObject>) -> Vec<Trigger> {
    let mut triggers = vec![trigger_of(csr)];
    if !csr.is_decided() || &*csr.signer_name != KUBELET_SERVING_SIGNER {
        return triggers;
    }
    /// Newer: a later creation time, then a greater name (the superseded rule's order).
    fn age(of: &CsrObject) -> (Option<jiff::Timestamp>, &str) {
        (of.created, &of.name)
    }
    let decided = age(csr);
    store.in_group(&csr.username, |csrs| {
        let releases = !csr.is_refused() || !csrs.iter().any(|other| !other.is_refused() && age(other) > decided);
        if releases {
            let waiting = csrs.iter().filter(|other| !other.is_decided() && age(other) < decided);
            triggers.extend(waiting.map(|other| trigger_of(other)));
        }
    });
    triggers
}

/// The triggers of live watch events, from `events` as the cache applied them ([`applied`]). A completed list
/// or relist signals `relisted` (and `synced`, the first time) instead of yielding its objects:
/// they are in the cache only from then on, so a pass after it finds every one. Watch errors
/// are logged (a warning when the watch starts failing, one line when it recovers) and dropped:
/// the watch recovers by itself after its backoff.
fn live_triggers(
    events: impl Stream<Item = Result<Event<Arc<CsrObject>>, watcher::Error>> + Send,
    relisted: Arc<Notify>,
    synced: oneshot::Sender<()>,
    store: Cache<CsrObject>,
) -> impl Stream<Item = Trigger> + Send {
    let mut synced = Some(synced);
    let mut failing = false;
    events
        .filter_map(move |event| {
            let object = match event {
                Err(error) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(%error, "watching CSRs failed; retrying");
                    } else {
                        tracing::debug!(%error, "watching CSRs failed again; retrying");
                    }
                    None
                }
                Ok(event) => {
                    if std::mem::replace(&mut failing, false) {
                        tracing::info!("watching CSRs again");
                    }
                    match event {
                        Event::Apply(csr) => Some(applied(&csr, &store)),
                        Event::InitDone => {
                            tracing::debug!("CSR list complete: every undecided CSR is evaluated");
                            relisted.notify_one();
                            if let Some(synced) = synced.take() {
                                let _ = synced.send(());
                            }
                            None
                        }
                        Event::Init | Event::InitApply(_) | Event::Delete(_) => None,
                    }
                }
            };
            futures::future::ready(object)
        })
        .flat_map(futures::stream::iter)
}

/// The pass triggers: `relisted`, `writable` and every `resync` period.
fn passes(
    relisted: Arc<Notify>,
    writable: impl Stream<Item = ()> + Send + 'static,
    resync: Duration,
) -> impl Stream<Item = PassTrigger> + Send {
    let relists = futures::stream::unfold(relisted, |relisted| async move {
        relisted.notified().await;
        Some((PassTrigger::Relist, relisted))
    });
    let periodic = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some((PassTrigger::Periodic, ()))
    });
    futures::stream::select(relists, futures::stream::select(writable.map(|()| PassTrigger::Writable), periodic))
}

/// For each pass of `triggers`, a trigger of every undecided CSR in `store` (counted in
/// `metrics`). Decided CSRs stay in the cache until they are deleted, and are not looked at.
fn undecided_in_each_pass(
    triggers: impl Stream<Item = PassTrigger> + Send + 'static,
    store: Cache<CsrObject>,
    metrics: Metrics,
) -> impl Stream<Item = Trigger> + Send {
    triggers.flat_map(move |trigger| {
        metrics.record_pass(trigger);
        let undecided = undecided(&store);
        tracing::debug!(trigger = trigger.as_str(), undecided = undecided.len(), "reconciling every undecided CSR");
        triggers_of(undecided)
    })
}

/// Every undecided CSR in `store`: one pointer each (the pass holds no trigger, 40 bytes, nor
/// the whole cache).
fn undecided(store: &Cache<CsrObject>) -> Vec<Arc<CsrObject>> {
    store.filtered(|csr| !csr.is_decided())
}

/// The trigger of each of `csrs`, each made as it is taken.
fn triggers_of(csrs: Vec<Arc<CsrObject>>) -> impl Stream<Item = Trigger> + Send {
    futures::stream::iter(csrs.into_iter().map(|csr| trigger_of(&csr)))
}

/// Yields every undecided CSR of `store` after a Machine or Node changed while some CSR waits on
/// the cluster (`waiting`), at most once per [`RETRIGGER_PERIOD`] (changes in between are
/// coalesced).
fn on_cluster_change(
    changes: tokio::sync::watch::Receiver<u64>,
    waiting: impl Fn() -> bool + Send + 'static,
    store: Cache<CsrObject>,
) -> impl Stream<Item = Trigger> + Send {
    futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        tokio::time::sleep(RETRIGGER_PERIOD).await;
        changes.borrow_and_update();
        Some(((), changes))
    })
    .filter(move |()| futures::future::ready(waiting()))
    .flat_map(move |()| triggers_of(undecided(&store)))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use testkit::csr::node_serving as serving;

    use super::*;
    use crate::kubernetes::csr_cache;

    #[test]
    fn an_undecodable_csr_is_left_out_of_a_list_and_drops_its_cached_version_when_changed() {
        let metrics = Metrics::new();
        let skipped = Skipped::counting({
            let metrics = metrics.clone();
            move |kind| metrics.record_undecodable(kind)
        });
        let undecodable = || {
            let metadata = ObjectMeta { name: Some("bad".into()), ..ObjectMeta::default() };
            Decoded::<Csr>::Undecodable(Box::new(Undecodable { metadata, error: "a time out of range".into() }))
        };
        let good = || Decoded::Object(Csr::from(serving("bad", "n1", 1, None)));
        let (store, mut writer) = csr_cache::cache::<CsrObject>();
        let mut apply = |event| watched(event, |_| true, false, &skipped).map(|event| writer.apply(event));
        apply(Event::Init);
        apply(Event::InitApply(good()));
        apply(Event::InitDone);
        assert!(store.get("bad").is_some());
        apply(Event::Init);
        assert!(apply(Event::InitApply(undecodable())).is_none(), "a relist leaves it out");
        apply(Event::InitDone);
        assert!(store.get("bad").is_none());
        apply(Event::Apply(good()));
        assert!(matches!(apply(Event::Apply(undecodable())), Some(Event::Delete(_))), "changed: as if deleted");
        assert!(store.get("bad").is_none());
        apply(Event::Apply(good()));
        apply(Event::Delete(undecodable()));
        assert!(store.get("bad").is_none());
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(r#"node_csr_approver_undecodable_objects_total{kind="CertificateSigningRequest"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn only_csrs_of_a_signer_decided_here_reach_the_cache_and_each_as_the_room_says() {
        let skipped = Skipped::counting(|_| {});
        let of = |signer: &str| {
            let mut csr = Csr::from(serving("a", "n1", 1, None));
            csr.spec.signer_name = signer.into();
            csr
        };
        let (serving_signer, client) = (KUBELET_SERVING_SIGNER, KUBELET_CLIENT_SIGNER);
        let cases = [
            (serving_signer, false, true),
            (serving_signer, true, true),
            (client, true, true),
            (client, false, false),
            ("example.com/x", true, false),
            ("example.com/x", false, false),
        ];
        for (signer, client_csrs, cached) in cases {
            for keep in [false, true] {
                let events = [
                    Event::Apply(Decoded::Object(of(signer))),
                    Event::InitApply(Decoded::Object(of(signer))),
                    Event::Delete(Decoded::Object(of(signer))),
                ];
                for event in events {
                    let kept = match watched(event, |csr| keep && csr.spec.signer_name == signer, client_csrs, &skipped)
                    {
                        Some(Event::Apply(kept) | Event::InitApply(kept) | Event::Delete(kept)) => Some(kept),
                        _ => None,
                    };
                    assert_eq!(kept.is_some(), cached, "{signer} {client_csrs}");
                    assert!(kept.is_none_or(|kept| kept.keep_request == keep), "{signer}: as the room says");
                }
            }
        }
    }

    /// The names `applied` triggers for `csr` among `cached`, sorted.
    fn triggered(cached: Vec<CertificateSigningRequest>, csr: CertificateSigningRequest) -> Vec<String> {
        let (store, mut writer) = csr_cache::cache();
        writer.apply(Event::<CsrObject>::Init);
        for csr in cached {
            writer.apply(Event::InitApply(csr));
        }
        writer.apply(Event::<CsrObject>::InitDone);
        let mut names: Vec<String> =
            applied(&CsrObject::from(csr), &store).iter().map(|t| String::from(&*t.name)).collect();
        names.sort();
        names
    }

    #[test]
    fn a_decided_serving_csr_triggers_the_older_undecided_ones_of_its_node_it_releases() {
        let older = || serving("older", "n1", 1, None);
        let other_node = || serving("other-node", "n2", 1, None);
        let newest = |decided| serving("newest", "n1", 3, decided);
        let approved = newest(Some("Approved"));
        let cached = || vec![older(), serving("middle", "n1", 2, None), newest(None), other_node()];
        assert_eq!(triggered(cached(), approved.clone()), ["middle", "newest", "older"], "approved: its older ones");
        assert_eq!(triggered(cached(), newest(Some("Denied"))), ["middle", "newest", "older"], "the one waited on");
        let middle_denied = serving("middle", "n1", 2, Some("Denied"));
        let cached = vec![older(), middle_denied.clone(), approved.clone(), other_node()];
        assert_eq!(triggered(cached, middle_denied.clone()), ["middle"], "superseded: an approved one is newer");
        let cached = vec![older(), middle_denied.clone(), newest(None)];
        assert_eq!(triggered(cached, middle_denied), ["middle"], "a newer one is still pending");
        let fresh = serving("fresh", "n1", 4, None);
        assert_eq!(triggered(vec![older(), fresh.clone()], fresh), ["fresh"], "an undecided CSR: itself only");
        assert_eq!(triggered(vec![serving("lone", "n3", 1, Some("Approved"))], approved), ["newest"], "none waits");
    }

    #[tokio::test]
    async fn a_pass_triggers_every_undecided_csr_and_no_decided_one() {
        let (store, mut writer) = csr_cache::cache();
        writer.apply(Event::<CsrObject>::Init);
        for (name, decided) in [("a", None), ("b", Some("Approved")), ("c", None), ("d", Some("Denied"))] {
            writer.apply(Event::InitApply(serving(name, "n1", 1, decided)));
        }
        writer.apply(Event::<CsrObject>::InitDone);
        let mut triggered: Vec<Trigger> = triggers_of(undecided(&store)).collect().await;
        triggered.sort_by(|a, b| a.name.cmp(&b.name));
        let expected =
            ["a", "c"].map(|name| Trigger { name: name.into(), requester: "system:node:n1".into(), decided: false });
        assert_eq!(triggered, expected);
    }
}
