//! Machine mode's watched caches: Machines of the configured APIs, with the changes of the watched
//! Nodes (which decisions read too: one watch of Nodes in all) told beside theirs. Nothing is
//! listed per CSR; lookups read the caches. A Machine is read as a [`MachineObject`] (its
//! metadata as [`Meta`], the rest as plain JSON); one that still cannot be decoded is reported and
//! held as such, so it replaces its earlier version and is read by nobody.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, GroupVersionKind};
use kube::core::DynamicResourceScope;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use tokio::sync::watch;

use crate::kubelet_tls::KubeletServingCa;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kube_watch;
use crate::kubernetes::object_fields::{Meta, ObjectKind};
use crate::policy::{
    AwaitedNodes, KubeletDialRules, MachineInfo, MachinePolicy, NodeAddress, PolicyConfig, Submission,
    object_for_rules, pending_count,
};

/// A Machine API the controller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MachineApi {
    /// OpenShift's `machine.openshift.io/v1beta1`.
    OpenShift,
    /// Cluster API's `cluster.x-k8s.io/v1beta1`.
    ClusterApi,
}

impl MachineApi {
    /// Every supported API.
    pub const ALL: [MachineApi; 2] = [MachineApi::OpenShift, MachineApi::ClusterApi];

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            MachineApi::OpenShift => "machine.openshift.io",
            MachineApi::ClusterApi => "cluster.x-k8s.io",
        }
    }

    /// `GROUP/VERSION`.
    pub fn api_version(self) -> &'static str {
        match self {
            MachineApi::OpenShift => "machine.openshift.io/v1beta1",
            MachineApi::ClusterApi => "cluster.x-k8s.io/v1beta1",
        }
    }
}

/// Where Machines are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSource {
    /// The APIs to read.
    pub apis: Vec<MachineApi>,
    /// Their namespace; `None` reads all.
    pub namespace: Option<String>,
    /// The cluster holding them, if not the CSRs' cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The machine-mode rules, which the pending brake's count reads.
    pub rules: MachinePolicy,
    /// The bundle kubelets' serving certificates are verified against, for renewals.
    pub kubelet_ca: Option<KubeletServingCa>,
    /// The one port a kubelet is dialled at (`--kubelet-port`).
    pub kubelet_port: u16,
    /// Keep each Machine's whole object: a rule of `--rules` reads `machine`.
    pub keep_objects: bool,
}

impl MachineSource {
    /// The bundle renewals verify against and where they may dial, when renewals are on: the
    /// node addresses of `policy` (`--provider-ip-prefixes`) at `--kubelet-port`.
    pub fn kubelet_dial(&self, policy: &PolicyConfig) -> Option<(KubeletServingCa, KubeletDialRules)> {
        let rules = KubeletDialRules { prefixes: policy.ip_prefixes.clone(), port: self.kubelet_port };
        self.kubelet_ca.clone().map(|ca| (ca, rules))
    }
}

/// How often readiness of the caches is re-checked.
const SYNC_POLL: Duration = Duration::from_millis(100);

/// The watched caches of machine mode. Cheap to clone.
#[derive(Clone)]
pub struct MachineCache {
    machines: Vec<Store<Decoded<MachineObject>>>,
    nodes_synced: Shared<BoxFuture<'static, ()>>,
    changes: watch::Receiver<u64>,
    keep_objects: bool,
}

impl MachineCache {
    /// Starts watching Machines (through `machine_client`), telling their changes and those of the
    /// watched Nodes (`node_changes`, which are synced when `nodes_synced` resolves). An API the
    /// cluster does not serve counts as "no Machines". What cannot be decoded is reported to
    /// `skipped`.
    pub async fn start(
        node_changes: watch::Receiver<u64>,
        nodes_synced: BoxFuture<'static, ()>,
        machine_client: Client,
        source: &MachineSource,
        skipped: Skipped,
    ) -> MachineCache {
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
                Some(ns) => Api::<Decoded<MachineObject>>::namespaced_with(machine_client.clone(), ns, &resource),
                None => Api::<Decoded<MachineObject>>::all_with(machine_client.clone(), &resource),
            };
            let writer = reflector::store::Writer::new(resource);
            let reader = writer.as_reader();
            let stream = reflector::reflector(writer, kube_watch::stream(api, watcher::Config::default()));
            tokio::spawn(notify_on_change(stream, tx.clone(), ObjectKind::Machine, skipped.clone()));
            machines.push(reader);
        }
        tokio::spawn(forward_changes(node_changes, tx));
        MachineCache { machines, nodes_synced: nodes_synced.shared(), changes, keep_objects: source.keep_objects }
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
        self.nodes_synced.clone().await;
    }

    /// Every cached Machine.
    pub fn machines(&self) -> Vec<Arc<MachineInfo>> {
        self.machines
            .iter()
            .flat_map(Store::state)
            .filter_map(|machine| {
                let machine = machine.as_object()?;
                let metadata = &machine.metadata.0;
                let id = format!("{}/{}", metadata.namespace.as_deref().unwrap_or_default(), machine.name_any());
                let created = metadata.creation_timestamp.as_ref().map(|t| t.0);
                let object = self.keep_objects.then(|| object_for_rules(machine.object.clone()));
                Some(Arc::new(MachineInfo { object, ..machine_info(id, created, machine.object.get("status")) }))
            })
            .collect()
    }

    /// How many Machines are cached.
    pub fn machine_count(&self) -> usize {
        self.machines.iter().map(Store::len).sum()
    }
}

