//! [`ContainerNode`]: a node that runs real containers (containerd and runc, the CNI bridge,
//! kube-proxy and the kubelet) in a [`NodeNetwork`] of its own.

mod cgroups;
pub(crate) mod config;
pub(crate) mod images;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::Error;
use crate::kube_apiserver::SERVICE_RANGE;
use crate::kubelet::{KubeletCredentials, KubeletOptions};
use crate::node_files::{self, Server, write_credentials};
use crate::node_network::NodeNetwork;
use crate::pki::PkiFiles;
use crate::placement::{Placement, upstream};
use crate::process::{Cleanup, Supervised};
use crate::relay::Relay;

use cgroups::NodeCgroup;
use config::KubeletSettings;

/// The node's script: see its header.
const NODE_SCRIPT: &str = include_str!("container_node/node.sh");

/// How long the node may take from start to a healthy kubelet (containerd and image imports
/// included).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Programs a container node runs, from the machine (Debian's packages) or the tools directory.
const HOST_PROGRAMS: [&str; 6] = ["containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "socat"];

/// What [`crate::ControlPlane::start_container_node`] starts.
#[derive(Debug, Clone)]
pub struct ContainerNodeOptions {
    /// The Node name it registers (`--hostname-override`).
    pub node_name: String,
    /// Its network namespace; its first address is its node address.
    pub network: Arc<NodeNetwork>,
    /// OCI image archives imported into containerd before the kubelet starts (the pause image is
    /// always imported).
    pub images: Vec<PathBuf>,
    /// The cluster DNS server's address, where pods with `dnsPolicy: ClusterFirst` send queries.
    pub cluster_dns: IpAddr,
    /// An OCI registry on this machine's loopback (`127.0.0.1:<port>`, as the images name it) that
    /// the node's containerd pulls from, through a relay on the host end of the node's link
    /// (`hosts.toml` of that host, plain HTTP).
    pub registry: Option<SocketAddr>,
    /// Registers with the control-plane role's taint (`node-role.kubernetes.io/control-plane:
    /// NoSchedule`), as a kubeadm control-plane node.
    pub control_plane_role: bool,
}

/// Paths of the binaries a container node needs from the tools directory.
#[derive(Debug, Clone)]
pub(crate) struct NodeTools {
    pub(crate) kubelet: PathBuf,
    pub(crate) kube_proxy: PathBuf,
    pub(crate) pause: PathBuf,
}

/// A node running containers: containerd with runc, the CNI bridge plugin (pods on a bridge in
/// the node's namespace, [`config::POD_SUBNET`]), kube-proxy (iptables) and a kubelet with a
/// node certificate and `serverTLSBootstrap`, all as root in the node's network namespace and a
/// private mount namespace, in a cgroup of their own.
///
/// It leaves nothing on the machine: kernel tunables the kubelet sets are written to copies bind
/// mounted over them inside its mount namespace; `/var/lib`, `/var/log` and `/run` are its own
/// there; containerd's state is in its directory; its processes, including the shims and
/// containers that leave its process group, are ended through its cgroup, which is then removed
/// (also when this process dies); its mounts go with its mount namespace and its links, routes and
/// iptables rules with its network namespace. Dropping it ends it and removes its directory.
#[derive(Debug)]
pub struct ContainerNode {
    process: Supervised,
    cgroup: NodeCgroup,
    _forward: Option<Relay>,
    _registry: Option<Relay>,
    placement: Placement,
    node_name: String,
    dir: TempDir,
}

impl ContainerNode {
    /// The Node name it registers.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Its node address: where its kubelet serves ([`config::KUBELET_PORT`]) and its InternalIP.
    pub fn node_ip(&self) -> IpAddr {
        self.placement.listen
    }

    /// Where its kubelet serves HTTPS.
    pub fn kubelet_address(&self) -> SocketAddr {
        SocketAddr::new(self.node_ip(), config::KUBELET_PORT)
    }

    /// Its directory, holding its configuration and logs (`kubelet.log`, `containerd.log`,
    /// `kube-proxy.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubelet's log so far.
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default()
    }

    /// The name of its cgroup, the same in every hierarchy (`/sys/fs/cgroup/<hierarchy>/<name>`).
    pub fn cgroup_name(&self) -> &str {
        self.cgroup.name()
    }

    /// Process id of the node's main process (the kubelet), for leak checks.
    pub fn process_id(&self) -> u32 {
        self.process.id()
    }
}

