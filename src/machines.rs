//! Machine mode's watched caches: Machines of the configured APIs, Node names, and the pending CSRs
//! the brake counts. Nothing is listed per CSR; lookups read the caches.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use crate::cluster::{ClusterError, Load, MachineInfo};
use crate::config::{MachineApi, MachineSource};
use crate::policy::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, is_decided};

/// Pending CSRs older than this do not count towards the brake.
const PENDING_WINDOW: Duration = Duration::from_secs(3600);
/// How often readiness of the caches is re-checked.
const SYNC_POLL: Duration = Duration::from_millis(100);

/// The watched caches of machine mode. Cheap to clone.
#[derive(Clone)]
pub struct MachineCache {
    machines: Vec<Store<DynamicObject>>,
    nodes: Store<PartialObjectMeta<Node>>,
    csrs: Arc<OnceLock<Store<CertificateSigningRequest>>>,
    changes: watch::Receiver<u64>,
}

impl MachineCache {
    /// Starts watching Machines (through `machine_client`) and Node metadata (through `client`).
    /// An API the cluster does not serve counts as "no Machines".
    pub async fn start(client: Client, machine_client: Client, source: &MachineSource) -> MachineCache {
        let (tx, changes) = watch::channel(0_u64);
        let tx = Arc::new(tx);
        let mut machines = Vec::new();
        for api in &source.apis {
            if !serves_machines(&machine_client, *api).await {
                tracing::info!(api = api.api_version(), "Machine API not served: no Machines from it");
                continue;
            }
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(api.group(), "v1beta1", "Machine"));
            let api = match &source.namespace {
                Some(ns) => Api::<DynamicObject>::namespaced_with(machine_client.clone(), ns, &resource),
                None => Api::<DynamicObject>::all_with(machine_client.clone(), &resource),
            };
            let writer = reflector::store::Writer::new(resource);
            let reader = writer.as_reader();
            let stream =
                reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()).default_backoff());
            tokio::spawn(notify_on_change(stream, tx.clone()));
            machines.push(reader);
        }
        let (nodes, writer) = reflector::store();
        let node_stream = reflector::reflector(
            writer,
            watcher::watcher(Api::<PartialObjectMeta<Node>>::all(client), watcher::Config::default()).default_backoff(),
        );
        tokio::spawn(notify_on_change(node_stream, tx));
        MachineCache { machines, nodes, csrs: Arc::new(OnceLock::new()), changes }
    }

    /// Lets the brake count pending CSRs from the controller's cache.
    pub fn attach_csrs(&self, csrs: Store<CertificateSigningRequest>) {
        let _ = self.csrs.set(csrs);
    }

    /// Changes whenever a Machine or Node is added, changed or removed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Resolves once every cache has its initial list.
    pub async fn synced(&self) {
        for store in &self.machines {
            wait_ready(store).await;
        }
        wait_ready(&self.nodes).await;
    }

    /// Every cached Machine.
    pub fn machines(&self) -> Vec<Arc<MachineInfo>> {
        self.machines
            .iter()
            .flat_map(Store::state)
            .map(|machine| {
                let metadata = &machine.metadata;
                let id = format!("{}/{}", metadata.namespace.as_deref().unwrap_or_default(), machine.name_any());
                let created = metadata.creation_timestamp.as_ref().map(|t| t.0);
                Arc::new(MachineInfo::from_status(id, created, machine.data.get("status")))
            })
            .collect()
    }

    /// The brake's inputs: pending node CSRs younger than an hour, Machines and Nodes.
    pub fn load(&self) -> Result<Load, ClusterError> {
        let csrs = self.csrs.get().ok_or_else(|| ClusterError("the CSR cache is not attached yet".into()))?;
        let now = Timestamp::now();
        let pending = csrs
            .state()
            .iter()
            .filter(|csr| [KUBELET_SERVING_SIGNER, KUBELET_CLIENT_SIGNER].contains(&csr.spec.signer_name.as_str()))
            .filter(|csr| !is_decided(csr) && is_recent(csr.metadata.creation_timestamp.as_ref().map(|t| t.0), now))
            .count();
        let machines = self.machines.iter().map(|store| store.state().len()).sum();
        Ok(Load { pending, machines, nodes: self.nodes.state().len() })
    }
}

/// True when the CSR was created within the brake's window before `now`.
pub fn is_recent(created: Option<Timestamp>, now: Timestamp) -> bool {
    created
        .is_some_and(|created| now.duration_since(created).try_into().is_ok_and(|age: Duration| age < PENDING_WINDOW))
}

async fn serves_machines(client: &Client, api: MachineApi) -> bool {
    match client.list_api_group_resources(api.api_version()).await {
        Ok(list) => list.resources.iter().any(|r| r.name == "machines"),
        Err(error) => {
            tracing::debug!(api = api.api_version(), %error, "Machine API discovery");
            false
        }
    }
}

async fn notify_on_change<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    tx: Arc<watch::Sender<u64>>,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "watching Machines or Nodes"),
        }
    }
}

async fn wait_ready<K>(store: &Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    // A store wakes only one waiter; ask again on a short period.
    while tokio::time::timeout(SYNC_POLL, store.wait_until_ready()).await.is_err() {}
}
