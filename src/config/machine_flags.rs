//! Machine-mode flags: which Machine APIs to read, where, and the node-client bootstrap rules.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;

use super::ConfigError;
use super::flags::{Field, field, is_dns_label};
use crate::policy::{Bootstrapper, MachinePolicy, NODE_USER_PREFIX};

/// OpenShift's node-bootstrapper ServiceAccount.
const DEFAULT_BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
/// The groups the apiserver gives OpenShift's node-bootstrapper.
const DEFAULT_BOOTSTRAPPER_GROUPS: &str =
    "system:serviceaccounts:openshift-machine-config-operator,system:serviceaccounts,system:authenticated";

/// Machine-mode flags; every flag also reads an env var. Setting `--machine-api` turns it on.
#[derive(Debug, Clone, Default, Args)]
pub struct MachineArgs {
    /// Machine API to read, GROUP/VERSION: machine.openshift.io/v1beta1 or cluster.x-k8s.io/v1beta1 (repeatable)
    #[arg(long = "machine-api", global = true, env = "MACHINE_API", value_delimiter = ',')]
    pub machine_apis: Vec<String>,
    /// Namespace of the Machines [default: all namespaces]
    #[arg(long, global = true, env = "MACHINE_NAMESPACE")]
    pub machine_namespace: Option<String>,
    /// Kubeconfig of the cluster holding the Machines [default: the CSRs' cluster]
    #[arg(long, global = true, env = "MACHINE_KUBECONFIG", value_name = "PATH")]
    pub machine_kubeconfig: Option<String>,
    /// Approve node-client bootstrap CSRs in machine mode [default: true]
    #[arg(long, global = true, env = "NODE_CLIENT_APPROVAL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub node_client_approval: Option<String>,
    /// Username of the bootstrap identity; a trailing * makes it a prefix [default: OpenShift's node-bootstrapper]
    #[arg(long, global = true, env = "BOOTSTRAPPER_USERNAME")]
    pub bootstrapper_username: Option<String>,
    /// Exact comma-separated groups of the bootstrap identity [default: OpenShift's]
    #[arg(long, global = true, env = "BOOTSTRAPPER_GROUPS")]
    pub bootstrapper_groups: Option<String>,
    /// Machine-mode approvals stop while pending node CSRs exceed max(Machines, Nodes) + this, 0..=10000 [default: 100]
    #[arg(long, global = true, env = "MAX_PENDING_DELTA")]
    pub max_pending_delta: Option<String>,
    /// OpenShift machine-approver-config file (nodeClientCert.disabled)
    #[arg(long, global = true, env = "MACHINE_APPROVER_CONFIG", value_name = "FILE")]
    pub machine_approver_config: Option<String>,
}

/// A Machine API the controller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MachineApi {
    /// OpenShift's `machine.openshift.io/v1beta1`.
    OpenShift,
    /// Cluster API's `cluster.x-k8s.io/v1beta1`.
    ClusterApi,
}

impl MachineApi {
    /// Every supported API.
    pub const ALL: [MachineApi; 2] = [MachineApi::OpenShift, MachineApi::ClusterApi];

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            MachineApi::OpenShift => "machine.openshift.io",
            MachineApi::ClusterApi => "cluster.x-k8s.io",
        }
    }

    /// `GROUP/VERSION`.
    pub fn api_version(self) -> &'static str {
        match self {
            MachineApi::OpenShift => "machine.openshift.io/v1beta1",
            MachineApi::ClusterApi => "cluster.x-k8s.io/v1beta1",
        }
    }
}

/// Where Machines are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSource {
    /// The APIs to read.
    pub apis: Vec<MachineApi>,
    /// Their namespace; `None` reads all.
    pub namespace: Option<String>,
    /// The cluster holding them, if not the CSRs' cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The machine-mode rules, which the pending brake's count reads.
    pub rules: MachinePolicy,
}

/// The part of OpenShift's machine-approver-config this approver reads.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApproverConfigFile {
    #[serde(default)]
    node_client_cert: NodeClientCert,
}

#[derive(Debug, Default, serde::Deserialize)]
struct NodeClientCert {
    #[serde(default)]
    disabled: bool,
}

