//! A real kubelet, on Kubernetes' fake container runtime, joined to a control plane.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::AuthInfo;
use secrecy::SecretString;
use serde_json::json;
use tempfile::TempDir;
use tokio::time::{Instant, sleep};

use crate::node_files::{self, Server, write_credentials};
use crate::node_network::NodeNetwork;
use crate::pki::PkiFiles;
use crate::placement::Placement;
use crate::ports::free_port;
use crate::process::Supervised;
use crate::{Error, kubeconfig};

/// The unprivileged user (and group) a kubelet started by root runs as, outside its user namespace.
pub const SANDBOX_UID: u32 = 100_000;

/// How long the kubelet (and fake-cri) may take to answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Run in the kubelet's user and mount namespaces before the kubelet: `$1` is its directory, the
/// remaining arguments the kubelet command line.
const SANDBOX: &str = r#"
set -e
mount --bind "$1/var-lib" /var/lib
mount --bind "$1/var-log" /var/log
mkdir -p /var/lib/kubelet
shift
exec "$@"
"#;

/// How a kubelet authenticates to the apiserver.
#[derive(Debug, Clone)]
pub enum KubeletCredentials {
    /// A client certificate of the cluster CA for `system:node:<name>` in `system:nodes`, as a
    /// provisioned node has; the kubelet does not rotate it.
    NodeCertificate,
    /// Only a bootstrap kubeconfig with this bootstrap token (see
    /// [`crate::ControlPlane::create_bootstrap_token`]): the kubelet requests its client
    /// certificate through a `kubernetes.io/kube-apiserver-client-kubelet` CSR and waits until it
    /// is issued (TLS bootstrapping), then rotates it as configured by default.
    BootstrapToken(String),
}

/// What a kubelet started by [`crate::ControlPlane::start_kubelet`] is.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// The Node name it registers (`--hostname-override`).
    pub node_name: String,
    /// Its node address (`--node-ip`), reported as InternalIP and where its HTTPS server listens;
    /// not loopback (the kubelet refuses it): see [`host_address`]. In a [`NodeNetwork`], its first.
    pub node_ip: IpAddr,
    /// How it authenticates to the apiserver.
    pub credentials: KubeletCredentials,
    /// `serverTLSBootstrap`: request the serving certificate through a CSR (true, the default of
    /// [`KubeletOptions::new`]), or serve a self-signed certificate the kubelet makes itself.
    pub server_tls_bootstrap: bool,
    /// The network namespace it runs in, with all its addresses as node addresses (one InternalIP
    /// of each family); `None`: this machine's own, with `node_ip`.
    pub network: Option<std::sync::Arc<NodeNetwork>>,
    /// The port of its HTTPS server; `None`: a free one. Kubelets on this machine's own network
    /// need ports of their own; each in a [`NodeNetwork`] of its own may share one.
    pub port: Option<u16>,
}

impl KubeletOptions {
    /// A kubelet named `node_name` on `node_ip` with `credentials` and `serverTLSBootstrap: true`.
    pub fn new(node_name: &str, node_ip: IpAddr, credentials: KubeletCredentials) -> KubeletOptions {
        KubeletOptions {
            node_name: node_name.to_owned(),
            node_ip,
            credentials,
            server_tls_bootstrap: true,
            network: None,
            port: None,
        }
    }
}

