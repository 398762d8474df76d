//! Kubeconfigs of a control plane: building, reading, writing, and turning into clients.

use std::path::Path;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::{Client, Config};
use secrecy::SecretString;

use crate::Error;
use crate::pki::PkiFiles;

/// Name of the cluster, user and context in the kubeconfigs testenv writes.
const NAME: &str = "testenv";

/// A kubeconfig for the admin client certificate, referring to the PEM files by absolute path.
pub(crate) fn admin(server: &str, pki: &PkiFiles) -> Kubeconfig {
    let cluster = Cluster {
        server: Some(server.to_owned()),
        certificate_authority: Some(pki.ca_cert.display().to_string()),
        ..Cluster::default()
    };
    let user = AuthInfo {
        client_certificate: Some(pki.admin_cert.display().to_string()),
        client_key: Some(pki.admin_key.display().to_string()),
        ..AuthInfo::default()
    };
    single(cluster, user)
}

/// A kubeconfig for the apiserver at `server`, verified with the CA certificate file `ca` (for
/// `tls_server_name` when given, else for `server`'s host), as `user`.
pub(crate) fn for_user(server: &str, ca: &Path, user: AuthInfo, tls_server_name: Option<&str>) -> Kubeconfig {
    let cluster = Cluster {
        server: Some(server.to_owned()),
        certificate_authority: Some(ca.display().to_string()),
        tls_server_name: tls_server_name.map(str::to_owned),
        ..Cluster::default()
    };
    single(cluster, user)
}

/// A kubeconfig for a plain-HTTP server at `server` (no TLS) with no credentials.
pub(crate) fn plain(server: &str) -> Kubeconfig {
    single(Cluster { server: Some(server.to_owned()), ..Cluster::default() }, AuthInfo::default())
}

/// A kubeconfig for the same cluster as `base`, authenticating with the bearer `token`.
pub(crate) fn for_token(base: &Kubeconfig, token: &str) -> Result<Kubeconfig, Error> {
    let cluster = server_cluster(base)?.clone();
    let user = AuthInfo { token: Some(SecretString::from(token.to_owned())), ..AuthInfo::default() };
    Ok(single(cluster, user))
}

/// The URL of the cluster `kubeconfig` points at.
pub(crate) fn server(kubeconfig: &Kubeconfig) -> Result<String, Error> {
    server_cluster(kubeconfig)?.server.clone().ok_or_else(|| Error::Kubeconfig("the cluster has no server".to_owned()))
}

/// The PEM of the CA `kubeconfig`'s cluster is verified with (a file or inline data).
pub(crate) fn ca_pem(kubeconfig: &Kubeconfig) -> Result<String, Error> {
    let cluster = server_cluster(kubeconfig)?;
    if let Some(data) = &cluster.certificate_authority_data {
        let pem = BASE64_STANDARD
            .decode(data)
            .map_err(|error| Error::Kubeconfig(format!("certificate-authority-data: {error}")))?;
        return String::from_utf8(pem)
            .map_err(|error| Error::Kubeconfig(format!("certificate-authority-data: {error}")));
    }
    let path = cluster
        .certificate_authority
        .as_deref()
        .ok_or_else(|| Error::Kubeconfig("the cluster names no certificate authority".to_owned()))?;
    std::fs::read_to_string(path).map_err(Error::io(format!("reading {path}")))
}

/// Reads a kubeconfig file.
pub(crate) fn read(path: &Path) -> Result<Kubeconfig, Error> {
    Kubeconfig::read_from(path).map_err(|error| Error::Kubeconfig(format!("reading {}: {error}", path.display())))
}

/// Writes `kubeconfig` to `path` (as JSON, which every kubeconfig reader accepts as YAML).
pub(crate) fn write(kubeconfig: &Kubeconfig, path: &Path) -> Result<(), Error> {
    let text =
        serde_json::to_string_pretty(kubeconfig).map_err(|error| Error::Kubeconfig(format!("serializing: {error}")))?;
    std::fs::write(path, text).map_err(Error::io(format!("writing {}", path.display())))
}

/// A client for `kubeconfig`'s current context after `adjust` has edited the configuration.
pub(crate) async fn client(kubeconfig: &Kubeconfig, adjust: impl FnOnce(&mut Config)) -> Result<Client, Error> {
    let mut config = Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
        .await
        .map_err(|error| Error::Kubeconfig(error.to_string()))?;
    adjust(&mut config);
    Ok(Client::try_from(config)?)
}

/// A kubeconfig with exactly one cluster, user and context, all named [`NAME`].
fn single(cluster: Cluster, user: AuthInfo) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster { name: NAME.to_owned(), cluster: Some(cluster), ..NamedCluster::default() }],
        auth_infos: vec![NamedAuthInfo { name: NAME.to_owned(), auth_info: Some(user), ..NamedAuthInfo::default() }],
        contexts: vec![NamedContext {
            name: NAME.to_owned(),
            context: Some(Context { cluster: NAME.to_owned(), user: Some(NAME.to_owned()), ..Context::default() }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.to_owned()),
        ..Kubeconfig::default()
    }
}

/// The cluster of `kubeconfig`'s current context.
fn server_cluster(kubeconfig: &Kubeconfig) -> Result<&Cluster, Error> {
    let context_name =
        kubeconfig.current_context.as_deref().ok_or_else(|| Error::Kubeconfig("no current-context".to_owned()))?;
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|context| context.name == context_name)
        .and_then(|context| context.context.as_ref())
        .map(|context| context.cluster.as_str())
        .ok_or_else(|| Error::Kubeconfig(format!("no context {context_name}")))?;
    kubeconfig
        .clusters
        .iter()
        .find(|cluster| cluster.name == cluster_name)
        .and_then(|cluster| cluster.cluster.as_ref())
        .ok_or_else(|| Error::Kubeconfig(format!("no cluster {cluster_name}")))
}
