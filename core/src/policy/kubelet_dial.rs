//! Where serving renewal may dial a node's kubelet. The address and the port come from the Node's
//! own status, which the kubelet writes: without these rules a node could point the approver at
//! any address and port (loopback, a metadata service, the apiserver's host) and read from the
//! outcome what answers there. Only an address inside `--provider-ip-prefixes`, outside the
//! reserved addresses (`reserved.rs`) and the apiserver's addresses the node does not own (every
//! ClusterIP, and each advertise address unless the node is its one claimant), at the kubelet port
//! (`--kubelet-port`), is dialled.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::cluster_identity::{Ownership, ownership};
use super::ports::{AddressClaim, ApiserverAddresses};
use super::reserved::{ReservedKind, host, reserved_address};

/// The addresses and the port a kubelet may be dialled at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletDialRules {
    /// `--provider-ip-prefixes`: the node addresses of the cluster.
    pub prefixes: Vec<IpNet>,
    /// `--kubelet-port`: the one port dialled.
    pub port: u16,
}

/// Why a kubelet is not dialled at the address and port its Node gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDialable {
    /// The Node's kubelet port is not `--kubelet-port`.
    #[error("the Node's kubelet port {port} is not the kubelet port {kubelet_port} (--kubelet-port)")]
    OtherPort {
        /// The port the Node gives.
        port: u16,
        /// `--kubelet-port`.
        kubelet_port: u16,
    },
    /// The address is reserved (`reserved.rs`).
    #[error("the Node's InternalIP {ip} is {kind}")]
    Reserved {
        /// The address.
        ip: IpAddr,
        /// The kind of reserved address.
        kind: ReservedKind,
    },
    /// The address is one of the apiserver's that the node does not own.
    #[error("the Node's InternalIP {0} is an address of the apiserver (default/kubernetes)")]
    Apiserver(IpAddr),
    /// The address is outside `--provider-ip-prefixes`.
    #[error("the Node's InternalIP {0} is outside --provider-ip-prefixes")]
    OutsidePrefixes(IpAddr),
}

impl KubeletDialRules {
    /// The address to dial for a kubelet its Node places at `ip` and `port`, or why it is not
    /// dialled. `apiserver` holds the apiserver's addresses the node does not own, each refused in
    /// every spelling (an IPv6 address embedding it, `reserved::host`); an IPv4-mapped address is
    /// read as the IPv4 address it maps.
    pub fn target(&self, ip: IpAddr, port: u16, apiserver: &[IpAddr]) -> Result<SocketAddr, NotDialable> {
        let ip = ip.to_canonical();
        if port != self.port {
            return Err(NotDialable::OtherPort { port, kubelet_port: self.port });
        }
        if let Some(kind) = reserved_address(ip) {
            return Err(NotDialable::Reserved { ip, kind });
        }
        if apiserver.iter().any(|address| host(*address) == host(ip)) {
            return Err(NotDialable::Apiserver(ip));
        }
        if !self.prefixes.iter().any(|net| net.contains(&ip)) {
            return Err(NotDialable::OutsidePrefixes(ip));
        }
        Ok(SocketAddr::new(ip, port))
    }
}