impl MachineArgs {
    /// Validates every value; `None` when machine mode is off.
    pub fn validate(&self) -> Result<Option<(MachinePolicy, MachineSource)>, ConfigError> {
        if self.machine_apis.is_empty() {
            return Ok(None);
        }
        let all = self.machine_apis.join(",");
        let mut apis = Vec::new();
        for entry in &self.machine_apis {
            let entry = entry.trim();
            let api = MachineApi::ALL.into_iter().find(|api| api.api_version() == entry).ok_or_else(|| {
                field!(self.machine_apis)
                    .error(&all, format!("{entry:?} is not machine.openshift.io/v1beta1 or cluster.x-k8s.io/v1beta1"))
            })?;
            if !apis.contains(&api) {
                apis.push(api);
            }
        }
        let namespace = match self.machine_namespace.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(ns) if is_dns_label(ns) => Some(ns.to_owned()),
            Some(ns) => return Err(field!(self.machine_namespace).error(ns, "expected a namespace name")),
        };
        let mut client_approval = field!(self.node_client_approval).boolean(true)?;
        if let Some(path) = field!(self.machine_approver_config).path() {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| field!(self.machine_approver_config).error(&shown, format!("cannot read: {e}")))?;
            let file: ApproverConfigFile = if text.trim().is_empty() {
                ApproverConfigFile::default()
            } else {
                serde_saphyr::from_str(&text)
                    .map_err(|e| field!(self.machine_approver_config).error(&shown, e.to_string()))?
            };
            client_approval &= !file.node_client_cert.disabled;
        }
        let rules = MachinePolicy {
            client_approval,
            bootstrapper: bootstrapper(field!(self.bootstrapper_username))?,
            bootstrapper_groups: groups(field!(self.bootstrapper_groups))?,
            max_pending_delta: u32::try_from(field!(self.max_pending_delta).number(0..=10_000, 100)?).unwrap_or(100),
        };
        let source =
            MachineSource { apis, namespace, kubeconfig: field!(self.machine_kubeconfig).path(), rules: rules.clone() };
        Ok(Some((rules, source)))
    }
}

fn bootstrapper(field: Field<'_, Option<String>>) -> Result<Bootstrapper, ConfigError> {
    let text = field.text().map(str::trim).unwrap_or(DEFAULT_BOOTSTRAPPER);
    let invalid = |problem: &str| field.error(text, problem);
    if text.starts_with(NODE_USER_PREFIX) || text == "*" {
        return Err(invalid("must not match node identities (system:node:<name>)"));
    }
    match text.strip_suffix('*') {
        Some(prefix) if NODE_USER_PREFIX.starts_with(prefix) => Err(invalid(&format!(
            "the prefix {prefix:?} also matches node identities (system:node:<name>); name the bootstrap identity \
             more narrowly, e.g. system:bootstrap:*"
        ))),
        Some(prefix) if prefix.ends_with(':') && prefix.len() > 1 => Ok(Bootstrapper::Prefix(prefix.to_owned())),
        Some(_) => Err(invalid("a prefix must end with ':' before the '*', e.g. system:bootstrap:*")),
        None if text.is_empty() || text.contains('*') => Err(invalid("expected a username or a prefix ending in :*")),
        None => Ok(Bootstrapper::Exact(text.to_owned())),
    }
}

fn groups(field: Field<'_, Option<String>>) -> Result<BTreeSet<String>, ConfigError> {
    let text = field.text().unwrap_or(DEFAULT_BOOTSTRAPPER_GROUPS);
    text.split(',')
        .map(|group| {
            let group = group.trim();
            if group.is_empty() {
                Err(field.error(text, "empty entry in the comma-separated list"))
            } else {
                Ok(group.to_owned())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrapper_of(text: &str) -> Result<Bootstrapper, ConfigError> {
        let args = MachineArgs { bootstrapper_username: Some(text.to_owned()), ..MachineArgs::default() };
        bootstrapper(field!(args.bootstrapper_username))
    }

    #[test]
    fn bootstrapper_prefixes_need_a_colon_and_never_match_nodes() {
        assert_eq!(bootstrapper_of("system:bootstrap:*").unwrap(), Bootstrapper::Prefix("system:bootstrap:".into()));
        assert!(bootstrapper_of("system:*x").is_err());
        assert!(bootstrapper_of("system:node:*").is_err());
        assert!(bootstrapper_of("system:*").is_err());
        assert!(bootstrapper_of("system:node:x").is_err());
        assert!(bootstrapper_of("sys*").is_err());
        let prefix = Bootstrapper::Prefix("system:bootstrap:".into());
        assert!(prefix.matches("system:bootstrap:abcdef"));
        assert!(!prefix.matches("system:bootstrap:"));
        assert!(!prefix.matches("system:node:a"));
    }
}
