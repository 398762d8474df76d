//! The provider settings everything runs the approver with, the decision core's configuration
//! with the documented defaults, and a node's serving CSR as the core reads it.

use std::time::Duration;

use node_csr_approver_core::policy::{HostnameMatch, PolicyConfig, Submission};

use crate::csr::{SERVING_SIGNER, SERVING_USAGES};

/// The provider regex (`--provider-regex`) of the tests, the bench and the demo.
pub const REGEX: &str = r"^[a-z0-9-]+\.nodes\.example\.com$";

/// The provider prefixes (`--provider-ip-prefixes`) of the tests, the bench and the demo.
pub const PREFIXES: &str = "10.0.0.0/16";

/// The documented defaults, with DNS resolution bypassed, the regex [`REGEX`] and the prefixes
/// [`PREFIXES`] and fd00::/64.
pub fn config() -> PolicyConfig {
    PolicyConfig {
        provider_regex: regex::Regex::new(REGEX).unwrap_or_else(|e| unreachable!("{REGEX}: {e}")),
        ip_prefixes: vec![
            ipnet::IpNet::V4(ipnet::Ipv4Net::new_assert([10, 0, 0, 0].into(), 16)),
            ipnet::IpNet::V6(ipnet::Ipv6Net::new_assert([0xfd00, 0, 0, 0, 0, 0, 0, 0].into(), 64)),
        ],
        max_expiration_secs: 367 * 24 * 3600,
        allowed_dns_names: 1,
        allowed_ip_addresses: 16,
        bypass_dns_resolution: true,
        bypass_hostname_check: false,
        hostname_match: HostnameMatch::Strict,
        ignore_non_system_node: false,
        skip_deny_step: false,
        dns_grace_period: Duration::from_secs(300),
        verify_node_addresses: false,
        cluster_domain: "cluster.local".into(),
        machine: None,
        user_rules: Default::default(),
    }
}

/// When [`serving`]'s CSRs were created.
const CREATED: &str = "2026-01-01T00:00:00Z";

/// A pending kubelet-serving CSR from `system:node:<node>` carrying `request`.
pub fn serving(node: &str, request: &str) -> Submission {
    Submission {
        name: format!("csr-{node}"),
        created: Some(created()),
        signer_name: SERVING_SIGNER.into(),
        username: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: SERVING_USAGES.iter().map(|u| (*u).to_owned()).collect(),
        expiration_seconds: None,
        request: request.as_bytes().to_vec(),
        decided: None,
        approved: false,
    }
}

/// The time the age-based rules are evaluated at: `minutes` after [`serving`]'s creation time.
pub fn minutes_after_creation(minutes: i64) -> jiff::Timestamp {
    created() + jiff::SignedDuration::from_mins(minutes)
}

fn created() -> jiff::Timestamp {
    CREATED.parse().unwrap_or_else(|e| unreachable!("{CREATED}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_uses_the_shared_regex_and_prefixes() {
        let config = config();
        assert_eq!(config.provider_regex.as_str(), REGEX);
        assert_eq!(config.ip_prefixes[0].to_string(), PREFIXES);
        assert_eq!(config.ip_prefixes[1].to_string(), "fd00::/64");
    }

    #[test]
    fn a_serving_csr_is_evaluated_minutes_after_its_creation() {
        let csr = serving("n1", "request");
        assert_eq!((csr.username.as_str(), csr.request.as_slice()), ("system:node:n1", b"request".as_slice()));
        assert_eq!(csr.created.unwrap().to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(minutes_after_creation(2).to_string(), "2026-01-01T00:02:00Z");
    }
}
