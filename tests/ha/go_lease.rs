//! Side by side with the Go tool during a migration: a Lease held and renewed as client-go holds
//! it keeps this binary from writing until it expires, and this binary's Lease carries what
//! client-go needs to see it held.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::{ADDRESS, DECIDE, FAST_LEASE, legit, replicas};
use crate::support::cluster::{Csrs, SERIAL, conditions, control_plane, create_serving_csr, unique, wait_decided};
use crate::support::lease::{holder, wait_holder};

/// A Lease as client-go's leader election (the Go kubelet-csr-approver's controller-runtime)
/// writes it: held by `holder` for 6 s from now.
fn go_held_lease(name: &str, holder: &str) -> Lease {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    Lease {
        metadata: kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(6),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn a_lease_held_by_the_go_tool_keeps_this_replica_from_writing_until_it_expires() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let leases = Api::<Lease>::namespaced(admin.clone(), "default");
    // Side by side during a migration, both on the Go tool's Lease name (--leader-election-id).
    let lease = unique("kubelet-csr-approver");
    let go_holder = "kubelet-csr-approver-6b7d9_0f1e2d3c-aaaa-bbbb-cccc-000000000000";
    leases.create(&Default::default(), &go_held_lease(&lease, go_holder)).await.unwrap();
    // The Go replica renews every second, as client-go's retry period does by default (2 s).
    let renewer = tokio::spawn({
        let (leases, lease) = (leases.clone(), lease.clone());
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let renewed = go_held_lease(&lease, go_holder);
                let patch = kube::api::Patch::Merge(
                    serde_json::json!({"spec": {"renewTime": renewed.spec.unwrap().renew_time}}),
                );
                leases.patch(&lease, &Default::default(), &patch).await.unwrap();
            }
        }
    });
    let approvers = replicas(cp.kubeconfig_path(), &lease, &FAST_LEASE, &[vec![]]).await;
    let approver = &approvers[0];
    let csrs = Csrs::new(cp.kubeconfig_path());
    let (name, node) = (csrs.name("go-held"), unique("n"));
    create_serving_csr(cp, &name, &node, &legit(&node, ADDRESS)).await;
    // Longer than the Lease lasts: a replica that ignored the Go holder would have written by now.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(conditions(&admin, &name).await.is_empty(), "decided under the Go tool's Lease:\n{}", approver.logs());
    assert_eq!(approver.write_attempts().await, Some(0.0), "{}", approver.logs());
    assert_eq!(approver.metric("node_csr_approver_leader").await, Some(0.0));
    assert_eq!(holder(&admin, &lease).await.as_deref(), Some(go_holder));

    // The Go replica is scaled to zero: its Lease expires 6 s after its last renewal.
    renewer.abort();
    let stopped = Instant::now();
    let decided = wait_decided(&admin, &name, Duration::from_secs(6) + DECIDE).await;
    assert_eq!(decided.first().and_then(|c| c.reason.as_deref()), Some("AutoApproved"), "{}", approver.logs());
    assert!(stopped.elapsed() >= Duration::from_secs(4), "taken over before the Lease expired");
    assert_eq!(wait_holder(&admin, &lease, None, Instant::now() + DECIDE).await, Some(0));

    // What client-go needs to see a held Lease: a holder, a duration and a renew time that moves.
    let spec = |l: Lease| l.spec.unwrap();
    let first = spec(leases.get(&lease).await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = spec(leases.get(&lease).await.unwrap());
    assert_eq!(first.lease_duration_seconds, Some(6));
    assert!(later.renew_time.unwrap().0 > first.renew_time.unwrap().0, "the holder does not renew");
    assert!(first.acquire_time.is_some());
}
