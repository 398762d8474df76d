//! [`ControlPlane`]: etcd + kube-apiserver, kube-controller-manager's CSR signer on request, and
//! clients for the identities tests need.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use tempfile::TempDir;
use tokio::sync::Mutex;

use crate::container_node::{self, ContainerNode, ContainerNodeOptions, NodeTools};
use crate::etcd::{self, Etcd};
use crate::kube_apiserver::Launch;
use crate::kube_controller_manager::{self, Controllers, SIGNING_DURATION, Signer};
use crate::kube_scheduler::{self, Scheduler};
use crate::kubelet::{self, Kubelet, KubeletOptions, KubeletTools};
use crate::objects::create_if_missing;
use crate::pki::PkiFiles;
use crate::ports::free_port;
use crate::process::Supervised;
use crate::tools::{Tools, existing};
use crate::{Error, bootstrap, kubeconfig, pki};

/// How long an installed CRD may take to become established.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);

/// Field manager of the objects testenv applies.
const FIELD_MANAGER: &str = "testenv";

/// A kube-apiserver on 127.0.0.1 backed by its own etcd, or one attached to through a kubeconfig.
///
/// Dropping a started control plane ends its processes and removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    server_url: String,
    owned: Option<Owned>,
}

/// The processes and files of a control plane this process started. Fields drop in order:
/// apiserver, etcd, then the directory.
#[derive(Debug)]
struct Owned {
    apiserver: Mutex<Option<Supervised>>,
    launch: Launch,
    etcd: Etcd,
    pki: PkiFiles,
    kube_controller_manager: PathBuf,
    /// The apiserver's advertise address and port, when it has one.
    advertised: Option<SocketAddr>,
    tools_dir: PathBuf,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver in a new temporary directory and waits until the apiserver
    /// is ready and the `default` namespace exists. Builds the tools first if needed (see
    /// [`crate::tools_dir`]). On failure the error, including the tail of the failing
    /// component's log, is also printed to stderr.
    pub async fn start() -> Result<ControlPlane, Error> {
        Self::start_advertising(None).await
    }

