//! The validated rules the decision core applies: what the flags turn into.

use std::collections::BTreeSet;
use std::time::Duration;

use ipnet::IpNet;
use regex::Regex;

use super::user_rules::UserRules;

/// How a DNS SAN is bound to the node name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostnameMatch {
    /// The SAN equals the node name or starts with the node name followed by `.`.
    Strict,
    /// The SAN starts with the node name as a plain string (the Go approver's rule).
    Prefix,
}

/// The validated policy settings the decision core reads.
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    /// Every DNS SAN must match this regex (used as written).
    pub provider_regex: Regex,
    /// Every IP SAN and resolved address must lie in one of these prefixes.
    pub ip_prefixes: Vec<IpNet>,
    /// Largest accepted `spec.expirationSeconds`.
    pub max_expiration_secs: i64,
    /// Largest accepted number of DNS SANs.
    pub allowed_dns_names: usize,
    /// Largest accepted number of IP SANs.
    pub allowed_ip_addresses: usize,
    /// Skip DNS resolution of DNS SANs.
    pub bypass_dns_resolution: bool,
    /// Skip binding DNS SANs to the node name.
    pub bypass_hostname_check: bool,
    /// How DNS SANs are bound to the node name.
    pub hostname_match: HostnameMatch,
    /// Ignore, rather than deny, CSRs whose username is not `system:node:<name>`.
    pub ignore_non_system_node: bool,
    /// Hold, rather than deny, CSRs that fail a rule.
    pub skip_deny_step: bool,
    /// How long an unresolvable DNS name is retried before the CSR is denied.
    pub dns_grace_period: Duration,
    /// Require every SAN to be one of the Node's addresses or its name.
    pub verify_node_addresses: bool,
    /// The cluster's DNS domain, lowercase and without a trailing dot: DNS SANs under
    /// `svc.<cluster_domain>` are denied.
    pub cluster_domain: String,
    /// Machine-mode rules, when machine mode is on.
    pub machine: Option<MachinePolicy>,
    /// The rules of `--rules`, run after every built-in check passed.
    pub user_rules: UserRules,
}

/// Who the bootstrap identity is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrapper {
    /// Exactly this username.
    Exact(String),
    /// Any username starting with this (e.g. `system:bootstrap:` for kubeadm bootstrap tokens).
    Prefix(String),
}

impl Bootstrapper {
    /// True when `username` is the bootstrap identity.
    pub fn matches(&self, username: &str) -> bool {
        match self {
            Bootstrapper::Exact(exact) => username == exact,
            Bootstrapper::Prefix(prefix) => username.len() > prefix.len() && username.starts_with(prefix.as_str()),
        }
    }
}

/// The machine-mode rules the policy reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachinePolicy {
    /// Approve node-client bootstrap CSRs.
    pub client_approval: bool,
    /// The bootstrap identity.
    pub bootstrapper: Bootstrapper,
    /// Its exact groups.
    pub bootstrapper_groups: BTreeSet<String>,
    /// The pending brake's allowance over max(Machines, Nodes).
    pub max_pending_delta: u32,
    /// Approve a serving CSR of a node no Machine claims when it asks for exactly the names of
    /// the certificate its kubelet serves (`--kubelet-serving-ca-file` is set).
    pub serving_renewal: bool,
}
