//! A Node the audit dials, and why one is not dialled: [`NodeTarget`], chosen by
//! `kubelet_endpoint.rs` with the rules of serving renewal, and its typed cause [`NotDialled`].

use std::net::SocketAddr;

use crate::kubernetes::object_fields::UndecodableError;
use crate::policy::{ClusterError, NotDialable};

/// A Node to audit: its name and where its kubelet is dialled, or why it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTarget {
    /// The Node's name.
    pub node: String,
    /// The Node's uid, for Events about it.
    pub uid: Option<String>,
    /// The address the dial rules give, or why they give none.
    pub target: Result<SocketAddr, NotDialled>,
}

/// Why a Node's kubelet is not dialled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDialled {
    /// The Node could not be decoded.
    #[error(transparent)]
    Undecodable(UndecodableError),
    /// The apiserver's addresses, which the kubelet may not be dialled at, are not known.
    #[error("the kubelet is not dialled: the apiserver's addresses: {0}")]
    ApiserverAddresses(ClusterError),
    /// The Node gives no kubelet port.
    #[error("the Node has no kubelet port in status.daemonEndpoints")]
    NoKubeletPort,
    /// The Node lists no InternalIP.
    #[error("the Node has no InternalIP address")]
    NoInternalIp,
    /// The Node's first InternalIP, as written, is not an IP address.
    #[error("the Node's InternalIP {0:?} is not an IP address")]
    InternalIpNotIp(String),
    /// The dial rules refuse the address or the port.
    #[error("the kubelet is not dialled: {0}")]
    Refused(NotDialable),
}
