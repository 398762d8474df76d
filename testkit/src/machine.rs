//! Machine mode as the tests run it: an OpenShift-style bootstrapper and its groups, the machine
//! rules, and Machines created at one moment.

use std::sync::Arc;

use node_csr_approver_core::policy::{Bootstrapper, MachineInfo, MachinePolicy, NodeAddress, PolicyConfig};

/// The bootstrapper's username.
pub const BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";

/// The bootstrapper's groups.
pub const GROUPS: [&str; 3] =
    ["system:serviceaccounts:openshift-machine-config-operator", "system:serviceaccounts", "system:authenticated"];

/// When the Machines were created.
pub const MACHINE_CREATED: &str = "2026-01-01T00:00:00Z";

/// Client approval for [`BOOTSTRAPPER`] with [`GROUPS`], a brake at 100 pending, no serving
/// renewal.
pub fn rules() -> MachinePolicy {
    MachinePolicy {
        client_approval: true,
        bootstrapper: Bootstrapper::Exact(BOOTSTRAPPER.into()),
        bootstrapper_groups: GROUPS.iter().map(|g| (*g).to_owned()).collect(),
        max_pending_delta: 100,
        serving_renewal: false,
    }
}

/// The documented defaults ([`crate::policy::config`]) in machine mode with [`rules`].
pub fn machine_config() -> PolicyConfig {
    PolicyConfig { machine: Some(rules()), ..crate::policy::config() }
}

/// Machine `openshift-machine-api/m1` with these `(type, address)` pairs, created at
/// [`MACHINE_CREATED`], claiming the node `node_ref` if any.
pub fn machine(addresses: &[(&str, &str)], node_ref: Option<&str>) -> Arc<MachineInfo> {
    Arc::new(MachineInfo {
        id: "openshift-machine-api/m1".into(),
        created: Some(created()),
        node_ref: node_ref.map(str::to_owned),
        addresses: addresses.iter().map(|(k, a)| NodeAddress { kind: (*k).into(), address: (*a).into() }).collect(),
        object: None,
    })
}

/// The Machine of node `n1`: InternalDNS `n1`, Hostname `n1.nodes.example.com`, InternalIP
/// 10.0.0.11 and ExternalIP fd00::11.
pub fn n1_machine(node_ref: Option<&str>) -> Arc<MachineInfo> {
    machine(
        &[
            ("InternalDNS", "n1"),
            ("Hostname", "n1.nodes.example.com"),
            ("InternalIP", "10.0.0.11"),
            ("ExternalIP", "fd00::11"),
        ],
        node_ref,
    )
}

/// Five minutes after the Machines were created.
pub fn now() -> jiff::Timestamp {
    created() + jiff::SignedDuration::from_mins(5)
}

fn created() -> jiff::Timestamp {
    MACHINE_CREATED.parse().unwrap_or_else(|e| unreachable!("{MACHINE_CREATED}: {e}"))
}