/// A kubelet and the fake container runtime it uses (fake-cri), with their directory. Ended (and
/// the directory removed) when dropped; fields drop in order: kubelet, runtime, its relay to the
/// apiserver and network namespace (when in a [`NodeNetwork`], where both run), directory.
///
/// The kubelet runs sandboxed so that it cannot touch the machine: in a [`NodeNetwork`] it first
/// joins that namespace (`nsenter`); when this process is root it is then
/// moved to an unprivileged user ([`SANDBOX_UID`]) with `setpriv`, then `unshare` gives it
/// a user namespace (in which it is root, mapped to that user) and a private mount namespace, in
/// which its own `var-lib` and `var-log` directories are bind-mounted over `/var/lib` and
/// `/var/log`. That is needed, not only prudent: the kubelet creates
/// `/var/lib/kubelet/device-plugins` and `/var/log/containers` whatever its configuration says,
/// bind-mounts its root directory onto itself with shared propagation, and, unless
/// `protectKernelDefaults` is set (which makes it exit when they differ), rewrites
/// `vm.overcommit_memory`, `kernel.panic` and `kernel.panic_on_oops`. In the user namespace such
/// writes fail, and the `KubeletInUserNamespace` feature gate makes it carry on.
///
/// The rest is configuration: cgroup v1 allowed (`failCgroupV1: false`), no QoS or
/// node-allocatable cgroups, swap allowed, no read-only port, the healthz port on 127.0.0.1, the
/// kubelet port on the node address (the kubelet refuses a loopback node IP, and the apiserver
/// connects to the node's InternalIP), anonymous requests allowed (`AlwaysAllow`).
#[derive(Debug)]
pub struct Kubelet {
    process: Supervised,
    runtime: Supervised,
    placement: Placement,
    node_name: String,
    address: SocketAddr,
    dir: TempDir,
}

impl Kubelet {
    /// The Node name it registers (and its host name).
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Where its HTTPS server (`port`) listens: the node address it reports as InternalIP.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its node addresses (`--node-ip`), each reported as an InternalIP.
    pub fn node_ips(&self) -> &[IpAddr] {
        &self.placement.node_ips
    }

    /// Its directory, holding everything it writes (removed when it is dropped).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its certificate directory (`--cert-dir`).
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// The serving certificate (and key) it uses, PEM, once a serving CSR of it has been issued;
    /// `None` before, and always without `serverTLSBootstrap`.
    pub fn serving_certificate_pem(&self) -> Option<String> {
        std::fs::read_to_string(self.cert_dir().join("kubelet-server-current.pem")).ok()
    }

    /// The client certificate (and key) it obtained by TLS bootstrapping, PEM; `None` before, and
    /// always for [`KubeletCredentials::NodeCertificate`].
    pub fn client_certificate_pem(&self) -> Option<String> {
        std::fs::read_to_string(self.cert_dir().join("kubelet-client-current.pem")).ok()
    }

    /// Everything the kubelet logged so far (`--v=2`).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default()
    }

    /// Process ids of the kubelet and fake-cri, for leak checks.
    pub fn process_ids(&self) -> Vec<u32> {
        vec![self.process.id(), self.runtime.id()]
    }
}

/// The machine's own address on its default route (the address a kubelet picks when given none),
/// for [`crate::ControlPlane::start_kubelet`]: the kubelet refuses loopback node addresses.
pub fn host_address() -> Result<IpAddr, Error> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(Error::io("binding a UDP socket"))?;
    // Connecting a UDP socket sends nothing; it only chooses the route and so the source address.
    socket
        .connect((Ipv4Addr::new(203, 0, 113, 1), 9))
        .map_err(Error::io("finding the default route (a kubelet needs a non-loopback address)"))?;
    let address = socket.local_addr().map_err(Error::io("reading the default route's address"))?.ip();
    if address.is_loopback() || address.is_unspecified() {
        return Err(Error::Unexpected(format!("the default route's address {address} cannot be a node address")));
    }
    Ok(address)
}

