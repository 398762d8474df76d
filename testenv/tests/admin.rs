//! The admin identity and the apiserver build.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use testenv::ControlPlane;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn admin_lists_namespaces() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let namespaces: Api<Namespace> = Api::all(control_plane.admin_client().await?);
    let names: Vec<String> = namespaces.list(&ListParams::default()).await?.iter().map(ResourceExt::name_any).collect();
    assert!(names.iter().any(|name| name == "default"), "{names:?}");
    assert!(names.iter().any(|name| name == "kube-system"), "{names:?}");
    Ok(())
}

/// The apiserver that runs is the release chosen by `NODE_CSR_APPROVER_KUBERNETES_VERSION`, or
/// the newest of `tools/versions.env` when unset.
#[tokio::test]
async fn apiserver_reports_the_chosen_release() -> TestResult {
    let chosen = testenv::kubernetes_version();
    let versions = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/versions.env"))?;
    let newest = versions
        .lines()
        .find_map(|line| line.strip_prefix("KUBERNETES_VERSION="))
        .ok_or("KUBERNETES_VERSION missing from tools/versions.env")?;
    if std::env::var_os(testenv::KUBERNETES_VERSION_ENV).is_none() {
        assert_eq!(chosen, newest);
    }
    let control_plane = ControlPlane::shared().await?;
    let info = control_plane.admin_client().await?.apiserver_version().await?;
    assert_eq!(info.git_version, chosen);
    let minor = chosen.trim_start_matches("v1.").split('.').next().unwrap_or_default();
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", minor), "{info:?}");
    Ok(())
}

#[tokio::test]
async fn admin_kubeconfig_file_works() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(control_plane.kubeconfig_path())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), control_plane.server_url());
    let namespaces: Api<Namespace> = Api::all(kube::Client::try_from(config)?);
    assert!(namespaces.get_opt("default").await?.is_some());
    Ok(())
}