/// Starts the node `options` describes against the apiserver at `server` (`https://127.0.0.1:P`)
/// (pulling images of `options.registry` through a relay), and waits until its kubelet's `/healthz` answers `ok`. `advertised`: the apiserver's advertise
/// address, the endpoint pods reach it at through the `kubernetes` Service; served by a relay
/// on the host end of the node's link, or, when it is the node's own address (a kubeadm
/// control-plane node), by a forwarder inside the node.
pub(crate) async fn start(
    tools: &NodeTools,
    server: &str,
    pki: &PkiFiles,
    options: &ContainerNodeOptions,
    advertised: SocketAddr,
) -> Result<ContainerNode, Error> {
    let missing: Vec<&str> = HOST_PROGRAMS.into_iter().filter(|program| !on_path(program)).collect();
    if !missing.is_empty() {
        return Err(Error::MissingPrograms(missing.join(", ")));
    }
    let kubelet_options = KubeletOptions::in_network(
        &options.node_name,
        Arc::clone(&options.network),
        KubeletCredentials::NodeCertificate,
    );
    let placement = Placement::new(&kubelet_options, server)?;
    let node_ip = placement.listen;
    let (dir, ca) =
        node_files::directory("testenv-node-", &["pki", "root", "cni", "cni-ipam", "pod-logs", "volume-plugins"], pki)?;
    let path = dir.path();
    let apiserver = Server { url: &placement.server, tls_server_name: placement.tls_server_name.as_deref() };
    let node_user = format!("system:node:{}", options.node_name);
    write_credentials(pki, &ca, &apiserver, (&node_user, "system:nodes"), &path.join("kubelet.kubeconfig"))?;
    write_credentials(pki, &ca, &apiserver, ("system:kube-proxy", ""), &path.join("kube-proxy.kubeconfig"))?;

    let cgroup = NodeCgroup::create(&format!("{}-{}", std::process::id(), options.network.link_name()))?;
    write(&path.join("containerd.toml"), &config::containerd(path))?;
    write(&path.join("cni/10-testenv.conflist"), &config::cni(path).to_string())?;
    let settings = KubeletSettings {
        dir: path,
        ca: &ca,
        node_ip,
        cluster_dns: options.cluster_dns,
        cgroup_root: &format!("/{}", cgroup.name()),
        control_plane_role: options.control_plane_role,
    };
    write(&path.join("kubelet.json"), &config::kubelet(&settings).to_string())?;
    write(&path.join("kube-proxy.json"), &config::kube_proxy(path, &options.node_name, node_ip).to_string())?;

    let (forward, forward_spec) = if advertised.ip() == node_ip {
        (None, format!("{advertised} {}", upstream(&placement.server)?))
    } else {
        (Some(Relay::start(advertised, upstream(server)?)?), String::new())
    };
    let registry = options.registry.map(|registry| registry_relay(&options.network, registry, path)).transpose()?;
    let pause = images::pause(&tools.pause, &path.join("pause.tar"))?;
    let mut images = vec![pause.display().to_string()];
    images.extend(options.images.iter().map(|image| image.display().to_string()));
    let environment = [
        ("DIR", path.display().to_string()),
        ("CGROUP", cgroup.name().to_owned()),
        ("KUBELET", tools.kubelet.display().to_string()),
        ("KUBE_PROXY", tools.kube_proxy.display().to_string()),
        ("IMAGES", images.join("\n")),
        ("SERVICE_RANGE", SERVICE_RANGE.to_owned()),
        ("FORWARD", forward_spec),
    ];
    let mut command: Vec<String> = vec!["env".to_owned()];
    command.extend(environment.iter().map(|(key, value)| format!("{key}={value}")));
    command.extend(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", NODE_SCRIPT, "testenv-node"].map(str::to_owned),
    );
    command.extend([
        format!("--config={}", path.join("kubelet.json").display()),
        format!("--kubeconfig={}", path.join("kubelet.kubeconfig").display()),
        format!("--root-dir={}", path.join("root").display()),
        format!("--cert-dir={}", path.join("pki").display()),
        format!("--hostname-override={}", options.node_name),
        placement.node_ip_flag(),
        "--v=2".to_owned(),
    ]);
    let program = PathBuf::from(command.remove(0));
    let (program, args) = placement.entered((program, command));
    let cleanup = Cleanup { script: cgroups::CLEANUP, argument: cgroup.name() };
    let mut process = Supervised::spawn_with_cleanup(
        "container node",
        &program,
        &args,
        &path.join("kubelet.log"),
        Some(path),
        Some(cleanup),
    )?;
    process.wait_healthy(START_TIMEOUT, || placement.healthz(config::KUBELET_HEALTHZ_PORT)).await?;
    Ok(ContainerNode {
        process,
        cgroup,
        _forward: forward,
        _registry: registry,
        placement,
        node_name: options.node_name.clone(),
        dir,
    })
}

/// A relay on the host end of `network`'s link to `registry`, and the `hosts.toml` in `dir` that
/// sends containerd's pulls of `registry`'s images there.
fn registry_relay(network: &NodeNetwork, registry: SocketAddr, dir: &Path) -> Result<Relay, Error> {
    let Some(&host) = network.host_addresses().first() else {
        return Err(Error::Network("the node network has no addresses".to_owned()));
    };
    let relay = Relay::start(SocketAddr::new(host, 0), registry)?;
    let hosts = dir.join(config::REGISTRY_HOSTS).join(registry.to_string());
    std::fs::create_dir_all(&hosts).map_err(Error::io(format!("creating {}", hosts.display())))?;
    write(&hosts.join("hosts.toml"), &config::registry_host(relay.address()))?;
    Ok(relay)
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(Error::io(format!("writing {}", path.display())))
}

/// Whether `program` is found on `PATH` (or in `/usr/sbin`, where Debian puts runc).
fn on_path(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", "command -v \"$1\" >/dev/null || [ -x \"/usr/sbin/$1\" ]", "on-path", program])
        .status()
        .is_ok_and(|status| status.success())
}
