//! Machine-mode flags: which Machine APIs to read, where, the node-client bootstrap rules and the
//! kubelet-serving CA that evidences serving renewals.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;

use super::{ConfigError, Flag};
use crate::kubelet_tls::KubeletServingCa;
use crate::kubernetes::machines::{MachineApi, MachineSource};
use crate::policy::{Bootstrapper, MachinePolicy, NODE_USER_PREFIX};
use crate::values::{Checked, ValueError, given, list, namespace_or_empty, number, path, shared};

/// OpenShift's node-bootstrapper ServiceAccount.
const DEFAULT_BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
/// The groups the apiserver gives OpenShift's node-bootstrapper.
const DEFAULT_BOOTSTRAPPER_GROUPS: &str =
    "system:serviceaccounts:openshift-machine-config-operator,system:serviceaccounts,system:authenticated";

/// Machine-mode flags; every flag also reads an env var. Setting `--machine-api` turns it on.
#[derive(Debug, Clone, Args)]
#[command(mut_args(shared))]
pub struct MachineArgs {
    /// Machine API to read, GROUP/VERSION: machine.openshift.io/v1beta1 or cluster.x-k8s.io/v1beta1 (repeatable)
    #[arg(long = "machine-api", env = "MACHINE_API", value_delimiter = ',', value_parser = Checked(machine_api))]
    pub machine_apis: Vec<MachineApi>,
    /// Namespace of the Machines [default: all namespaces]
    #[arg(long, env = "MACHINE_NAMESPACE", value_parser = Checked(namespace_or_empty))]
    pub machine_namespace: Option<String>,
    /// Kubeconfig of the cluster holding the Machines [default: the CSRs' cluster]
    #[arg(long, env = "MACHINE_KUBECONFIG", value_name = "PATH", value_parser = Checked(path))]
    pub machine_kubeconfig: Option<PathBuf>,
    /// Approve node-client bootstrap CSRs in machine mode
    #[arg(long, env = "NODE_CLIENT_APPROVAL", default_value = "true")]
    pub node_client_approval: bool,
    /// Username of the bootstrap identity (OpenShift's node-bootstrapper by default); a trailing * makes it a prefix
    #[arg(long, env = "BOOTSTRAPPER_USERNAME", default_value = DEFAULT_BOOTSTRAPPER, value_parser = Checked(bootstrapper))]
    pub bootstrapper_username: Bootstrapper,
    /// Exact comma-separated groups of the bootstrap identity (OpenShift's by default)
    #[arg(long, env = "BOOTSTRAPPER_GROUPS", default_value = DEFAULT_BOOTSTRAPPER_GROUPS, value_parser = Checked(groups))]
    pub bootstrapper_groups: BTreeSet<String>,
    /// Machine-mode approvals stop while pending node CSRs exceed max(Machines, Nodes) + this, 0..=10000
    #[arg(long, env = "MAX_PENDING_DELTA", default_value = "100", value_parser = number::<u32>(0..=10_000))]
    pub max_pending_delta: u32,
    /// OpenShift machine-approver-config file (nodeClientCert.disabled)
    #[arg(long, env = "MACHINE_APPROVER_CONFIG", value_name = "FILE", value_parser = Checked(path))]
    pub machine_approver_config: Option<PathBuf>,
    /// PEM bundle of the kubelet-serving CA: a serving CSR of a node no Machine claims is approved when it renews the certificate its kubelet serves [default: no renewals]
    #[arg(long, env = "KUBELET_SERVING_CA_FILE", value_name = "FILE", value_parser = Checked(kubelet_serving_ca))]
    pub kubelet_serving_ca_file: Option<KubeletServingCa>,
    /// The one port a renewal dials a kubelet at; a Node advertising another kubelet port is not dialled, 1..=65535
    #[arg(long, env = "KUBELET_PORT", default_value = "10250", value_parser = number::<u16>(1..=65_535))]
    pub kubelet_port: u16,
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
    /// The machine-mode rules and where Machines are read from; `None` when machine mode is off.
    /// The approver-config file is read here, the one error left after clap has read every value.
    pub fn validate(self) -> Result<Option<(MachinePolicy, MachineSource)>, ConfigError> {
        if self.machine_apis.is_empty() {
            return Ok(None);
        }
        let (mut apis, mut seen) = (self.machine_apis, BTreeSet::new());
        apis.retain(|api| seen.insert(*api));
        let mut client_approval = self.node_client_approval;
        if let Some(path) = given(self.machine_approver_config) {
            client_approval &= !node_client_cert_disabled(&path).map_err(|problem| ConfigError {
                flag: Flag::MachineApproverConfig,
                value: path.display().to_string(),
                problem: problem.into(),
            })?;
        }
        let rules = MachinePolicy {
            client_approval,
            bootstrapper: self.bootstrapper_username,
            bootstrapper_groups: self.bootstrapper_groups,
            max_pending_delta: self.max_pending_delta,
            serving_renewal: self.kubelet_serving_ca_file.is_some(),
        };
        let source = MachineSource {
            apis,
            namespace: given(self.machine_namespace),
            kubeconfig: given(self.machine_kubeconfig),
            rules: rules.clone(),
            kubelet_ca: self.kubelet_serving_ca_file,
            kubelet_port: self.kubelet_port,
            keep_objects: false,
        };
        Ok(Some((rules, source)))
    }
}

