//! The apiserver's own addresses, watched: the ClusterIPs of the `default/kubernetes` Service and
//! the addresses of its EndpointSlices, kept apart: no node may hold a serving certificate for a
//! ClusterIP, and only the one node claiming it for an EndpointSlice address
//! (`policy::cluster_identity`).
//!
//! Two watches, each of exactly those objects: the Service by the field selector
//! `metadata.name=kubernetes` (RBAC's `resourceNames` restricts get, not list or watch, so the
//! Role grants `services` in `default` and the selector narrows what is read), the EndpointSlices by
//! the label `kubernetes.io/service-name=kubernetes`. Until both have listed, the addresses are
//! unknown and every CSR with an IP SAN is retried, after a short wait for the first lists
//! ([`ApiserverWatch::first_answer`]). Afterwards the last state listed or watched
//! stands while a watch restarts, as in every reflector-backed cache of this controller; a relist
//! replaces it whole. Both are read as types of the approver's own that read only the addresses
//! ([`ServiceObject`], [`SliceObject`]); one that still cannot be decoded is reported and makes the
//! addresses unknown (every CSR with an IP SAN retried) until it changes or goes: these addresses
//! are the ones no node may claim, so none is ever left out.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kube_watch;
use crate::kubernetes::object_fields::{Meta, ObjectKind, UndecodableError, resource_of};
use crate::policy::{ApiserverAddresses, ClusterError, RequestError, Unlisted};

/// A Service as the approver reads it: its ClusterIPs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServiceObject {
    /// Its metadata ([`Meta`]).
    pub metadata: Meta,
    /// Its ClusterIPs.
    #[serde(default)]
    pub spec: ServiceFields,
}

resource_of!(ServiceObject, Service);

/// The fields of a Service's spec the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServiceFields {
    /// spec.clusterIP.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// spec.clusterIPs.
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Option<Vec<String>>,
}

/// An EndpointSlice as the approver reads it: its endpoints' addresses.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SliceObject {
    /// Its metadata ([`Meta`]).
    pub metadata: Meta,
    /// Its endpoints.
    #[serde(default)]
    pub endpoints: Vec<EndpointFields>,
}

resource_of!(SliceObject, EndpointSlice);

/// The field of an endpoint the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EndpointFields {
    /// addresses.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// The namespace of the apiserver's Service.
pub const NAMESPACE: &str = "default";
/// The apiserver's Service.
pub const SERVICE: &str = "kubernetes";
/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// How often [`ApiserverWatch::first_answer`] looks again.
const FIRST_ANSWER_POLL: Duration = Duration::from_millis(20);

/// The Service's ClusterIPs (`spec.clusterIPs` and `spec.clusterIP`); `None` and other text that
/// is no address is skipped.
pub fn service_addresses(service: &ServiceObject) -> Vec<IpAddr> {
    let spec = &service.spec;
    let ips = spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter());
    ips.filter_map(|ip| ip.trim().parse().ok()).collect()
}

/// Every address of every endpoint of the slice, ready or not.
pub fn slice_addresses(slice: &SliceObject) -> Vec<IpAddr> {
    let addresses = slice.endpoints.iter().flat_map(|endpoint| endpoint.addresses.iter());
    addresses.filter_map(|ip| ip.trim().parse().ok()).collect()
}

/// Whether `slice` belongs to the apiserver's Service.
pub fn is_apiserver_slice(slice: &SliceObject) -> bool {
    slice.namespace().as_deref() == Some(NAMESPACE)
        && slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(SERVICE)
}

/// Whether `service` is the apiserver's Service.
pub fn is_apiserver_service(service: &ServiceObject) -> bool {
    service.namespace().as_deref() == Some(NAMESPACE) && service.metadata.0.name.as_deref() == Some(SERVICE)
}

/// What one watch has seen: the addresses of each object by name.
#[derive(Debug, Default)]
struct Part {
    /// The first list has completed.
    synced: bool,
    /// The last error, for the message while not synced.
    error: Option<RequestError>,
    objects: BTreeMap<String, Addresses>,
    /// A relist under way: it replaces `objects` when it completes.
    relist: Option<BTreeMap<String, Addresses>>,
}

/// The addresses of one object, or why they are unknown: it could not be decoded.
type Addresses = Result<Vec<IpAddr>, UndecodableError>;

