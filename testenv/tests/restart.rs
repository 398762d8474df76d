//! A private control plane: apiserver restarts keep data, and dropping it leaves nothing behind.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use testenv::{ControlPlane, process_running};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn restart_keeps_data_and_drop_ends_processes() -> TestResult {
    let control_plane = ControlPlane::start().await?;
    let url = control_plane.server_url().to_owned();
    let config_map = ConfigMap {
        metadata: ObjectMeta { name: Some("survivor".to_owned()), ..ObjectMeta::default() },
        data: Some(BTreeMap::from([("key".to_owned(), "value".to_owned())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(control_plane.admin_client().await?, "default")
        .create(&PostParams::default(), &config_map)
        .await?;
    let before = control_plane.process_ids().await;

    control_plane.restart_apiserver().await?;

    let after = control_plane.process_ids().await;
    assert_eq!(before.len(), 2);
    assert_eq!(after.len(), 2);
    assert_eq!(before[0], after[0], "etcd must keep running");
    assert_ne!(before[1], after[1], "kube-apiserver must be a new process");
    assert!(!process_running(before[1]), "the old kube-apiserver still runs");
    assert_eq!(control_plane.server_url(), url);
    let stored = Api::<ConfigMap>::namespaced(control_plane.admin_client().await?, "default").get("survivor").await?;
    assert_eq!(stored.data, config_map.data);

    let dir = control_plane.state_dir().ok_or("a started control plane has a state directory")?.to_owned();
    drop(control_plane);
    for pid in after {
        assert!(!process_running(pid), "process {pid} outlived its control plane");
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
    Ok(())
}
