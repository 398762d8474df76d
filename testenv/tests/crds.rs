//! Installing CRDs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use testenv::ControlPlane;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn widget_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.testenv.example.com" },
        "spec": {
            "group": "testenv.example.com",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    }))
}

#[tokio::test]
async fn installed_crd_serves_objects() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    control_plane.install_crds(vec![widget_crd()?]).await?;
    // Installing again is harmless.
    control_plane.install_crds(vec![widget_crd()?]).await?;

    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("testenv.example.com", "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(control_plane.admin_client().await?, "default", &resource);
    let widget = DynamicObject::new("gear", &resource).data(serde_json::json!({ "size": 3 }));
    let params = PatchParams::apply("testenv-tests").force();
    widgets.patch("gear", &params, &Patch::Apply(&widget)).await?;
    let listed = widgets.list(&ListParams::default()).await?;
    let gear = listed
        .items
        .iter()
        .find(|item| item.metadata.name.as_deref() == Some("gear"))
        .ok_or("the applied widget is not listed")?;
    assert_eq!(gear.data["size"], 3);
    Ok(())
}