    /// [`ControlPlane::start`], with the apiserver advertised on `address` when given
    /// (`--advertise-address`, as kubeadm sets it to the control-plane node's own address): its
    /// endpoint reconciler then lists `address` in the `default/kubernetes` EndpointSlice (it
    /// still listens on 127.0.0.1 only). Without it, that slice is not written.
    pub async fn start_advertising(address: Option<IpAddr>) -> Result<ControlPlane, Error> {
        let started = Self::start_owned(address, false).await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    /// A control plane for nodes that run containers ([`ControlPlane::start_container_node`]):
    /// advertised on `address`, where the `kubernetes` Service sends pods, and with the
    /// `ServiceAccount` admission plugin that gives pods their token (it needs the controller
    /// manager of [`ControlPlane::start_controller_manager`], which creates the ServiceAccounts).
    pub async fn start_for_containers(address: IpAddr) -> Result<ControlPlane, Error> {
        let started = Self::start_owned(Some(address), true).await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    async fn start_owned(advertise: Option<IpAddr>, pods_run: bool) -> Result<ControlPlane, Error> {
        let tools =
            tokio::task::spawn_blocking(Tools::locate).await.map_err(|error| Error::Tools(error.to_string()))??;
        let dir = tempfile::Builder::new()
            .prefix("testenv-")
            .tempdir()
            .map_err(Error::io("creating the control plane directory"))?;
        let pki = pki::write(dir.path())?;
        let etcd = etcd::start(&tools.etcd, dir.path()).await?;
        let port = free_port()?;
        let server_url = format!("https://127.0.0.1:{port}");
        let kubeconfig = kubeconfig::admin(&server_url, &pki);
        let kubeconfig_path = dir.path().join("kubeconfig");
        kubeconfig::write(&kubeconfig, &kubeconfig_path)?;
        let launch =
            Launch::new(&tools.kube_apiserver, dir.path(), port, &etcd.client_url, &pki, (advertise, pods_run));
        let apiserver = launch.start(&kubeconfig).await?;
        Ok(ControlPlane {
            kubeconfig,
            kubeconfig_path,
            server_url,
            owned: Some(Owned {
                apiserver: Mutex::new(Some(apiserver)),
                launch,
                etcd,
                pki,
                kube_controller_manager: tools.kube_controller_manager,
                advertised: advertise.map(|address| SocketAddr::new(address, port)),
                tools_dir: tools.dir,
                dir,
            }),
        })
    }

    /// Uses the running control plane whose admin kubeconfig is at `path` (for example the one
    /// `local-cluster` prints). Such a control plane cannot be restarted.
    pub fn attach(path: &Path) -> Result<ControlPlane, Error> {
        let kubeconfig = kubeconfig::read(path)?;
        Ok(ControlPlane {
            server_url: kubeconfig::server(&kubeconfig)?,
            kubeconfig,
            kubeconfig_path: path.to_owned(),
            owned: None,
        })
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// Path of the admin kubeconfig (client certificate in `system:masters`), for running a binary
    /// with `--kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The temporary directory holding certificates, logs (`etcd.log`, `kube-apiserver.log`,
    /// `kube-controller-manager.log`) and etcd's data; `None` when attached.
    pub fn state_dir(&self) -> Option<&Path> {
        self.owned.as_ref().map(|owned| owned.dir.path())
    }

    /// The cluster CA certificate (PEM): it issued the apiserver's serving certificate and the admin
    /// client certificate, and a [`Signer`] signs approved CSRs with it.
    pub fn ca_cert_pem(&self) -> Result<String, Error> {
        kubeconfig::ca_pem(&self.kubeconfig)
    }

    /// Starts kube-controller-manager running only the CSR signing controller against this
    /// control plane, as the admin, signing approved `kubernetes.io/*` CSRs with the cluster CA
    /// (certificates valid for at most a year), and waits until its `/healthz` answers. Dropping
    /// the [`Signer`] ends it. Two signers on one control plane race for every CSR (harmless but
    /// wasteful): on the shared control plane use [`ControlPlane::shared_with_signer`]. On failure
    /// the error, including the tail of its log, is also printed to stderr.
    pub async fn start_signer(&self) -> Result<Signer, Error> {
        self.start_kube_controller_manager(Controllers::Signing, SIGNING_DURATION, "start_signer").await
    }

    /// [`ControlPlane::start_signer`], issuing for at most `duration` (whole seconds:
    /// `--cluster-signing-duration`, which applies to every signer of kube-controller-manager;
    /// a CSR's `expirationSeconds` can only shorten it). Certificates shorter than 8 hours are
    /// valid from 5 minutes before they are signed until `duration` after; a kubelet renews its
    /// certificate at 70 to 90 % of that whole lifetime.
    pub async fn start_signer_issuing_for(&self, duration: Duration) -> Result<Signer, Error> {
        self.start_kube_controller_manager(Controllers::Signing, duration, "start_signer_issuing_for").await
    }

    /// Starts kube-controller-manager with its default controllers, as on a real cluster: the
    /// signer, Deployments and ReplicaSets, EndpointSlices, ServiceAccounts and the root CA
    /// ConfigMap pods mount, the garbage collector, the namespace and disruption controllers, and
    /// kubelet client CSR approval (`csrapproving`). Ended when the returned handle is dropped.
    pub async fn start_controller_manager(&self) -> Result<Signer, Error> {
        self.start_kube_controller_manager(Controllers::Default, SIGNING_DURATION, "start_controller_manager").await
    }

    async fn start_kube_controller_manager(
        &self,
        controllers: Controllers,
        signing_duration: Duration,
        what: &'static str,
    ) -> Result<Signer, Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned(what))?;
        let started = kube_controller_manager::start(
            &owned.kube_controller_manager,
            owned.dir.path(),
            (&self.kubeconfig, &self.kubeconfig_path),
            &owned.pki,
            controllers,
            signing_duration,
        )
        .await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    /// Starts kube-scheduler (the newest release's) and waits until its `/healthz` answers.
    pub async fn start_scheduler(&self) -> Result<Scheduler, Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned("start_scheduler"))?;
        let binary = existing(&owned.tools_dir, "kube-scheduler")?;
        let started =
            kube_scheduler::start(&binary, owned.dir.path(), (&self.kubeconfig, &self.kubeconfig_path), &owned.pki)
                .await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    /// Starts a node that runs containers as `options` says (see [`ContainerNode`]) and waits
    /// until its kubelet's `/healthz` answers. The control plane must have been started by
    /// [`ControlPlane::start_for_containers`]. On failure the error, including the tail of the
    /// node's log, is also printed to stderr.
    pub async fn start_container_node(&self, options: &ContainerNodeOptions) -> Result<ContainerNode, Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned("start_container_node"))?;
        let advertised = owned.advertised.ok_or_else(|| {
            Error::Unexpected("a container node needs a control plane from start_for_containers".to_owned())
        })?;
        let tools = NodeTools {
            kubelet: existing(&owned.tools_dir, "kubelet")?,
            kube_proxy: existing(&owned.tools_dir, "kube-proxy")?,
            pause: existing(&owned.tools_dir, "pause")?,
        };
        let started = container_node::start(&tools, &self.server_url, &owned.pki, options, advertised).await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    /// Starts a real kubelet (on fake-cri, Kubernetes' fake container runtime) as `options` says,
    /// and waits until its `/healthz` answers. It registers its Node with InternalIP
    /// `options.node_ip` (in a [`crate::NodeNetwork`], one InternalIP per address of the network),
    /// where the apiserver reaches it and verifies its serving certificate with the cluster CA. With `serverTLSBootstrap` it requests that certificate through a
    /// `kubernetes.io/kubelet-serving` CSR at once, and completes no TLS handshake until it is
    /// issued. It is sandboxed (see [`Kubelet`]); dropping it ends it and removes its directory. On
    /// failure the error, including the tail of its log, is also printed to stderr.
    pub async fn start_kubelet(&self, options: KubeletOptions) -> Result<Kubelet, Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned("start_kubelet"))?;
        let tools = KubeletTools {
            kubelet: existing(&owned.tools_dir, "kubelet")?,
            fake_cri: existing(&owned.tools_dir, "fake-cri")?,
        };
        let started = kubelet::start(&tools, &self.server_url, &owned.pki, &options).await;
        if let Err(error) = &started {
            eprintln!("testenv: {error}");
        }
        started
    }

    /// Creates a bootstrap token (a `bootstrap.kubernetes.io/token` Secret in `kube-system`, for
    /// authentication only, without expiration or extra groups), and binds the group
    /// `system:bootstrappers` to the built-in ClusterRole `system:node-bootstrapper`, as kubeadm
    /// does. The apiserver authenticates the token as `system:bootstrap:<id>` in
    /// `system:bootstrappers` and `system:authenticated`. Returns `<id>.<secret>`.
    pub async fn create_bootstrap_token(&self) -> Result<String, Error> {
        let client = self.admin_client().await?;
        bootstrap::create_token(&client).await
    }

    /// Process ids of etcd and kube-apiserver (empty when attached), for leak checks.
    pub async fn process_ids(&self) -> Vec<u32> {
        let Some(owned) = &self.owned else {
            return Vec::new();
        };
        let mut ids = vec![owned.etcd.process.id()];
        ids.extend(owned.apiserver.lock().await.as_ref().map(Supervised::id));
        ids
    }

    /// A client authenticated as the admin (`system:masters`).
    pub async fn admin_client(&self) -> Result<Client, Error> {
        kubeconfig::client(&self.kubeconfig, |_| {}).await
    }

    /// A client of the admin impersonating `user` with `groups`, so the apiserver authorizes and
    /// records requests as that identity (for example `system:node:worker-1` in `system:nodes`).
    pub async fn impersonated_client(&self, user: &str, groups: &[&str]) -> Result<Client, Error> {
        kubeconfig::client(&self.kubeconfig, |config| {
            config.auth_info.impersonate = Some(user.to_owned());
            config.auth_info.impersonate_groups =
                (!groups.is_empty()).then(|| groups.iter().map(|group| (*group).to_owned()).collect());
        })
        .await
    }

    /// A real token of ServiceAccount `namespace/name` from the TokenRequest API, valid for an
    /// hour. Creates the namespace and the ServiceAccount when missing.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, Error> {
        let client = self.admin_client().await?;
        create_if_missing(&Api::<Namespace>::all(client.clone()), namespace_object(namespace)).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        create_if_missing(&accounts, service_account_object(name)).await?;
        let request = TokenRequest::default();
        let issued = accounts.create_token_request(name, &PostParams::default(), &request).await?;
        issued
            .status
            .map(|status| status.token)
            .ok_or_else(|| Error::Unexpected(format!("no token issued for {namespace}/{name}")))
    }

    /// A client authenticated with a real token of ServiceAccount `namespace/name` (created when
    /// missing, see [`ControlPlane::service_account_token`]).
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Result<Client, Error> {
        let token = self.service_account_token(namespace, name).await?;
        kubeconfig::client(&kubeconfig::for_token(&self.kubeconfig, &token)?, |_| {}).await
    }

    /// Writes to `path` a kubeconfig for this cluster that authenticates with the bearer `token`.
    pub fn write_kubeconfig_for_token(&self, token: &str, path: &Path) -> Result<(), Error> {
        kubeconfig::write(&kubeconfig::for_token(&self.kubeconfig, token)?, path)
    }

    /// Applies the CRDs (server-side apply, so installing the same CRD twice is fine) and waits
    /// until each is established.
    pub async fn install_crds(&self, crds: Vec<CustomResourceDefinition>) -> Result<(), Error> {
        let api: Api<CustomResourceDefinition> = Api::all(self.admin_client().await?);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in &crds {
            api.patch(&crd.name_any(), &params, &Patch::Apply(crd)).await?;
        }
        for crd in &crds {
            let name = crd.name_any();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            tokio::time::timeout(CRD_TIMEOUT, established)
                .await
                .map_err(|_| Error::Timeout(format!("CRD {name} to be established")))?
                .map_err(|error| Error::Timeout(format!("CRD {name}: {error}")))?;
        }
        Ok(())
    }

    /// Stops kube-apiserver and starts it again on the same port and etcd, then waits until it is
    /// ready. Data survives. Do this on a control plane of your own ([`ControlPlane::start`]),
    /// never on the shared one, whose other users would see the outage.
    pub async fn restart_apiserver(&self) -> Result<(), Error> {
        self.owned.as_ref().ok_or(Error::NotOwned("restart_apiserver"))?;
        self.stop_apiserver().await?;
        self.start_apiserver().await
    }

    /// Stops kube-apiserver (SIGKILL to its process group) and returns once it is gone, so its port
    /// refuses connections; etcd and the data stay. Does nothing when it is stopped already. Only
    /// on a control plane of your own, as [`ControlPlane::restart_apiserver`].
    pub async fn stop_apiserver(&self) -> Result<(), Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned("stop_apiserver"))?;
        drop(owned.apiserver.lock().await.take());
        Ok(())
    }

    /// Starts kube-apiserver again after [`ControlPlane::stop_apiserver`], on the same port and
    /// etcd, and waits until it is ready. Does nothing when it runs. On failure the error, including
    /// the tail of its log, is also printed to stderr.
    pub async fn start_apiserver(&self) -> Result<(), Error> {
        let owned = self.owned.as_ref().ok_or(Error::NotOwned("start_apiserver"))?;
        let mut apiserver = owned.apiserver.lock().await;
        if apiserver.is_none() {
            let started = owned.launch.start(&self.kubeconfig).await;
            if let Err(error) = &started {
                eprintln!("testenv: {error}");
            }
            *apiserver = Some(started?);
        }
        Ok(())
    }

    /// The admin kubeconfig, for what testenv runs in front of the apiserver.
    pub(crate) fn admin_kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }
}

fn namespace_object(name: &str) -> Namespace {
    Namespace { metadata: named(name), ..Namespace::default() }
}

fn service_account_object(name: &str) -> ServiceAccount {
    ServiceAccount { metadata: named(name), ..ServiceAccount::default() }
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() }
}
