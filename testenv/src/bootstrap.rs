//! Bootstrap tokens, as kubeadm creates them for joining nodes.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::{Api, Client};

use crate::Error;
use crate::objects::create_if_missing;

/// Creates a bootstrap token Secret and the binding that lets bootstrappers create CSRs; returns
/// the token `<id>.<secret>`.
pub(crate) async fn create_token(client: &Client) -> Result<String, Error> {
    let (id, secret) = (random_text(6), random_text(16));
    let object: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id,
            "token-secret": secret,
            "usage-bootstrap-authentication": "true",
        },
    }))
    .map_err(|error| Error::Unexpected(format!("bootstrap token Secret: {error}")))?;
    Api::<Secret>::namespaced(client.clone(), "kube-system").create(&Default::default(), &object).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "testenv:node-bootstrapper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:bootstrappers"}],
    }))
    .map_err(|error| Error::Unexpected(format!("bootstrapper binding: {error}")))?;
    create_if_missing(&Api::<ClusterRoleBinding>::all(client.clone()), binding).await?;
    Ok(format!("{id}.{secret}"))
}

/// `len` random characters of `[a-z0-9]`, the alphabet of bootstrap tokens.
fn random_text(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|_| {
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_usize(len);
            let index = usize::try_from(hasher.finish() % ALPHABET.len() as u64).unwrap_or(0);
            char::from(ALPHABET[index])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_use_the_bootstrap_alphabet() {
        let text = random_text(16);
        assert_eq!(text.len(), 16);
        assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{text}");
    }
}