/// Starts fake-cri and the kubelet `options` describes against the apiserver at `server`, in a new
/// directory, and waits until the kubelet's `/healthz` answers `ok`.
pub(crate) async fn start(
    tools: &KubeletTools,
    server: &str,
    pki: &PkiFiles,
    options: &KubeletOptions,
) -> Result<Kubelet, Error> {
    let KubeletOptions { node_name, credentials, .. } = options;
    let placement = Placement::new(options, server)?;
    let (server, tls_server_name) = (placement.server.as_str(), placement.tls_server_name.as_deref());
    let (dir, ca) = node_files::directory(
        "testenv-kubelet-",
        &["pki", "root", "var-lib", "var-log", "pod-logs", "volume-plugins"],
        pki,
    )?;
    let path = dir.path();
    let kubeconfig_path = path.join("kubeconfig");
    let mut args = vec![
        format!("--config={}", path.join("config.json").display()),
        format!("--kubeconfig={}", kubeconfig_path.display()),
        format!("--root-dir={}", path.join("root").display()),
        format!("--cert-dir={}", path.join("pki").display()),
        format!("--hostname-override={node_name}"),
        placement.node_ip_flag(),
        "--v=2".to_owned(),
    ];
    match credentials {
        KubeletCredentials::NodeCertificate => {
            let user = format!("system:node:{node_name}");
            let apiserver = Server { url: server, tls_server_name };
            write_credentials(pki, &ca, &apiserver, (&user, "system:nodes"), &kubeconfig_path)?;
        }
        KubeletCredentials::BootstrapToken(token) => {
            let user = AuthInfo { token: Some(SecretString::from(token.clone())), ..AuthInfo::default() };
            let bootstrap = path.join("bootstrap-kubeconfig");
            kubeconfig::write(&kubeconfig::for_user(server, &ca, user, tls_server_name), &bootstrap)?;
            args.push(format!("--bootstrap-kubeconfig={}", bootstrap.display()));
        }
    }
    let port = match options.port {
        Some(port) => port,
        None => free_port()?,
    };
    let healthz_port = free_port()?;
    let socket = path.join("cri.sock");
    let config = configuration(path, &ca, &socket, options, &placement, (port, healthz_port));
    write(&path.join("config.json"), &config.to_string())?;
    let privileged = running_as_root()?;
    if privileged {
        give_to_sandbox_user(path)?;
    }
    // The sandbox user may not be able to reach the tools directory (under root's home, say). Linked
    // after the hand-over, so the cached binaries keep their owner.
    let kubelet = link_or_copy(&tools.kubelet, &path.join("kubelet"))?;
    let fake_cri = link_or_copy(&tools.fake_cri, &path.join("fake-cri"))?;

    let runtime_args = sandboxed(privileged, false, &fake_cri, &[format!("--socket={}", socket.display())], path);
    let runtime_args = placement.entered(runtime_args);
    let mut runtime =
        Supervised::spawn("fake-cri", &runtime_args.0, &runtime_args.1, &path.join("fake-cri.log"), None)?;
    wait_for_socket(&mut runtime, &socket).await?;
    let (program, args) = placement.entered(sandboxed(privileged, true, &kubelet, &args, path));
    let mut process = Supervised::spawn("kubelet", &program, &args, &path.join("kubelet.log"), Some(path))?;
    wait_healthy(&mut process, &placement, healthz_port).await?;
    let address = SocketAddr::new(options.node_ip, port);
    Ok(Kubelet { process, runtime, placement, node_name: node_name.clone(), address, dir })
}

/// Paths of the binaries a kubelet needs.
#[derive(Debug, Clone)]
pub(crate) struct KubeletTools {
    pub(crate) kubelet: PathBuf,
    pub(crate) fake_cri: PathBuf,
}

/// The KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`) of a test kubelet in `dir`.
fn configuration(
    dir: &Path,
    ca: &Path,
    socket: &Path,
    options: &KubeletOptions,
    placement: &Placement,
    (port, healthz_port): (u16, u16),
) -> serde_json::Value {
    let endpoint = format!("unix://{}", socket.display());
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": placement.listen.to_string(),
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": placement.healthz.to_string(),
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": true},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": ca.display().to_string()},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "serverTLSBootstrap": options.server_tls_bootstrap,
        "rotateCertificates": matches!(options.credentials, KubeletCredentials::BootstrapToken(_)),
        "failCgroupV1": false,
        "cgroupsPerQOS": false,
        "cgroupDriver": "cgroupfs",
        "enforceNodeAllocatable": [],
        "failSwapOn": false,
        "oomScoreAdj": 0,
        "localStorageCapacityIsolation": false,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "podLogsDir": dir.join("pod-logs").display().to_string(),
        "volumePluginDir": dir.join("volume-plugins").display().to_string(),
        "resolvConf": "",
        "featureGates": {"KubeletInUserNamespace": true},
    })
}