/// Whether OpenShift's machine-approver-config at `path` turns node-client approval off.
fn node_client_cert_disabled(path: &std::path::Path) -> Result<bool, ValueError> {
    let text = std::fs::read_to_string(path)?;
    if text.trim().is_empty() {
        return Ok(false);
    }
    let file: ApproverConfigFile =
        serde_saphyr::from_str(&text).map_err(|error| ValueError::ApproverConfig(Box::new(error)))?;
    Ok(file.node_client_cert.disabled)
}

/// One Machine API, as `GROUP/VERSION`.
fn machine_api(text: &str) -> Result<MachineApi, ValueError> {
    let entry = text.trim();
    let api = MachineApi::ALL.into_iter().find(|api| api.api_version() == entry);
    api.ok_or_else(|| ValueError::NotMachineApi(entry.to_owned()))
}

/// The bootstrap identity: a username, or a prefix ending in `:*` that matches no node identity.
fn bootstrapper(text: &str) -> Result<Bootstrapper, ValueError> {
    let text = text.trim();
    if text.starts_with(NODE_USER_PREFIX) || text == "*" {
        return Err(ValueError::NodeIdentity);
    }
    match text.strip_suffix('*') {
        Some(prefix) if NODE_USER_PREFIX.starts_with(prefix) => Err(ValueError::NodePrefix(prefix.to_owned())),
        Some(prefix) if prefix.ends_with(':') && prefix.len() > 1 => Ok(Bootstrapper::Prefix(prefix.to_owned())),
        Some(_) => Err(ValueError::PrefixWithoutColon),
        None if text.is_empty() || text.contains('*') => Err(ValueError::NotBootstrapper),
        None => Ok(Bootstrapper::Exact(text.to_owned())),
    }
}

/// The kubelet-serving CA bundle, read (and every certificate in it checked) at start.
fn kubelet_serving_ca(text: &str) -> Result<KubeletServingCa, ValueError> {
    KubeletServingCa::read(std::path::Path::new(text)).map_err(ValueError::from)
}

/// Comma-separated group names.
fn groups(text: &str) -> Result<BTreeSet<String>, ValueError> {
    list(text, |group| Ok(group.to_owned())).map(BTreeSet::from_iter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::reading::read;

    #[test]
    fn bootstrapper_prefixes_need_a_colon_and_never_match_nodes() {
        let bootstrapper_of = bootstrapper;
        assert_eq!(bootstrapper_of("system:bootstrap:*").unwrap(), Bootstrapper::Prefix("system:bootstrap:".into()));
        assert_eq!(bootstrapper_of("ci:*").unwrap(), Bootstrapper::Prefix("ci:".into()));
        for bad in ["system:*x", "system:node:*", "system:*", "system:node:x", "sys*", "*", "", "ci*", ":*"] {
            assert!(bootstrapper_of(bad).is_err(), "{bad}");
        }
        let prefix = Bootstrapper::Prefix("system:bootstrap:".into());
        assert!(prefix.matches("system:bootstrap:abcdef"));
        assert!(!prefix.matches("system:bootstrap:"));
        assert!(!prefix.matches("system:node:a"));
    }

    #[test]
    fn machine_mode_is_on_with_an_api_and_reads_each_api_once() {
        assert!(read::<MachineArgs>(&[]).unwrap().validate().unwrap().is_none());
        let args = read::<MachineArgs>(&[
            "--machine-api=cluster.x-k8s.io/v1beta1,machine.openshift.io/v1beta1",
            "--machine-api= cluster.x-k8s.io/v1beta1",
        ]);
        let (rules, source) = args.unwrap().validate().unwrap().unwrap();
        assert_eq!(source.apis, vec![MachineApi::ClusterApi, MachineApi::OpenShift]);
        assert_eq!((source.namespace, rules.max_pending_delta, rules.client_approval), (None, 100, true));
        assert_eq!(rules.bootstrapper, Bootstrapper::Exact(DEFAULT_BOOTSTRAPPER.into()));
        let namespace = |value: &str| {
            let args = read::<MachineArgs>(&["--machine-api=cluster.x-k8s.io/v1beta1", value]).unwrap();
            args.validate().unwrap().unwrap().1.namespace
        };
        assert_eq!(namespace("--machine-namespace=capi"), Some("capi".into()));
        assert_eq!(namespace("--machine-namespace="), None, "empty: all namespaces");
    }
}
