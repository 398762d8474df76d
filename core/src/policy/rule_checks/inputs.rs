//! The variables a rule reads: `request`, `resolved`, `node` and `machine`, built from the
//! request and the evidence already gathered.

use std::sync::Arc;

use cel::{Context, Env};
use serde_json::{Value as Json, json};

use crate::csr::CsrFacts;
use crate::policy::evidence::{Evidence, Lookup};
use crate::policy::identity::NODE_USER_PREFIX;
use crate::policy::ports::{MachineInfo, Resolution};
use crate::policy::reason::Reason;
use crate::policy::report::Failure;
use crate::policy::{Submission, machine_checks};

use crate::policy::user_rules::UserRules;

use super::values;

/// The values of a rule's variables, as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleInputs {
    request: Json,
    resolved: Json,
    node: Json,
    machine: Json,
}

impl RuleInputs {
    /// The variables for a CSR whose built-in checks all passed: `request` from `sub` and
    /// `facts`; `resolved` from the DNS answers; `node` (read only when a rule mentions it)
    /// the Node's projection or null; `machine` the Machine matched for this CSR (by nodeRef
    /// for a serving CSR, by InternalDNS for a node-client one) or null. A Node that could not
    /// be read is a retry; one too large for the rules, a deny.
    pub(crate) fn new(
        sub: &Submission,
        facts: &CsrFacts,
        evidence: Option<&Evidence>,
        rules: &UserRules,
        client: bool,
    ) -> Result<RuleInputs, Failure> {
        let common_name = facts.common_names.first().map(String::as_str).unwrap_or_default();
        let node_name = common_name.strip_prefix(NODE_USER_PREFIX).unwrap_or(common_name);
        let dns_names: Vec<String> = facts.dns_names.iter().map(|name| name.to_ascii_lowercase()).collect();
        let request = json!({
            "nodeName": node_name,
            "username": sub.username,
            "groups": sub.groups,
            "dnsNames": dns_names,
            "ipAddresses": facts.ip_addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "usages": sub.usages,
            "expirationSeconds": sub.expiration_seconds,
            "signerName": sub.signer_name,
        });
        let resolved = evidence.map(|evidence| &evidence.dns).into_iter().flatten().filter_map(|(name, answer)| {
            let Resolution::Addresses(addresses) = answer else { return None };
            let canonical = addresses.iter().map(|address| address.to_canonical().to_string());
            Some((name.clone(), json!(canonical.collect::<Vec<_>>())))
        });
        let node = match evidence.map(|evidence| &evidence.node) {
            _ if !rules.read_node() => Json::Null,
            Some(Some(Lookup::Found(node))) => match node.object.as_deref().map(values::node_projection) {
                None => Json::Null,
                Some(Some(projection)) => projection,
                Some(None) => {
                    return Err(Failure::deny(
                        Reason::RuleFailed,
                        format!(
                            "Node {node_name:?} is too large for the rules: its projection takes more than {} bytes",
                            values::MAX_NODE_BYTES
                        ),
                    ));
                }
            },
            Some(Some(Lookup::Missing)) => Json::Null,
            Some(Some(Lookup::Failed(error))) => {
                return Err(Failure::retry(
                    Reason::ClusterUnavailable,
                    format!("cannot read Node {node_name:?}: {error}"),
                ));
            }
            _ => {
                return Err(Failure::retry(
                    Reason::ClusterUnavailable,
                    format!("Node {node_name:?} was not looked up"),
                ));
            }
        };
        let machine = evidence
            .filter(|_| rules.read_machine())
            .and_then(|evidence| matched_machine(evidence, node_name, client))
            .and_then(|machine| machine.object.as_deref().cloned())
            .unwrap_or(Json::Null);
        Ok(RuleInputs { request, resolved: Json::Object(resolved.collect()), node, machine })
    }

    /// A CEL context binding the four variables.
    pub(crate) fn context(self, env: Arc<Env>) -> Context<'static, 'static> {
        let mut context = Context::with_env(env);
        for (name, value) in
            [("request", self.request), ("resolved", self.resolved), ("node", self.node), ("machine", self.machine)]
        {
            context.add_variable_from_value(name, values::to_cel(&value));
        }
        context
    }
}

fn matched_machine<'a>(evidence: &'a Evidence, node: &str, client: bool) -> Option<&'a MachineInfo> {
    let machines = machine_checks::machines(&evidence.machines).ok()?;
    let matched = if client {
        machine_checks::machine_named(machines, node)
    } else {
        machine_checks::machine_of_node(machines, node)
    };
    matched.ok()
}