impl Part {
    fn apply<K: kube::Resource>(
        &mut self,
        event: Result<watcher::Event<Decoded<K>>, watcher::Error>,
        addresses: fn(&K) -> Vec<IpAddr>,
        kind: ObjectKind,
        skipped: &Skipped,
    ) {
        let read = |object: &Decoded<K>| match object {
            Decoded::Object(object) => Ok(addresses(object)),
            Decoded::Undecodable(undecodable) => Err(skipped.report(kind, undecodable)),
        };
        match event {
            Ok(watcher::Event::Init) => self.relist = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(object)) => {
                self.relist.get_or_insert_default().insert(object.name_any(), read(&object));
            }
            Ok(watcher::Event::InitDone) => {
                self.objects = self.relist.take().unwrap_or_default();
                self.synced = true;
                self.error = None;
            }
            Ok(watcher::Event::Apply(object)) => {
                self.objects.insert(object.name_any(), read(&object));
            }
            Ok(watcher::Event::Delete(object)) => {
                self.objects.remove(&object.name_any());
            }
            Err(error) => {
                tracing::warn!(%error, "watching the apiserver's Service or EndpointSlices in default");
                self.error = Some(RequestError::new(error));
            }
        }
    }

    /// Whether the watch has answered: its first list completed, or it failed.
    fn answered(&self) -> bool {
        self.synced || self.error.is_some()
    }

    fn addresses(&self, what: &'static str) -> Result<impl Iterator<Item = IpAddr> + '_, ClusterError> {
        if !self.synced {
            let why = self.error.clone().map_or(Unlisted::FirstList("the first list"), Unlisted::Failed);
            return Err(ClusterError::NotListed { what, why });
        }
        if let Some(Err(undecodable)) = self.objects.values().find(|addresses| addresses.is_err()) {
            let why = Unlisted::Failed(RequestError::new(undecodable.clone()));
            return Err(ClusterError::NotListed { what, why });
        }
        Ok(self.objects.values().flatten().flatten().copied())
    }
}

#[derive(Debug, Default)]
struct State {
    service: Part,
    slices: Part,
}

/// Aborts the watches when the last handle is dropped.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The watched addresses of the apiserver. Cheap to clone.
#[derive(Clone)]
pub struct ApiserverWatch {
    state: Arc<Mutex<State>>,
    _tasks: Arc<Tasks>,
}

