//! The Kubernetes adapters: what reads from or writes to the apiserver. The watches (CSRs, the
//! Lease, Machines, Nodes, the `default/kubernetes` Service and its EndpointSlices) and the CSR
//! cache, the cluster view the decision core asks for evidence (with the dial of a node's
//! kubelet), leader election, and the controller's requests by path: a CSR read by name and the
//! approval write. The application around them (the controller, flags, `run`, `check`, the admin
//! endpoints, Events, metrics, logs) lives beside this module.

pub(crate) mod apiserver;
pub mod cluster;
pub(crate) mod connect;
pub mod csr_cache;
pub(crate) mod csr_ledger;
pub mod csr_name;
pub mod csr_object;
pub mod csr_uid;
pub mod decoded;
pub(crate) mod kube_watch;
pub(crate) mod kubelet_endpoint;
pub(crate) mod leader;
pub(crate) mod machines;
pub(crate) mod node_index;
pub mod node_object;
pub mod node_target;
pub mod object_fields;
pub mod request;
pub mod request_budget;
pub mod retry_after;
pub mod write;
