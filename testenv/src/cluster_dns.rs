//! [`ClusterDns`]: the cluster's DNS server for pods, as CoreDNS serves it: every Service's
//! ClusterIP under `<service>.<namespace>.svc.cluster.local`, and every Node's name to its
//! InternalIPs (test node names resolve nowhere else).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::ListParams;
use kube::{Api, Client};
use testdns::{DnsServer, Records};
use tokio::task::JoinHandle;

use crate::Error;
use crate::container_node::config::CLUSTER_DOMAIN;

/// How often the records follow the cluster's Services and Nodes.
const REFRESH: Duration = Duration::from_millis(500);

/// A [`DnsServer`] on port 53 of an address pods reach, refreshed from the cluster every
/// [`REFRESH`] until dropped.
#[derive(Debug)]
pub struct ClusterDns {
    refresh: JoinHandle<()>,
    server: Arc<DnsServer>,
}

impl ClusterDns {
    /// Starts the server on `address`:53 and the task keeping its records, with `client`.
    pub fn start(address: IpAddr, client: Client) -> Result<ClusterDns, Error> {
        let server = DnsServer::start_on_thread_at(Records::new(), SocketAddr::new(address, 53))
            .map_err(|error| Error::Unexpected(format!("starting the cluster DNS server: {error}")))?;
        let server = Arc::new(server);
        let handle = Arc::clone(&server);
        let refresh = tokio::spawn(async move {
            loop {
                if let Ok(records) = records(&client).await {
                    let _ = handle.set_records(records);
                }
                tokio::time::sleep(REFRESH).await;
            }
        });
        Ok(ClusterDns { refresh, server })
    }

    /// Where it answers.
    pub fn address(&self) -> SocketAddr {
        self.server.addr()
    }
}

impl Drop for ClusterDns {
    fn drop(&mut self) {
        self.refresh.abort();
    }
}

/// The records of the cluster's Services (with a ClusterIP) and Nodes now.
async fn records(client: &Client) -> Result<Records, kube::Error> {
    let mut records = Records::new().ttl(1);
    for service in Api::<Service>::all(client.clone()).list(&ListParams::default()).await? {
        let (Some(name), Some(namespace)) = (service.metadata.name, service.metadata.namespace) else {
            continue;
        };
        let ips = service.spec.and_then(|spec| spec.cluster_ips).unwrap_or_default();
        for ip in ips.iter().filter_map(|ip| ip.parse::<IpAddr>().ok()) {
            records = records.ip(&format!("{name}.{namespace}.svc.{CLUSTER_DOMAIN}"), ip);
        }
    }
    for node in Api::<Node>::all(client.clone()).list(&ListParams::default()).await? {
        let Some(name) = node.metadata.name else { continue };
        let addresses = node.status.and_then(|status| status.addresses).unwrap_or_default();
        for address in addresses.iter().filter(|address| address.type_ == "InternalIP") {
            if let Ok(ip) = address.address.parse::<IpAddr>() {
                records = records.ip(&name, ip);
            }
        }
    }
    Ok(records)
}
