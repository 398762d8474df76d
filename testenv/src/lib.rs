//! A real etcd + kube-apiserver on 127.0.0.1 for tests and the local cluster (dev-only).
//!
//! [`ControlPlane::start`] starts a private control plane; [`ControlPlane::shared`] hands out one
//! per test process (or attaches to a running `local-cluster` named by [`ATTACH_ENV`]). Binaries
//! come from [`TOOLS_DIR_ENV`] or, when unset, from `scripts/build-tools.sh`, which builds them
//! once into a cache (the first build takes minutes; see the script), for the Kubernetes release
//! [`KUBERNETES_VERSION_ENV`] chooses (default: the newest supported one).
//!
//! ```no_run
//! # async fn demo() -> Result<(), testenv::Error> {
//! let control_plane = testenv::ControlPlane::shared().await?;
//! let node = control_plane
//!     .impersonated_client("system:node:worker-1", &["system:nodes"])
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! What runs: kube-apiserver with authorization `Node,RBAC`, the admission plugin
//! `ServiceAccount` off, a ServiceAccount token signing key, and an admin client certificate in
//! `system:masters`. kube-controller-manager runs only when asked for
//! ([`ControlPlane::start_signer`], [`ControlPlane::start_signer_issuing_for`],
//! [`ControlPlane::shared_with_signer`]), and then only its CSR signing controller, so approved
//! CSRs get certificates of the cluster CA. No other controller
//! runs: namespaces never finish deleting, and no `default` ServiceAccount appears by itself.
//!
//! [`ControlPlane::start_kubelet`] runs a real kubelet on Kubernetes' fake container runtime
//! (`fake-cri`), sandboxed in its own user and mount namespaces, with `serverTLSBootstrap: true`;
//! the apiserver verifies kubelet serving certificates with the cluster CA, and accepts bootstrap
//! tokens ([`ControlPlane::create_bootstrap_token`]) for TLS bootstrapping. A kubelet can run in a
//! [`NodeNetwork`], a network namespace of its own with IPv4, IPv6 or both from documentation ranges,
//! reaching the apiserver through a relay on the host end of its link.
//!
//! [`FaultProxy`] sits in front of the apiserver and fails approval writes, cuts watches, expires
//! their resourceVersion (410), holds requests up or sheds the reconcile's requests with 429 and
//! `Retry-After`, on command, counting what passes.
//!
//! [`Registry`] serves an OCI registry on loopback (`crane registry serve`) that the tests push an
//! image layout (by digest) and a chart (`helm push`) to, and a [`ContainerNode`] pulls from
//! ([`ContainerNodeOptions::registry`]); [`SigningKey`] signs and attests what is there with cosign
//! and verifies it, without the public Sigstore services.
//!
//! [`Oracle`] runs the Go tool `csr-oracle`, which reads a CSR's request bytes exactly as
//! kube-apiserver and the signer do.
//!
//! Children run in their own process groups and are ended when the [`ControlPlane`] is dropped and,
//! through a watchdog per child, when the test process dies in any way.

#![forbid(unsafe_code)]

mod bootstrap;
mod cluster_dns;
mod container_cluster;
mod container_node;
mod control_plane;
mod cosign;
mod error;
mod etcd;
mod fault_proxy;
mod kube_apiserver;
mod kube_controller_manager;
mod kube_scheduler;
mod kubeconfig;
mod kubelet;
mod node_files;
mod node_network;
mod objects;
mod oracle;
mod pki;
mod placement;
mod ports;
mod probe;
mod process;
mod registry;
mod relay;
mod shared;
mod tool_command;
mod tools;

pub use cluster_dns::ClusterDns;
pub use container_cluster::{ContainerCluster, ContainerClusterOptions};
pub use container_node::images::busybox as busybox_image;
pub use container_node::{ContainerNode, ContainerNodeOptions};
pub use control_plane::ControlPlane;
pub use cosign::{SigningKey, VerifyError};
pub use error::Error;
pub use fault_proxy::{Block, FIVE_DIGIT_YEAR_MARKER, FaultProxy, Reconciling, Seen, Write, WriteFault};
pub use kube_controller_manager::Signer;
pub use kube_scheduler::Scheduler;
pub use kubelet::{Kubelet, KubeletCredentials, KubeletOptions, SANDBOX_UID, host_address, running_as_root};
pub use node_network::{AddressFamilies, IPV4_RANGE, IPV6_RANGE, NodeNetwork};
pub use oracle::{GoView, Oracle};
pub use ports::free_port;
pub use probe::{is_forbidden, process_running};
pub use registry::{PushedChart, PushedImage, Registry};
pub use tools::{KUBERNETES_VERSION_ENV, TOOLS_DIR_ENV, build_only, kubernetes_version, tools_dir};

/// Environment variable naming the admin kubeconfig of a running control plane (for example one
/// started by `local-cluster`) that [`ControlPlane::shared`] attaches to instead of starting one.
pub const ATTACH_ENV: &str = "NODE_CSR_APPROVER_TESTENV_KUBECONFIG";
