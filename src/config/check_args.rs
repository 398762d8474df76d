//! The arguments of `check`, read as the flag groups read theirs ([`Checked`]); they have no env
//! var.

use std::path::PathBuf;

use clap::Args;
use jiff::Timestamp;

use crate::values::{Checked, Format, ValueError};

/// Arguments of `check`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["names", "file"])))]
pub struct CheckArgs {
    /// CSRs to fetch from the cluster (with the Nodes they need)
    #[arg(value_name = "NAME", conflicts_with_all = ["file", "objects"])]
    pub names: Vec<String>,
    /// CertificateSigningRequests as YAML or JSON (an object, a List or several documents); - for stdin
    #[arg(short, long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Nodes, Machines (machine.openshift.io, cluster.x-k8s.io), the default/kubernetes Service and its EndpointSlices standing in for the cluster, as YAML or JSON
    #[arg(long, value_name = "PATH", requires = "file")]
    pub objects: Option<PathBuf>,
    /// NODE=PEMFILE: the certificate (and intermediates) node NODE's kubelet serves, as renewal evidence verified against --kubelet-serving-ca-file (repeatable; needs the Node in --objects)
    #[arg(long, value_name = "NODE=PEMFILE", requires = "objects", value_parser = Checked(kubelet_certificate))]
    pub kubelet_certificate: Vec<(String, PathBuf)>,
    /// The time used for age-based rules, RFC 3339 (default: now)
    #[arg(long, value_name = "RFC3339", value_parser = Checked(now))]
    pub now: Option<Timestamp>,
    /// Output format
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Format,
}

/// `NODE=PEMFILE`, neither empty.
fn kubelet_certificate(text: &str) -> Result<(String, PathBuf), ValueError> {
    match text.split_once('=') {
        Some((node, path)) if !node.is_empty() && !path.is_empty() => Ok((node.to_owned(), PathBuf::from(path))),
        _ => Err(ValueError::NotNodeCertificate(text.to_owned())),
    }
}

/// An RFC 3339 time.
fn now(text: &str) -> Result<Timestamp, ValueError> {
    text.parse().map_err(|source| ValueError::NotTime(text.to_owned(), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubelet_certificate_names_a_node_and_a_file() {
        assert_eq!(kubelet_certificate("n1=/a=b.pem").unwrap(), ("n1".to_owned(), PathBuf::from("/a=b.pem")));
        for bad in ["n1", "=x.pem", "n1=", ""] {
            assert_eq!(kubelet_certificate(bad).unwrap_err().to_string(), format!("{bad:?} is not NODE=PEMFILE"));
        }
        assert!(now("2026-01-02T15:04:05Z").is_ok());
        assert!(now("yesterday").unwrap_err().to_string().starts_with(r#""yesterday" is not an RFC 3339 time"#));
    }
}
