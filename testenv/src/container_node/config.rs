//! The configuration files of a [`super::ContainerNode`]: containerd's, the CNI network's, the
//! kubelet's and kube-proxy's.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde_json::json;

/// The image containerd runs as every pod's sandbox (kubeadm's for this release), built locally
/// from `tools/pause`: nothing can be pulled here.
pub(crate) const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.1";

/// The pods' IPv4 subnet on the node's bridge: a documentation range, inside the node's network
/// namespace only (every node has its own).
pub(crate) const POD_SUBNET: &str = "203.0.113.0/24";

/// The cluster's DNS domain (the kubelet's `clusterDomain`).
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";

/// The label and taint key of kubeadm's control-plane nodes.
pub(crate) const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// The port the kubelet serves on, as on every real node (the approver dials it for renewals).
pub(crate) const KUBELET_PORT: u16 = 10250;

/// The kubelet's healthz port, on the node's address.
pub(crate) const KUBELET_HEALTHZ_PORT: u16 = 10248;

/// kube-proxy's healthz port, on the node's address.
pub(crate) const KUBE_PROXY_HEALTHZ_PORT: u16 = 10256;

/// The directory of a node's directory where containerd finds a `<host:port>/hosts.toml` for each
/// registry it pulls from ([`registry_host`]).
pub(crate) const REGISTRY_HOSTS: &str = "registry-hosts";

/// containerd's configuration (version 2, containerd 1.6) for a node in `dir`: its state under
/// `dir`, the CRI plugin with runc through cgroupfs, the CNI network of `dir/cni` and the registry
/// hosts of `dir/`[`REGISTRY_HOSTS`].
///
/// `restrict_oom_score_adj`: runc may not lower a process's `oom_score_adj` below this process's
/// (as in a container), and the kubelet asks for lower values for guaranteed pods.
pub(crate) fn containerd(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"version = 2
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{dir}/containerd.sock"

[ttrpc]
  address = "{dir}/containerd.ttrpc.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{dir}/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{dir}/{REGISTRY_HOSTS}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/containerd/opt"
"#
    )
}

/// The `hosts.toml` that makes containerd pull the images of a registry (named by its host and
/// port) from `endpoint` instead, over plain HTTP: what a node configures for a registry it reaches
/// at another address than the images' names say.
pub(crate) fn registry_host(endpoint: SocketAddr) -> String {
    format!(
        r#"server = "http://{endpoint}"

[host."http://{endpoint}"]
  capabilities = ["pull", "resolve"]
"#
    )
}

/// The CNI network: a bridge with the node as the pods' gateway, addresses from [`POD_SUBNET`]
/// kept under `dir`, and traffic leaving the subnet masqueraded to the node's address.
pub(crate) fn cni(dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "testenv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": dir.join("cni-ipam").display().to_string(),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
}

/// What the kubelet's configuration depends on.
pub(crate) struct KubeletSettings<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) ca: &'a Path,
    pub(crate) node_ip: IpAddr,
    pub(crate) cluster_dns: IpAddr,
    pub(crate) cgroup_root: &'a str,
    pub(crate) control_plane_role: bool,
}

/// The KubeletConfiguration of a node running real containers: cgroupfs under its own cgroup root
/// (QoS cgroups and node-allocatable enforcement for pods, as on a real node), cgroup v1 allowed,
/// serving certificates by CSR, the cluster DNS, no image garbage collection (the imported images
/// could not be pulled back) and eviction only at the very end of memory and disk: thresholds in
/// bytes, not in percent of the disk's size, which on a large disk mostly full of build output
/// would put the node under disk pressure (its pods evicted, its imported images deleted) with
/// gigabytes still free.
pub(crate) fn kubelet(settings: &KubeletSettings<'_>) -> serde_json::Value {
    let endpoint = format!("unix://{}", settings.dir.join("containerd.sock").display());
    let taints = if settings.control_plane_role {
        json!([{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": settings.node_ip.to_string(),
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": settings.node_ip.to_string(),
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": settings.ca.display().to_string()},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "serverTLSBootstrap": true,
        "rotateCertificates": false,
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": settings.cgroup_root,
        "cgroupsPerQOS": true,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": false,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "clusterDNS": [settings.cluster_dns.to_string()],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "256Mi", "imagefs.available": "256Mi"},
        "registerWithTaints": taints,
        "podLogsDir": settings.dir.join("pod-logs").display().to_string(),
        "volumePluginDir": settings.dir.join("volume-plugins").display().to_string(),
    })
}

/// kube-proxy's configuration: iptables mode in the node's namespace, masquerading all Service
/// traffic (pods on one bridge then reach each other's Services without `br_netfilter`), leaving
/// the machine's conntrack settings alone.
pub(crate) fn kube_proxy(dir: &Path, node_name: &str, node_ip: IpAddr) -> serde_json::Value {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": dir.join("kube-proxy.kubeconfig").display().to_string()},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "bindAddress": node_ip.to_string(),
        "healthzBindAddress": format!("{node_ip}:{KUBE_PROXY_HEALTHZ_PORT}"),
        "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": POD_SUBNET,
        "iptables": {"masqueradeAll": true},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In percent, a threshold scales with the disk's size, not with what is free: on a large
    /// disk mostly full of build output the node went under disk pressure with gigabytes free.
    #[test]
    fn the_kubelet_evicts_only_below_fixed_amounts_of_free_memory_and_disk() {
        let settings = KubeletSettings {
            dir: Path::new("/node"),
            ca: Path::new("/node/ca.crt"),
            node_ip: IpAddr::from([198, 51, 100, 1]),
            cluster_dns: IpAddr::from([10, 96, 0, 10]),
            cgroup_root: "/node",
            control_plane_role: false,
        };
        let config = kubelet(&settings);
        let thresholds = config["evictionHard"].as_object().cloned().unwrap_or_default();
        let signals: Vec<&str> = thresholds.keys().map(String::as_str).collect();
        assert_eq!(signals, ["imagefs.available", "memory.available", "nodefs.available"]);
        for (signal, threshold) in &thresholds {
            let threshold = threshold.as_str().unwrap_or_default();
            assert!(threshold.ends_with("Mi"), "{signal}: {threshold}");
        }
    }
}
