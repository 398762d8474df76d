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
//! replaces it whole.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::kubernetes::kube_watch;
use crate::policy::{ApiserverAddresses, ClusterError};

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
pub fn service_addresses(service: &Service) -> Vec<IpAddr> {
    let spec = service.spec.iter();
    let ips = spec.flat_map(|spec| spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter()));
    ips.filter_map(|ip| ip.trim().parse().ok()).collect()
}

/// Every address of every endpoint of the slice, ready or not.
pub fn slice_addresses(slice: &EndpointSlice) -> Vec<IpAddr> {
    let addresses = slice.endpoints.iter().flat_map(|endpoint| endpoint.addresses.iter());
    addresses.filter_map(|ip| ip.trim().parse().ok()).collect()
}

/// Whether `slice` belongs to the apiserver's Service.
pub fn is_apiserver_slice(slice: &EndpointSlice) -> bool {
    slice.namespace().as_deref() == Some(NAMESPACE)
        && slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(SERVICE)
}

/// Whether `service` is the apiserver's Service.
pub fn is_apiserver_service(service: &Service) -> bool {
    service.namespace().as_deref() == Some(NAMESPACE) && service.metadata.name.as_deref() == Some(SERVICE)
}

/// What one watch has seen: the addresses of each object by name.
#[derive(Debug, Default)]
struct Part {
    /// The first list has completed.
    synced: bool,
    /// The last error, for the message while not synced.
    error: Option<String>,
    objects: BTreeMap<String, Vec<IpAddr>>,
    /// A relist under way: it replaces `objects` when it completes.
    relist: Option<BTreeMap<String, Vec<IpAddr>>>,
}

impl Part {
    fn apply<K: kube::Resource>(
        &mut self,
        event: Result<watcher::Event<K>, watcher::Error>,
        addresses: fn(&K) -> Vec<IpAddr>,
    ) {
        match event {
            Ok(watcher::Event::Init) => self.relist = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(object)) => {
                self.relist.get_or_insert_default().insert(object.name_any(), addresses(&object));
            }
            Ok(watcher::Event::InitDone) => {
                self.objects = self.relist.take().unwrap_or_default();
                self.synced = true;
                self.error = None;
            }
            Ok(watcher::Event::Apply(object)) => {
                self.objects.insert(object.name_any(), addresses(&object));
            }
            Ok(watcher::Event::Delete(object)) => {
                self.objects.remove(&object.name_any());
            }
            Err(error) => {
                tracing::warn!(%error, "watching the apiserver's Service or EndpointSlices in default");
                self.error = Some(error.to_string());
            }
        }
    }

    /// Whether the watch has answered: its first list completed, or it failed.
    fn answered(&self) -> bool {
        self.synced || self.error.is_some()
    }

    fn addresses(&self, what: &str) -> Result<impl Iterator<Item = IpAddr> + '_, ClusterError> {
        if !self.synced {
            let why = self.error.as_deref().unwrap_or("the first list has not completed");
            return Err(ClusterError::NotListed { what: what.to_owned(), why: why.to_owned() });
        }
        Ok(self.objects.values().flatten().copied())
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
    /// Starts both watches on the current Tokio runtime.
    pub fn start(client: Client) -> ApiserverWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let services = Api::<Service>::namespaced(client.clone(), NAMESPACE);
        let service_config = watcher::Config::default().fields(&format!("metadata.name={SERVICE}"));
        let slices = Api::<EndpointSlice>::namespaced(client, NAMESPACE);
        let slice_config = watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={SERVICE}"));
        let service_state = state.clone();
        let service_task = tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(services, service_config));
            while let Some(event) = events.next().await {
                lock(&service_state).service.apply(event, service_addresses);
            }
        });
        let slice_state = state.clone();
        let slice_task = tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(slices, slice_config));
            while let Some(event) = events.next().await {
                lock(&slice_state).slices.apply(event, slice_addresses);
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
    use k8s_openapi::api::core::v1::ServiceSpec;
    use kube::api::ObjectMeta;

    use super::*;

    fn service(name: &str, ips: &[&str]) -> Service {
        Service {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(ServiceSpec {
                cluster_ips: Some(ips.iter().map(|ip| (*ip).to_owned()).collect()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
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
        let started = std::time::Instant::now();
        watch.first_answer(limit).await;
        assert!(started.elapsed() >= limit, "waited {:?}", started.elapsed());
        {
            let mut state = lock(&state);
            state.service.apply(Ok(watcher::Event::<Service>::InitDone), service_addresses);
            state.slices.apply(Err(watcher::Error::NoResourceVersion), slice_addresses);
        }
        let started = std::time::Instant::now();
        watch.first_answer(Duration::from_secs(60)).await;
        assert!(started.elapsed() < Duration::from_secs(1), "waited {:?} though both answered", started.elapsed());
    }

    #[test]
    fn unknown_until_listed_then_kept_current() {
        let mut part = Part::default();
        assert!(part.addresses("s").is_err());
        assert!(!part.answered(), "nothing listed, nothing failed");
        part.apply(Err(watcher::Error::NoResourceVersion), service_addresses);
        assert!(part.answered(), "a failed watch has answered: waiting longer does not help");
        let error = part.addresses("s").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("resourceVersion"), "{error}");
        part.apply(Ok(watcher::Event::Init), service_addresses);
        part.apply(Ok(watcher::Event::InitApply(service("kubernetes", &["10.96.0.1", "None"]))), service_addresses);
        assert!(part.addresses("s").is_err());
        part.apply(Ok(watcher::Event::InitDone), service_addresses);
        assert!(part.answered());
        let ips = |part: &Part| part.addresses("s").map(Iterator::collect::<Vec<_>>).unwrap_or_default();
        assert_eq!(ips(&part), ["10.96.0.1".parse::<IpAddr>().unwrap()]);
        part.apply(Ok(watcher::Event::Apply(service("kubernetes", &["fd00::1"]))), service_addresses);
        assert_eq!(ips(&part), ["fd00::1".parse::<IpAddr>().unwrap()]);
        // A relist serves the old state until it completes, then replaces it whole.
        part.apply(Ok(watcher::Event::Init), service_addresses);
        assert_eq!(ips(&part).len(), 1);
        part.apply(Ok(watcher::Event::InitDone), service_addresses);
        assert!(ips(&part).is_empty());
        part.apply(Ok(watcher::Event::Apply(service("kubernetes", &["10.96.0.1"]))), service_addresses);
        part.apply(Ok(watcher::Event::Delete(service("kubernetes", &[]))), service_addresses);
        assert!(ips(&part).is_empty());
    }
}
