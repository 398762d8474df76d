//! Identities made by impersonation: what the apiserver records and what RBAC refuses.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use rcgen::{CertificateParams, DnType, KeyPair};
use testenv::{ControlPlane, is_forbidden};

/// A PEM PKCS#10 request of node `name` for a kubelet serving certificate.
type TestResult = Result<(), Box<dyn std::error::Error>>;

fn kubelet_serving_request(name: &str) -> Result<String, rcgen::Error> {
    let mut params = CertificateParams::new(vec![name.to_owned(), "10.0.0.7".to_owned()])?;
    params.distinguished_name.push(DnType::CommonName, format!("system:node:{name}"));
    params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
    params.serialize_request(&KeyPair::generate()?)?.pem()
}

#[tokio::test]
async fn csr_of_impersonated_node_records_its_identity() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let node = control_plane.impersonated_client("system:node:worker-1", &["system:nodes"]).await?;
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some("testenv-worker-1-serving".to_owned()), ..ObjectMeta::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(kubelet_serving_request("worker-1")?.into_bytes()),
            signer_name: "kubernetes.io/kubelet-serving".to_owned(),
            usages: Some(vec!["digital signature".to_owned(), "server auth".to_owned()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    Api::<CertificateSigningRequest>::all(node).create(&PostParams::default(), &csr).await?;

    let csrs: Api<CertificateSigningRequest> = Api::all(control_plane.admin_client().await?);
    let stored = csrs.get("testenv-worker-1-serving").await?;
    assert_eq!(stored.spec.username.as_deref(), Some("system:node:worker-1"));
    let groups = stored.spec.groups.unwrap_or_default();
    assert!(groups.iter().any(|group| group == "system:nodes"), "{groups:?}");
    assert!(groups.iter().any(|group| group == "system:authenticated"), "{groups:?}");
    csrs.delete("testenv-worker-1-serving", &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
async fn identity_without_rbac_is_forbidden() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let nobody = control_plane.impersonated_client("nobody", &[]).await?;
    let result = Api::<Namespace>::all(nobody).list(&ListParams::default()).await;
    let error = result.err().ok_or("an identity without RBAC listed namespaces")?;
    assert!(is_forbidden(&error), "{error:?}");
    Ok(())
}
