//! Files every test node starts from: its directory, with the cluster CA in it, and kubeconfigs
//! with client certificates of the cluster CA.

use std::path::{Path, PathBuf};

use kube::config::AuthInfo;
use tempfile::TempDir;

use crate::pki::{self, PkiFiles};
use crate::{Error, kubeconfig};

/// A new directory named `<prefix>…` with the subdirectories `subdirs` and a copy of `pki`'s CA
/// certificate (`ca.crt`, returned beside it).
pub(crate) fn directory(prefix: &str, subdirs: &[&str], pki: &PkiFiles) -> Result<(TempDir, PathBuf), Error> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().map_err(Error::io("creating a node directory"))?;
    for sub in subdirs {
        std::fs::create_dir(dir.path().join(sub)).map_err(Error::io(format!("creating {sub} for a node")))?;
    }
    let ca = dir.path().join("ca.crt");
    std::fs::copy(&pki.ca_cert, &ca).map_err(Error::io("copying the CA certificate for a node"))?;
    Ok((dir, ca))
}

/// Where a client reaches the apiserver: its URL and, when not the URL's host, the name its
/// certificate is verified for.
pub(crate) struct Server<'a> {
    pub(crate) url: &'a str,
    pub(crate) tls_server_name: Option<&'a str>,
}

/// Writes the kubeconfig `path` for a client certificate of `pki`'s CA for `user` in `group`
/// (written beside it, `<path>.crt` and `<path>.key`), reaching `server` and verifying it with `ca`.
pub(crate) fn write_credentials(
    pki: &PkiFiles,
    ca: &Path,
    server: &Server<'_>,
    (user, group): (&str, &str),
    path: &Path,
) -> Result<(), Error> {
    let (cert, key) = pki::client_certificate(pki, user, group)?;
    let (cert_path, key_path) = (path.with_extension("crt"), path.with_extension("key"));
    for (file, contents) in [(&cert_path, cert), (&key_path, key)] {
        std::fs::write(file, contents).map_err(Error::io(format!("writing {}", file.display())))?;
    }
    let auth = AuthInfo {
        client_certificate: Some(cert_path.display().to_string()),
        client_key: Some(key_path.display().to_string()),
        ..AuthInfo::default()
    };
    kubeconfig::write(&kubeconfig::for_user(server.url, ca, auth, server.tls_server_name), path)
}