/// A Machine as the approver reads it: its metadata ([`Meta`]) and the object as plain JSON, as
/// the apiserver returned it less `metadata.managedFields` (the rules see it; its status is read
/// for addresses and nodeRef).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "serde_json::Value")]
pub struct MachineObject {
    /// Its metadata.
    pub metadata: Meta,
    /// The whole object, less `metadata.managedFields`.
    pub object: serde_json::Value,
}

impl TryFrom<serde_json::Value> for MachineObject {
    type Error = serde_json::Error;

    fn try_from(mut object: serde_json::Value) -> Result<MachineObject, serde_json::Error> {
        if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            metadata.remove("managedFields");
        }
        let metadata = match object.get("metadata") {
            Some(metadata) => Meta::deserialize(metadata)?,
            None => Meta::default(),
        };
        Ok(MachineObject { metadata, object })
    }
}

impl kube::Resource for MachineObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata.0
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata.0
    }
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
    stream: impl futures::Stream<Item = Result<watcher::Event<Decoded<K>>, watcher::Error>> + Send,
    tx: Arc<watch::Sender<u64>>,
    kind: ObjectKind,
    skipped: Skipped,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        if let Ok(
            watcher::Event::Apply(Decoded::Undecodable(undecodable))
            | watcher::Event::InitApply(Decoded::Undecodable(undecodable)),
        ) = &event
        {
            skipped.report(kind, undecodable);
        }
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "watching Machines"),
        }
    }
}

/// Tells `tx` of every change of the watched Nodes, while they are watched.
async fn forward_changes(mut nodes: watch::Receiver<u64>, tx: Arc<watch::Sender<u64>>) {
    while nodes.changed().await.is_ok() {
        tx.send_modify(|n| *n = n.wrapping_add(1));
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

/// A Machine from its identity, creation time and `status` object.
pub fn machine_info(id: String, created: Option<Timestamp>, status: Option<&serde_json::Value>) -> MachineInfo {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let addresses = status
        .and_then(|s| s.get("addresses"))
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .filter_map(|a| Some(NodeAddress { kind: text(a.get("type"))?, address: text(a.get("address"))? }))
        .collect();
    let node_ref = text(status.and_then(|s| s.get("nodeRef")).and_then(|r| r.get("name")));
    MachineInfo { id, created, node_ref, addresses, object: None }
}

/// Reads a Machine of either API group from its JSON form (as `check --objects` gives it): `None`
/// when it is not a Machine of a supported group; `Some(None)` when it is one the running controller
/// does not watch (machine mode off, or not of a configured `--machine-api` GROUP/VERSION, or
/// outside `--machine-namespace`), so `check` decides without it as the controller would.
pub fn machine_from_json(value: &serde_json::Value, source: Option<&MachineSource>) -> Option<Option<MachineInfo>> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let group = api_version.split('/').next()?;
    if value.get("kind")?.as_str()? != "Machine" || !MachineApi::ALL.iter().any(|api| api.group() == group) {
        return None;
    }
    let metadata = value.get("metadata")?;
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let name = text(metadata.get("name"))?;
    let namespace = text(metadata.get("namespace")).unwrap_or_default();
    let watched = source.is_some_and(|source| {
        source.apis.iter().any(|api| api.api_version() == api_version)
            && source.namespace.as_ref().is_none_or(|ns| *ns == namespace)
    });
    if !watched {
        return Some(None);
    }
    let created = text(metadata.get("creationTimestamp")).and_then(|t| t.parse().ok());
    let object = source.is_some_and(|source| source.keep_objects).then(|| object_for_rules(value.clone()));
    Some(Some(MachineInfo { object, ..machine_info(format!("{namespace}/{name}"), created, value.get("status")) }))
}

/// The pending brake's count over CSRs read from a file (`check --file`) at `now` with `machines`,
/// as the controller counts its cache; 0 outside machine mode.
pub fn pending_in(
    csrs: &[Submission],
    machines: &[MachineInfo],
    source: Option<&MachineSource>,
    now: Timestamp,
) -> usize {
    source.map_or(0, |source| pending_count(csrs, &source.rules, &AwaitedNodes::new(machines), now))
}