/// The program and arguments that run `binary args` as the sandbox user (when this process is
/// root) and, for the kubelet (`namespaces`), in its own user and mount namespaces.
fn sandboxed(privileged: bool, namespaces: bool, binary: &Path, args: &[String], dir: &Path) -> (PathBuf, Vec<String>) {
    let mut command: Vec<String> = Vec::new();
    if privileged {
        command.extend([
            "setpriv".to_owned(),
            format!("--reuid={SANDBOX_UID}"),
            format!("--regid={SANDBOX_UID}"),
            "--clear-groups".to_owned(),
        ]);
    }
    if namespaces {
        command.extend(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", SANDBOX, "testenv-kubelet"]
                .map(str::to_owned),
        );
        command.push(dir.display().to_string());
    }
    command.push(binary.display().to_string());
    command.extend_from_slice(args);
    let program = PathBuf::from(command.remove(0));
    (program, command)
}

/// Whether this process runs as root (its effective user id, from `/proc/self/status`).
pub fn running_as_root() -> Result<bool, Error> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(Error::io("reading /proc/self/status"))?;
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .ok_or_else(|| Error::Unexpected("no Uid line in /proc/self/status".to_owned()))?;
    Ok(effective == "0")
}

/// Hard-links (or, across file systems, copies) the file `from` points at to `to`; returns `to`.
fn link_or_copy(from: &Path, to: &Path) -> Result<PathBuf, Error> {
    let from = from.canonicalize().map_err(Error::io(format!("resolving {}", from.display())))?;
    if std::fs::hard_link(&from, to).is_err() {
        std::fs::copy(&from, to).map_err(Error::io(format!("copying {} to {}", from.display(), to.display())))?;
    }
    Ok(to.to_owned())
}

/// Makes `dir` and everything in it belong to [`SANDBOX_UID`].
fn give_to_sandbox_user(dir: &Path) -> Result<(), Error> {
    std::os::unix::fs::chown(dir, Some(SANDBOX_UID), Some(SANDBOX_UID))
        .map_err(Error::io(format!("handing {} to the kubelet's user", dir.display())))?;
    let entries = std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(Error::io(format!("listing {}", dir.display())))?;
        let file_type = entry.file_type().map_err(Error::io(format!("listing {}", dir.display())))?;
        if file_type.is_dir() {
            give_to_sandbox_user(&entry.path())?;
        } else {
            std::os::unix::fs::chown(entry.path(), Some(SANDBOX_UID), Some(SANDBOX_UID))
                .map_err(Error::io(format!("handing {} to the kubelet's user", entry.path().display())))?;
        }
    }
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(Error::io(format!("writing {}", path.display())))
}

/// Waits until fake-cri has created its socket.
async fn wait_for_socket(process: &mut Supervised, socket: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !socket.exists() {
        if let Some(status) = process.exited() {
            return Err(process.start_error(format!("exited with {status}")));
        }
        if Instant::now() > deadline {
            return Err(process.start_error(format!("no socket {} after {START_TIMEOUT:?}", socket.display())));
        }
        sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Waits until the kubelet's `/healthz` on `port` answers `ok`.
async fn wait_healthy(process: &mut Supervised, placement: &Placement, port: u16) -> Result<(), Error> {
    process.wait_healthy(START_TIMEOUT, || placement.healthz(port)).await
}
