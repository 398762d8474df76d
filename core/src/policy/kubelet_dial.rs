//! Where serving renewal may dial a node's kubelet. The address and the port come from the Node's
//! own status, which the kubelet writes: without these rules a node could point the approver at
//! any address and port (loopback, a metadata service, the apiserver's host) and read from the
//! outcome what answers there. Only an address inside `--provider-ip-prefixes`, outside the
//! reserved addresses (`reserved.rs`) and the apiserver's addresses, at the kubelet port
//! (`--kubelet-port`), is dialled.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::reserved::reserved_address;

/// The addresses and the port a kubelet may be dialled at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletDialRules {
    /// `--provider-ip-prefixes`: the node addresses of the cluster.
    pub prefixes: Vec<IpNet>,
    /// `--kubelet-port`: the one port dialled.
    pub port: u16,
}

impl KubeletDialRules {
    /// The address to dial for a kubelet its Node places at `ip` and `port`, or why it is not
    /// dialled. `apiserver` holds the apiserver's addresses; an IPv4-mapped address is read as the
    /// IPv4 address it maps.
    pub fn target(&self, ip: IpAddr, port: u16, apiserver: &[IpAddr]) -> Result<SocketAddr, String> {
        let ip = ip.to_canonical();
        if port != self.port {
            return Err(format!(
                "the Node's kubelet port {port} is not the kubelet port {} (--kubelet-port)",
                self.port
            ));
        }
        if let Some(kind) = reserved_address(ip) {
            return Err(format!("the Node's InternalIP {ip} is {kind}"));
        }
        if apiserver.iter().any(|address| address.to_canonical() == ip) {
            return Err(format!("the Node's InternalIP {ip} is an address of the apiserver (default/kubernetes)"));
        }
        if !self.prefixes.iter().any(|net| net.contains(&ip)) {
            return Err(format!("the Node's InternalIP {ip} is outside --provider-ip-prefixes"));
        }
        Ok(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_node_address_at_the_kubelet_port_is_dialled() {
        let rules = KubeletDialRules { prefixes: vec!["10.0.0.0/16".parse().unwrap()], port: 10250 };
        let target = |ip: &str, port| rules.target(ip.parse().unwrap(), port, &["10.0.0.1".parse().unwrap()]);
        assert_eq!(target("10.0.0.7", 10250), Ok("10.0.0.7:10250".parse().unwrap()));
        assert_eq!(target("::ffff:10.0.0.7", 10250), Ok("10.0.0.7:10250".parse().unwrap()));
        assert!(target("10.0.0.7", 10255).unwrap_err().contains("port 10255 is not the kubelet port 10250"));
        assert!(target("10.0.0.1", 10250).unwrap_err().contains("address of the apiserver"));
        assert!(target("::ffff:10.0.0.1", 10250).unwrap_err().contains("address of the apiserver"));
        assert!(target("10.1.0.7", 10250).unwrap_err().contains("outside --provider-ip-prefixes"));
        let open = KubeletDialRules { prefixes: vec!["0.0.0.0/0".parse().unwrap()], port: 10250 };
        let refused = open.target("169.254.169.254".parse().unwrap(), 10250, &[]).unwrap_err();
        assert!(refused.contains("link-local"), "{refused}");
    }
}