impl ApiserverWatch {
    /// Starts both watches on the current Tokio runtime; what they cannot decode is reported to
    /// `skipped`.
    pub fn start(client: Client, skipped: Skipped) -> ApiserverWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let services = Api::<Decoded<ServiceObject>>::namespaced(client.clone(), NAMESPACE);
        let service_config = watcher::Config::default().fields(&format!("metadata.name={SERVICE}"));
        let slices = Api::<Decoded<SliceObject>>::namespaced(client, NAMESPACE);
        let slice_config = watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={SERVICE}"));
        let service_state = state.clone();
        let service_skipped = skipped.clone();
        let service_task = tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(services, service_config));
            while let Some(event) = events.next().await {
                let skipped = &service_skipped;
                lock(&service_state).service.apply(event, service_addresses, ObjectKind::Service, skipped);
            }
        });
        let slice_state = state.clone();
        let slice_task = tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(slices, slice_config));
            while let Some(event) = events.next().await {
                lock(&slice_state).slices.apply(event, slice_addresses, ObjectKind::EndpointSlice, &skipped);
            }
        });
        ApiserverWatch { state, _tasks: Arc::new(Tasks(vec![service_task, slice_task])) }
    }

    /// The apiserver's addresses, the Service's apart from its EndpointSlices'; an error until
    /// both watches have listed.
    pub fn addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
        let state = lock(&self.state);
        let service = state.service.addresses("the default/kubernetes Service")?.collect();
        let endpoints = state.slices.addresses("the EndpointSlices of default/kubernetes")?.collect();
        Ok(ApiserverAddresses { service, endpoints })
    }

    /// Resolves once both watches have answered (listed, or failed), or after `limit`: a CSR
    /// evaluated in the first moments after start asks before the first lists could complete,
    /// and would otherwise be retried for nothing. Once both have answered it returns at once.
    pub async fn first_answer(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let answered = {
                let state = lock(&self.state);
                state.service.answered() && state.slices.answered()
            };
            if answered || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(FIRST_ANSWER_POLL).await;
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;
    use crate::kubernetes::decoded::Undecodable;

    fn service(name: &str, ips: &[&str]) -> Decoded<ServiceObject> {
        Decoded::Object(ServiceObject {
            metadata: Meta(ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }),
            spec: ServiceFields {
                cluster_ips: Some(ips.iter().map(|ip| (*ip).to_owned()).collect()),
                ..ServiceFields::default()
            },
        })
    }

    fn undecodable(name: &str) -> Decoded<ServiceObject> {
        let metadata = ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() };
        Decoded::Undecodable(Box::new(Undecodable { metadata, error: "a time out of range".into() }))
    }

    #[test]
    fn an_undecodable_object_makes_the_addresses_unknown_until_it_changes_or_goes() {
        let skipped = Skipped::logged();
        let mut part = Part::default();
        let apply = |part: &mut Part, event| part.apply(Ok(event), service_addresses, ObjectKind::Service, &skipped);
        apply(&mut part, watcher::Event::Init);
        apply(&mut part, watcher::Event::InitApply(service("kubernetes", &["10.96.0.1"])));
        apply(&mut part, watcher::Event::InitApply(undecodable("other")));
        apply(&mut part, watcher::Event::InitDone);
        let error = part.addresses("s").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("could not be decoded: a time out of range"), "{error}");
        apply(&mut part, watcher::Event::Apply(service("other", &["10.96.0.2"])));
        let ips = part.addresses("s").map(Iterator::count).unwrap_or_default();
        assert_eq!(ips, 2, "decoded again: known again");
        apply(&mut part, watcher::Event::Apply(undecodable("kubernetes")));
        assert!(
            part.addresses("s").is_err(),
            "a changed object that cannot be decoded is unknown, not its old version"
        );
        apply(&mut part, watcher::Event::Delete(undecodable("kubernetes")));
        assert_eq!(part.addresses("s").map(Iterator::count).unwrap_or_default(), 1, "gone: known again");
    }

    #[tokio::test]
    async fn dropping_the_last_handle_ends_the_watches() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<()>(1);
        let task = tokio::spawn(async move {
            let _sender = sender;
            std::future::pending::<()>().await;
        });
        drop(Tasks(vec![task]));
        let closed = tokio::time::timeout(Duration::from_secs(5), receiver.recv()).await;
        assert_eq!(closed, Ok(None), "the task still runs");
    }

    #[tokio::test]
    async fn the_first_answer_is_awaited_at_most_the_limit_and_not_at_all_once_given() {
        let state = Arc::new(Mutex::new(State::default()));
        let watch = ApiserverWatch { state: state.clone(), _tasks: Arc::new(Tasks(Vec::new())) };
        let limit = Duration::from_millis(200);
        let skipped = Skipped::logged();
        let started = std::time::Instant::now();
        watch.first_answer(limit).await;
        assert!(started.elapsed() >= limit, "waited {:?}", started.elapsed());
        {
            let mut state = lock(&state);
            state.service.apply(Ok(watcher::Event::InitDone), service_addresses, ObjectKind::Service, &skipped);
            state.slices.apply(
                Err(watcher::Error::NoResourceVersion),
                slice_addresses,
                ObjectKind::EndpointSlice,
                &skipped,
            );
        }
        let started = std::time::Instant::now();
        watch.first_answer(Duration::from_secs(60)).await;
        assert!(started.elapsed() < Duration::from_secs(1), "waited {:?} though both answered", started.elapsed());
    }

    #[test]
    fn unknown_until_listed_then_kept_current() {
        let skipped = Skipped::logged();
        let mut part = Part::default();
        assert!(part.addresses("s").is_err());
        assert!(!part.answered(), "nothing listed, nothing failed");
        part.apply(Err(watcher::Error::NoResourceVersion), service_addresses, ObjectKind::Service, &skipped);
        assert!(part.answered(), "a failed watch has answered: waiting longer does not help");
        let error = part.addresses("s").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("resourceVersion"), "{error}");
        part.apply(Ok(watcher::Event::Init), service_addresses, ObjectKind::Service, &skipped);
        part.apply(
            Ok(watcher::Event::InitApply(service("kubernetes", &["10.96.0.1", "None"]))),
            service_addresses,
            ObjectKind::Service,
            &skipped,
        );
        assert!(part.addresses("s").is_err());
        part.apply(Ok(watcher::Event::InitDone), service_addresses, ObjectKind::Service, &skipped);
        assert!(part.answered());
        let ips = |part: &Part| part.addresses("s").map(Iterator::collect::<Vec<_>>).unwrap_or_default();
        assert_eq!(ips(&part), ["10.96.0.1".parse::<IpAddr>().unwrap()]);
        part.apply(
            Ok(watcher::Event::Apply(service("kubernetes", &["fd00::1"]))),
            service_addresses,
            ObjectKind::Service,
            &skipped,
        );
        assert_eq!(ips(&part), ["fd00::1".parse::<IpAddr>().unwrap()]);
        // A relist serves the old state until it completes, then replaces it whole.
        part.apply(Ok(watcher::Event::Init), service_addresses, ObjectKind::Service, &skipped);
        assert_eq!(ips(&part).len(), 1);
        part.apply(Ok(watcher::Event::InitDone), service_addresses, ObjectKind::Service, &skipped);
        assert!(ips(&part).is_empty());
        part.apply(
            Ok(watcher::Event::Apply(service("kubernetes", &["10.96.0.1"]))),
            service_addresses,
            ObjectKind::Service,
            &skipped,
        );
        part.apply(
            Ok(watcher::Event::Delete(service("kubernetes", &[]))),
            service_addresses,
            ObjectKind::Service,
            &skipped,
        );
        assert!(ips(&part).is_empty());
    }
}
