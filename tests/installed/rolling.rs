//! `helm upgrade` and `helm rollback` while CSRs arrive (a rolling update of both replicas, every
//! CSR decided exactly once), then `helm uninstall`, which leaves no object of the release behind.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use testenv::ContainerCluster;

use crate::support::chart::parse_documents;
use crate::support::installed::{
    self, HELM_TIMEOUT, NAMESPACE, RELEASE, Workload, assert_decided_once, can_run, diagnose, helm_in, install,
    install_or_panic, lease_holder, names, pods, running_and_ready, wait_holder,
};

/// CSRs created each second while the release changes.
const RATE: u32 = 4;
/// Once the workload stops, every CSR is decided within this.
const RECOVERY: Duration = Duration::from_secs(20);
/// How long the replaced pods may take to be gone once helm returns, and the release's objects
/// (ReplicaSets and Pods through garbage collection) once `helm uninstall --wait` returns.
const GONE: Duration = Duration::from_secs(60);
/// The chart's default `leaseDuration`, plus time for a new replica to see the Lease expire.
const TAKEOVER: Duration = Duration::from_secs(25);

/// With the chart's defaults and the two required values: `helm upgrade` setting `loggingLevel`
/// (an environment variable of the pod template) rolls both replicas while a node keeps creating
/// CSRs, every one of them ends decided exactly once as it must be; `helm rollback` to the first
/// revision the same; `helm uninstall --wait` then leaves none of the release's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_and_rollback_roll_both_replicas_deciding_every_csr_once_and_uninstall_leaves_nothing() {
    let Some(_turn) = can_run().await else { return };
    let started = Instant::now();
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    install_or_panic(&cluster, &release, &[]);
    wait_holder(&admin, None, TAKEOVER).await.expect("no replica holds the Lease");
    let installed = names(&pods(&admin).await);
    eprintln!("installed in {:.1} s: {installed:?}", started.elapsed().as_secs_f64());

    let upgraded = roll(&cluster, "helm upgrade --set loggingLevel=1", "upgrade", &installed, || {
        install(&cluster, &release, "upgrade", &["--set", "loggingLevel=1"])
    })
    .await;
    let rollback = ["rollback", RELEASE, "1", "--namespace", NAMESPACE, "--wait", "--timeout", HELM_TIMEOUT];
    roll(&cluster, "helm rollback approver 1", "rollback", &upgraded, || helm_in(&cluster, &rollback)).await;
    let history = helm_in(&cluster, &["history", RELEASE, "--namespace", NAMESPACE]).unwrap();
    assert_eq!(history.lines().count(), 4, "a header and three revisions:\n{history}");

    uninstall_leaves_nothing(&cluster, &admin).await;
    eprintln!("test took {:.1} s", started.elapsed().as_secs_f64());
}

