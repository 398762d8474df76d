//! [`Placement`]: where a kubelet runs, what addresses it has, and how it reaches the apiserver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use crate::Error;
use crate::kubelet::{KubeletCredentials, KubeletOptions};
use crate::node_network::NodeNetwork;
use crate::relay::Relay;

/// The name the apiserver's serving certificate holds, which a kubelet reaching it through a
/// [`Relay`] verifies instead of the relay's address (`tls-server-name` of its kubeconfig).
const APISERVER_NAME: &str = "localhost";

/// What differs between a kubelet on this machine's own address and one in a [`NodeNetwork`].
/// Held by the kubelet's handle, so the relay and the network outlive the kubelet.
#[derive(Debug)]
pub(crate) struct Placement {
    /// The apiserver URL of its kubeconfig.
    pub(crate) server: String,
    /// The name it verifies the apiserver's certificate for, when not the URL's host.
    pub(crate) tls_server_name: Option<String>,
    /// Its node addresses (`--node-ip`), the first the one it is reached at.
    pub(crate) node_ips: Vec<IpAddr>,
    /// Where its HTTPS server listens (`address`).
    pub(crate) listen: IpAddr,
    /// Where its healthz server listens, reachable from this process.
    pub(crate) healthz: IpAddr,
    /// The command prefix that runs it (and its runtime) in its network namespace; empty on the
    /// machine's own.
    enter: Vec<String>,
    _relay: Option<Relay>,
    _network: Option<Arc<NodeNetwork>>,
}

impl Placement {
    /// Where the kubelet `options` describes runs, with the apiserver at `server`
    /// (`https://127.0.0.1:<port>`): on this machine's own network with [`KubeletOptions::node_ip`],
    /// or in [`KubeletOptions::network`] with a relay on the host end of its link (of the node's
    /// first address family) to the apiserver.
    pub(crate) fn new(options: &KubeletOptions, server: &str) -> Result<Placement, Error> {
        let Some(network) = &options.network else {
            return Ok(Placement {
                server: server.to_owned(),
                tls_server_name: None,
                node_ips: vec![options.node_ip],
                listen: options.node_ip,
                healthz: IpAddr::V4(Ipv4Addr::LOCALHOST),
                enter: Vec::new(),
                _relay: None,
                _network: None,
            });
        };
        let (Some(&first), Some(&host)) = (network.addresses().first(), network.host_addresses().first()) else {
            return Err(Error::Network("the network has no addresses".to_owned()));
        };
        let relay = Relay::start(SocketAddr::new(host, 0), upstream(server)?)?;
        // Two families: listen on both, which in the node's own namespace are its two addresses.
        let listen = if network.addresses().len() > 1 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { first };
        Ok(Placement {
            server: format!("https://{}", relay.address()),
            tls_server_name: Some(APISERVER_NAME.to_owned()),
            node_ips: network.addresses().to_vec(),
            listen,
            healthz: first,
            enter: network.enter(),
            _relay: Some(relay),
            _network: Some(Arc::clone(network)),
        })
    }
}

impl KubeletOptions {
    /// A kubelet named `node_name` in `network`, at all its addresses (`node_ip` is the first), as
    /// [`KubeletOptions::new`].
    pub fn in_network(node_name: &str, network: Arc<NodeNetwork>, credentials: KubeletCredentials) -> KubeletOptions {
        let node_ip = network.addresses().first().copied().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        KubeletOptions { network: Some(network), ..KubeletOptions::new(node_name, node_ip, credentials) }
    }
}

impl Placement {
    /// `--node-ip=<addresses, comma-separated>`: with two, the kubelet reports an InternalIP of
    /// each family and asks for both in its serving certificate.
    pub(crate) fn node_ip_flag(&self) -> String {
        let addresses: Vec<String> = self.node_ips.iter().map(IpAddr::to_string).collect();
        format!("--node-ip={}", addresses.join(","))
    }

    /// The program and arguments that run the command `(program, args)` in the kubelet's network
    /// namespace; the command itself on the machine's own network.
    pub(crate) fn entered(&self, (program, args): (PathBuf, Vec<String>)) -> (PathBuf, Vec<String>) {
        let Some((first, rest)) = self.enter.split_first() else {
            return (program, args);
        };
        let mut entered = rest.to_vec();
        entered.push(program.display().to_string());
        entered.extend(args);
        (PathBuf::from(first), entered)
    }

    /// The body of a plain HTTP `GET /healthz` on the kubelet's healthz `port`.
    pub(crate) async fn healthz(&self, port: u16) -> std::io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(SocketAddr::new(self.healthz, port)).await?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: healthz\r\nConnection: close\r\n\r\n").await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
    }
}

/// The address of the apiserver at `server`, `https://<ip>:<port>`.
pub(crate) fn upstream(server: &str) -> Result<SocketAddr, Error> {
    let authority = server.strip_prefix("https://").map(|rest| rest.trim_end_matches('/'));
    authority
        .and_then(|authority| authority.parse().ok())
        .ok_or_else(|| Error::Unexpected(format!("the apiserver URL {server} is not https://<ip>:<port>")))
}
