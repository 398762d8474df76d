//! `helm install` from the registry with the defaults: two replicas pulling the image by digest, the
//! node's own serving certificate, `helm test`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams, PostParams};
use serde_json::json;

use crate::support::installed::{
    self, NAMESPACE, RELEASE, can_run, decision, diagnose, helm_in, install_or_panic, lease_holder, names, pods,
    running_and_ready, wait_issued_serving_csr,
};

/// `helm install --wait` from the registry, into a namespace that enforces the `restricted` Pod
/// Security Standard (as `deploy/` labels it), gives two Running and Ready replicas of the image
/// pulled from the registry by digest, one holding the Lease; the
/// node's own kubelet-serving CSR is approved by the pod and issued, so `kubectl logs` (the
/// apiserver dialling the kubelet, verifying that certificate) works; `helm test` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_runs_two_replicas_that_approve_their_own_nodes_serving_certificate() {
    let Some(_turn) = can_run().await else { return };
    let (cluster, release) = installed::cluster(false).await;
    let admin = cluster.control_plane().admin_client().await.unwrap();
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }))
    .unwrap();
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    install_or_panic(&cluster, &release, &[]);

    let replicas = pods(&admin).await;
    assert_eq!(replicas.len(), 2, "{:?}", names(&replicas));
    assert!(replicas.iter().all(running_and_ready), "{:?}", replicas.iter().map(|p| &p.status).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        if let Some(holder) = lease_holder(&admin).await {
            break holder;
        }
        assert!(Instant::now() < deadline, "no replica holds the Lease");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        names(&replicas).iter().any(|name| holder.starts_with(name.as_str())),
        "{holder} is none of {:?}",
        names(&replicas)
    );

    let csr = wait_issued_serving_csr(&admin, Duration::from_secs(60)).await;
    let csr = csr.unwrap_or_else(|| panic!("the node's serving CSR was not issued\n{}", diagnose(&cluster)));
    let (kind, reason) = decision(&csr).unwrap();
    assert_eq!(kind, "Approved", "{csr:?}");
    assert!(!reason.is_empty(), "{csr:?}");

    // The apiserver reaches the kubelet with the issued certificate, verified with the cluster CA.
    let logs_api: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let logs = logs_api.logs(&names(&replicas)[0], &LogParams::default()).await.unwrap();
    assert!(logs.contains('{'), "no JSON log lines: {logs}");

    // The image was pulled from the registry (by the first replica; the second may find it there),
    // by the digest that was verified.
    let events = Api::<Event>::namespaced(admin.clone(), NAMESPACE).list(&ListParams::default()).await.unwrap();
    let pulled: Vec<&str> = events
        .items
        .iter()
        .filter(|event| event.reason.as_deref() == Some("Pulled"))
        .filter_map(|event| event.message.as_deref())
        .collect();
    let image = release.image.reference();
    let from_registry =
        pulled.iter().filter(|message| message.starts_with(&format!("Successfully pulled image \"{image}\"")));
    assert!(from_registry.count() >= 1, "{image} not pulled: {pulled:?}");

    let test = helm_in(&cluster, &["test", RELEASE, "--namespace", NAMESPACE, "--timeout", "120s"]);
    assert!(test.is_ok(), "helm test failed: {test:?}\n{}", diagnose(&cluster));
}