/// Runs `helm` (an upgrade or a rollback changing the pod template) while CSRs `<prefix>-<number>`
/// arrive; checks that both replicas `before` were replaced by two new Running and Ready pods, one
/// of which holds the Lease, and that every CSR was decided exactly once as it must be. Returns
/// the new pods' names.
async fn roll(
    cluster: &ContainerCluster,
    what: &str,
    prefix: &str,
    before: &[String],
    helm: impl FnOnce() -> Result<String, String>,
) -> Vec<String> {
    let admin = cluster.control_plane().admin_client().await.unwrap();
    let workload = Workload::start(cluster, prefix, RATE).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    // helm blocks this worker; the workload goes on on the other one.
    tokio::task::block_in_place(helm).unwrap_or_else(|error| panic!("{what} failed: {error}\n{}", diagnose(cluster)));
    let helm_took = started.elapsed();
    let deadline = Instant::now() + GONE;
    let after = loop {
        let now = pods(&admin).await;
        let replaced = now.len() == 2
            && now.iter().all(running_and_ready)
            && !now.iter().any(|pod| before.contains(&pod.name_any()));
        if replaced {
            break names(&now);
        }
        assert!(Instant::now() < deadline, "{what}: {before:?} not replaced by two ready pods: {:?}", names(&now));
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let rolled = started.elapsed();
    // The Lease names a new pod: the replaced leader released it, or it expired and was taken.
    let deadline = Instant::now() + TAKEOVER;
    let holder = loop {
        let holder = lease_holder(&admin).await.unwrap_or_default();
        if after.iter().any(|name| holder.starts_with(name.as_str())) {
            break holder;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: Lease held by {holder:?}, none of {after:?}\n{}",
            diagnose(cluster)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let led = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sent = workload.stop().await;
    eprintln!(
        "{what}: helm returned after {:.1} s, {before:?} replaced by {after:?} after {:.1} s, Lease held by {holder} \
         {:.1} s after helm started",
        helm_took.as_secs_f64(),
        rolled.as_secs_f64(),
        led.as_secs_f64()
    );
    assert_decided_once(cluster, what, &sent, RECOVERY).await;
    after
}

/// `helm uninstall --wait`, then checks that every object of the release's manifest is gone and
/// that no object of the kinds the chart renders, nor those the cluster makes for them
/// (ReplicaSets, Pods, Endpoints, EndpointSlices), carries the release's instance label in any
/// namespace, allowing [`GONE`] for garbage collection. Not release objects, and left behind as
/// in any cluster: the namespace (`--create-namespace`), the Lease the replicas elected a leader on
/// and the Events they recorded (both created by the approver, not by helm).
async fn uninstall_leaves_nothing(cluster: &ContainerCluster, admin: &Client) {
    let manifest = helm_in(cluster, &["get", "manifest", RELEASE, "--namespace", NAMESPACE]).unwrap();
    let manifest = parse_documents(&manifest);
    let before = labelled(admin).await;
    let kinds = |objects: &[String]| -> BTreeSet<String> {
        objects.iter().map(|object| object.split(' ').next().unwrap_or_default().to_owned()).collect()
    };
    let rendered: BTreeSet<String> =
        manifest.iter().map(|object| object["kind"].as_str().unwrap().to_owned()).collect();
    // The listing below sees every kind the chart rendered: an empty listing after is no accident.
    assert!(rendered.is_subset(&kinds(&before)), "rendered {rendered:?}, listed {:?}", kinds(&before));
    assert!(kinds(&before).contains("ReplicaSet") && kinds(&before).contains("Pod"), "{before:?}");
    eprintln!(
        "the release's manifest: {} objects of kinds {rendered:?}; {} labelled objects",
        manifest.len(),
        before.len()
    );

    let started = Instant::now();
    let args = ["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", HELM_TIMEOUT];
    helm_in(cluster, &args).unwrap_or_else(|error| panic!("helm uninstall failed: {error}\n{}", diagnose(cluster)));
    let helm_took = started.elapsed();
    let deadline = Instant::now() + GONE;
    loop {
        let mut left = labelled(admin).await;
        for object in &manifest {
            if let Some(found) = still_there(admin, object).await {
                left.push(found);
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{:?} after helm uninstall: left behind: {left:?}", GONE);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "helm uninstall --wait returned after {:.1} s, nothing of the release left after {:.1} s",
        helm_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(helm_in(cluster, &["status", RELEASE, "--namespace", NAMESPACE]).is_err(), "the release is still known");
}

/// `<kind> <namespace>/<name>` of every object, in any namespace, of the kinds the chart renders
/// or the cluster makes for them, labelled `app.kubernetes.io/instance=<release>`.
async fn labelled(admin: &Client) -> Vec<String> {
    let mut found = Vec::new();
    found.extend(of_kind::<Deployment>(admin).await);
    found.extend(of_kind::<ReplicaSet>(admin).await);
    found.extend(of_kind::<Pod>(admin).await);
    found.extend(of_kind::<Service>(admin).await);
    found.extend(of_kind::<Endpoints>(admin).await);
    found.extend(of_kind::<EndpointSlice>(admin).await);
    found.extend(of_kind::<ServiceAccount>(admin).await);
    found.extend(of_kind::<ConfigMap>(admin).await);
    found.extend(of_kind::<PodDisruptionBudget>(admin).await);
    found.extend(of_kind::<Role>(admin).await);
    found.extend(of_kind::<RoleBinding>(admin).await);
    found.extend(of_kind::<ClusterRole>(admin).await);
    found.extend(of_kind::<ClusterRoleBinding>(admin).await);
    found
}

/// [`labelled`] for one kind.
async fn of_kind<K>(admin: &Client) -> Vec<String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let params = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    let objects = Api::<K>::all(admin.clone()).list(&params).await.unwrap().items;
    objects
        .iter()
        .map(|object| format!("{} {}/{}", K::kind(&()), object.namespace().unwrap_or_default(), object.name_any()))
        .collect()
}

/// `<kind> <namespace>/<name>` of the manifest's `object` when the apiserver still has it.
async fn still_there(admin: &Client, object: &serde_json::Value) -> Option<String> {
    let (api_version, kind) = (object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap());
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (resource, capabilities) = pinned_kind(admin, &GroupVersionKind::gvk(group, version, kind)).await.unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(admin.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(admin.clone(), &resource),
    };
    api.get_opt(name).await.unwrap().map(|_| format!("{kind} {namespace}/{name}"))
}
