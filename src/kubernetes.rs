//! The Kubernetes adapters: everything that reads from or writes to the apiserver. The watches
//! (CSRs, the Lease, Machines, Nodes, the `default/kubernetes` Service and its EndpointSlices),
//! the cluster view the decision core asks for evidence (with the dial of a node's kubelet), leader election, and the controller that
//! writes each decision and its Event. The application around them (flags, `run`, `check`, the
//! admin endpoints, metrics, logs) lives beside this module and reaches the cluster only through it.

pub(crate) mod apiserver;
pub mod cluster;
pub(crate) mod connect;
pub mod controller;
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
pub(crate) mod node_addresses;
pub mod node_object;
pub mod object_fields;
