//! The arguments of `check`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use jiff::Timestamp;

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
    #[arg(long, value_name = "NODE=PEMFILE", requires = "objects", value_parser = parse_kubelet_certificate)]
    pub kubelet_certificate: Vec<(String, PathBuf)>,
    /// The time used for age-based rules, RFC 3339 (default: now)
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<Timestamp>,
    /// Output format
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
}

/// How `check` prints its reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The decision and a table of every check.
    Text,
    /// One JSON object per CSR per line.
    Json,
}

/// A `check` argument that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckArgError {
    /// Not `NODE=PEMFILE`.
    #[error("{0:?} is not NODE=PEMFILE")]
    NotNodeCertificate(String),
    /// Not an RFC 3339 time.
    #[error("{text:?} is not an RFC 3339 time such as 2026-01-02T15:04:05Z")]
    NotTime {
        /// The argument.
        text: String,
        /// Why it is not.
        source: jiff::Error,
    },
}

fn parse_kubelet_certificate(text: &str) -> Result<(String, PathBuf), CheckArgError> {
    match text.split_once('=') {
        Some((node, path)) if !node.is_empty() && !path.is_empty() => Ok((node.to_owned(), PathBuf::from(path))),
        _ => Err(CheckArgError::NotNodeCertificate(text.to_owned())),
    }
}

fn parse_now(text: &str) -> Result<Timestamp, CheckArgError> {
    text.parse().map_err(|source| CheckArgError::NotTime { text: text.to_owned(), source })
}