/// The apiserver's addresses a kubelet of Node `node` may not be dialled at: every ClusterIP of
/// `default/kubernetes`, and every EndpointSlice address but those `claims` (who claims each
/// advertise address the Node lists) give to `node` alone: a control-plane node's own InternalIP.
pub fn not_owned(apiserver: &ApiserverAddresses, claims: &[AddressClaim], node: &str) -> Vec<IpAddr> {
    let owned = |ip: &IpAddr| ownership(node, ip, claims, &[]) == Ownership::Own;
    let endpoints = apiserver.endpoints.iter().filter(|ip| !owned(ip));
    apiserver.service.iter().chain(endpoints).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertise_address_is_dialled_only_for_its_one_claimant_and_a_cluster_ip_never() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let apiserver =
            ApiserverAddresses { service: vec![ip("10.96.0.1")], endpoints: vec![ip("10.0.0.5"), ip("10.0.0.6")] };
        let claim = |at: &str, nodes: &[&str]| AddressClaim {
            ip: ip(at),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            control_plane: Vec::new(),
        };
        let sole = [claim("10.0.0.5", &["cp1"])];
        assert_eq!(not_owned(&apiserver, &sole, "cp1"), vec![ip("10.96.0.1"), ip("10.0.0.6")]);
        assert_eq!(not_owned(&apiserver, &sole, "worker"), vec![ip("10.96.0.1"), ip("10.0.0.5"), ip("10.0.0.6")]);
        let shared = [claim("10.0.0.5", &["cp1", "worker"])];
        assert_eq!(not_owned(&apiserver, &shared, "cp1"), vec![ip("10.96.0.1"), ip("10.0.0.5"), ip("10.0.0.6")]);
        let mut labelled = claim("10.0.0.5", &["worker", "cp1"]);
        labelled.control_plane = vec!["cp1".into()];
        let labelled = [labelled];
        assert_eq!(not_owned(&apiserver, &labelled, "cp1"), vec![ip("10.96.0.1"), ip("10.0.0.6")], "the label tells");
        assert_eq!(not_owned(&apiserver, &labelled, "worker"), vec![ip("10.96.0.1"), ip("10.0.0.5"), ip("10.0.0.6")]);
        let mapped = [claim("::ffff:10.0.0.5", &["cp1"])];
        assert_eq!(not_owned(&apiserver, &mapped, "cp1"), vec![ip("10.96.0.1"), ip("10.0.0.6")]);
        let on_cluster_ip = ApiserverAddresses { service: vec![ip("10.0.0.5")], endpoints: vec![ip("10.0.0.5")] };
        assert_eq!(not_owned(&on_cluster_ip, &sole, "cp1"), vec![ip("10.0.0.5")]);
    }

    #[test]
    fn only_a_node_address_at_the_kubelet_port_is_dialled() {
        let rules = KubeletDialRules { prefixes: vec!["10.0.0.0/16".parse().unwrap()], port: 10250 };
        let target = |ip: &str, port| rules.target(ip.parse().unwrap(), port, &["10.0.0.1".parse().unwrap()]);
        assert_eq!(target("10.0.0.7", 10250), Ok("10.0.0.7:10250".parse().unwrap()));
        assert_eq!(target("::ffff:10.0.0.7", 10250), Ok("10.0.0.7:10250".parse().unwrap()));
        assert!(
            target("10.0.0.7", 10255).unwrap_err().to_string().contains("port 10255 is not the kubelet port 10250")
        );
        assert!(target("10.0.0.1", 10250).unwrap_err().to_string().contains("address of the apiserver"));
        assert!(target("::ffff:10.0.0.1", 10250).unwrap_err().to_string().contains("address of the apiserver"));
        assert!(target("10.1.0.7", 10250).unwrap_err().to_string().contains("outside --provider-ip-prefixes"));
        let anywhere = KubeletDialRules { prefixes: vec!["::/0".parse().unwrap()], port: 10250 };
        let cluster_ip = ["10.96.0.1".parse().unwrap()];
        for spelling in ["2002:a60:1::", "2002:a60:1:ffff::7", "::ffff:0:a60:1"] {
            let refused = anywhere.target(spelling.parse().unwrap(), 10250, &cluster_ip).unwrap_err().to_string();
            assert!(refused.contains("address of the apiserver"), "{spelling}: {refused}");
        }
        assert!(anywhere.target("2002:a60:2::".parse().unwrap(), 10250, &cluster_ip).is_ok());
        let open = KubeletDialRules { prefixes: vec!["0.0.0.0/0".parse().unwrap()], port: 10250 };
        let refused = open.target("169.254.169.254".parse().unwrap(), 10250, &[]).unwrap_err().to_string();
        assert!(refused.contains("link-local"), "{refused}");
    }
}
