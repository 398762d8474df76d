//! ServiceAccount identities: real tokens, RBAC enforced, kubeconfig files.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use testenv::{ControlPlane, is_forbidden};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const GRANTED: &str = "sa-granted";
const OTHER: &str = "sa-other";
const ACCOUNT: &str = "reader";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() }
}

/// Lets ServiceAccount `GRANTED/ACCOUNT` list configmaps in `GRANTED` and nowhere else.
async fn grant_list_configmaps(admin: Client) -> TestResult {
    let role = Role {
        metadata: meta("list-configmaps"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: vec!["list".to_owned()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta("list-configmaps"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: "list-configmaps".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: ACCOUNT.to_owned(),
            namespace: Some(GRANTED.to_owned()),
            ..Subject::default()
        }]),
    };
    // Applied, not created, so the test also passes again against an attached cluster.
    let params = PatchParams::apply("testenv-tests").force();
    Api::<Role>::namespaced(admin.clone(), GRANTED).patch("list-configmaps", &params, &Patch::Apply(&role)).await?;
    Api::<RoleBinding>::namespaced(admin, GRANTED).patch("list-configmaps", &params, &Patch::Apply(&binding)).await?;
    Ok(())
}

#[tokio::test]
async fn service_account_token_is_authorized_by_rbac() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    // Creates both namespaces (and an unused account in the other one).
    control_plane.service_account_token(OTHER, ACCOUNT).await?;
    let client = control_plane.service_account_client(GRANTED, ACCOUNT).await?;
    grant_list_configmaps(control_plane.admin_client().await?).await?;

    Api::<ConfigMap>::namespaced(client.clone(), GRANTED).list(&ListParams::default()).await?;
    let elsewhere = Api::<ConfigMap>::namespaced(client, OTHER)
        .list(&ListParams::default())
        .await
        .err()
        .ok_or("the ServiceAccount listed configmaps outside its grant")?;
    assert!(is_forbidden(&elsewhere), "{elsewhere:?}");
    Ok(())
}

#[tokio::test]
async fn kubeconfig_for_token_authenticates_as_the_service_account() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let token = control_plane.service_account_token("sa-kubeconfig", "runner").await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kubeconfig");
    control_plane.write_kubeconfig_for_token(&token, &path)?;

    let config = Config::from_custom_kubeconfig(Kubeconfig::read_from(&path)?, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    // No RBAC for this account: being refused (not 401) proves the token authenticated.
    let error = Api::<ConfigMap>::namespaced(client, "sa-kubeconfig")
        .list(&ListParams::default())
        .await
        .err()
        .ok_or("an account without RBAC listed configmaps")?;
    assert!(is_forbidden(&error), "{error:?}");
    let kube::Error::Api(status) = &error else {
        return Err("not an API error".into());
    };
    assert!(status.message.contains("system:serviceaccount:sa-kubeconfig:runner"), "{}", status.message);
    Ok(())
}
