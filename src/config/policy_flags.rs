//! Policy and DNS flags, shared by `run` and `check`, validated into the policy's
//! [`PolicyConfig`] and a [`DnsConfig`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::Args;
use ipnet::IpNet;

use super::ConfigError;
use super::flags::{Field, field};
use super::regex_anchoring;
use crate::policy::{HostnameMatch, PolicyConfig, is_dns_subdomain};

/// The hard cap on a certificate lifetime this approver accepts: 367 days, in seconds.
const MAX_EXPIRATION_CAP_SECS: i64 = 367 * 24 * 3600;
/// The shortest lifetime Kubernetes accepts in `spec.expirationSeconds`.
const MIN_EXPIRATION_SECS: i64 = 600;
const MAX_DNS_NAMES: i64 = 1000;
/// The hard cap on `--allowed-ip-addresses`.
const MAX_IP_ADDRESSES: i64 = 1000;
/// The default of `--allowed-ip-addresses`: room for every InternalIP and ExternalIP of a
/// dual-stack node with several interfaces.
const DEFAULT_IP_ADDRESSES: i64 = 16;
const DNS_TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(60));
const DNS_GRACE_MAX: Duration = Duration::from_secs(24 * 3600);
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The default of `--cluster-domain`, as kubeadm and most distributions set it.
const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// The validated resolver settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// Nameservers to ask; `None` uses the system resolver configuration.
    pub servers: Option<Vec<SocketAddr>>,
    /// Bound on each lookup.
    pub timeout: Duration,
}

/// Startup conditions worth a warning: the configuration is valid but weaker than it could be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning(pub String);

/// Policy and DNS flags shared by `run` and `check`; every flag also reads an env var.
///
/// Values are taken as text and validated by [`PolicyArgs::validate`], so every error names the
/// flag, the env var and the value in one line.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Regex every DNS SAN must match (required). Unanchored regexes match anywhere in the name.
    #[arg(long, env = "PROVIDER_REGEX", global = true)]
    pub provider_regex: Option<String>,
    /// Comma-separated IPv4/IPv6 prefixes IP SANs and resolved addresses must lie in [default: all addresses]
    #[arg(long, env = "PROVIDER_IP_PREFIXES", global = true)]
    pub provider_ip_prefixes: Option<String>,
    /// Largest accepted spec.expirationSeconds, 600..=31708800 [default: 31708800 (367 days)]
    #[arg(long, env = "MAX_EXPIRATION_SEC", global = true)]
    pub max_expiration_sec: Option<String>,
    /// Largest number of DNS SANs per CSR, 1..=1000 [default: 1]
    #[arg(long, env = "ALLOWED_DNS_NAMES", global = true)]
    pub allowed_dns_names: Option<String>,
    /// Largest number of IP SANs per CSR, 0..=1000 [default: 16]
    #[arg(long, env = "ALLOWED_IP_ADDRESSES", global = true)]
    pub allowed_ip_addresses: Option<String>,
    /// Do not resolve DNS SANs (true/false/1/0) [default: false]
    #[arg(long, env = "BYPASS_DNS_RESOLUTION", global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub bypass_dns_resolution: Option<String>,
    /// Do not bind DNS SANs to the node name (true/false/1/0) [default: false]
    #[arg(long, env = "BYPASS_HOSTNAME_CHECK", global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub bypass_hostname_check: Option<String>,
    /// How DNS SANs bind to the node name: strict or prefix [default: strict]
    #[arg(long, env = "HOSTNAME_MATCH", global = true)]
    pub hostname_match: Option<String>,
    /// Ignore CSRs whose username is not system:node:<name> instead of denying them [default: false]
    #[arg(long, env = "IGNORE_NON_SYSTEM_NODE", global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub ignore_non_system_node: Option<String>,
    /// Never deny: leave failing CSRs pending for a human, with an event [default: false]
    #[arg(long, env = "SKIP_DENY_STEP", global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub skip_deny_step: Option<String>,
    /// Nameserver ip[:port] to ask, repeatable or comma-separated [default: system resolver config]
    #[arg(long = "dns-server", env = "DNS_SERVERS", global = true, value_delimiter = ',')]
    pub dns_servers: Vec<String>,
    /// Bound on each DNS lookup, e.g. 500ms, 2s [default: 2s]
    #[arg(long, env = "DNS_TIMEOUT", global = true)]
    pub dns_timeout: Option<String>,
    /// How long an unresolvable DNS SAN is retried before denial, e.g. 5m [default: 5m]
    #[arg(long, env = "DNS_GRACE_PERIOD", global = true)]
    pub dns_grace_period: Option<String>,
    /// Require every SAN to be one of the Node's status.addresses or its name [default: false]
    #[arg(long, env = "VERIFY_NODE_ADDRESSES", global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub verify_node_addresses: Option<String>,
    /// The cluster's DNS domain: DNS SANs under svc.<domain> are always denied [default: cluster.local]
    #[arg(long, env = "CLUSTER_DOMAIN", global = true)]
    pub cluster_domain: Option<String>,
}

impl PolicyArgs {
    /// Validates every value; the first invalid one is returned as a [`ConfigError`].
    pub fn validate(&self) -> Result<(PolicyConfig, DnsConfig, Vec<Warning>), ConfigError> {
        let mut warnings = Vec::new();
        let regex_text = self.provider_regex.as_deref().unwrap_or_default();
        let provider_regex = provider_regex(field!(self.provider_regex), regex_text)?;
        for alternative in regex_anchoring::unanchored_alternatives(regex_text) {
            warnings.push(Warning(format!(
                "--provider-regex {regex_text:?}: {alternative:?} is not anchored with ^...$, so it matches \
                 anywhere in a DNS name"
            )));
        }
        let ip_prefixes = match &self.provider_ip_prefixes {
            Some(text) => prefixes(field!(self.provider_ip_prefixes), text)?,
            None => {
                warnings.push(Warning(
                    "--provider-ip-prefixes is not set: IP SANs and resolved addresses may be any address".into(),
                ));
                vec![IpNet::V4(Default::default()), IpNet::V6(Default::default())]
            }
        };
        let bypass_dns_resolution = field!(self.bypass_dns_resolution).boolean(false)?;
        let bypass_hostname_check = field!(self.bypass_hostname_check).boolean(false)?;
        for (on, name) in [
            (bypass_dns_resolution, "--bypass-dns-resolution: DNS SANs are not resolved"),
            (bypass_hostname_check, "--bypass-hostname-check: DNS SANs are not bound to the node name"),
        ] {
            if on {
                warnings.push(Warning(name.to_owned()));
            }
        }
        let policy = PolicyConfig {
            provider_regex,
            ip_prefixes,
            max_expiration_secs: field!(self.max_expiration_sec)
                .number(MIN_EXPIRATION_SECS..=MAX_EXPIRATION_CAP_SECS, MAX_EXPIRATION_CAP_SECS)?,
            allowed_dns_names: count(field!(self.allowed_dns_names).number(1..=MAX_DNS_NAMES, 1)?),
            allowed_ip_addresses: count(
                field!(self.allowed_ip_addresses).number(0..=MAX_IP_ADDRESSES, DEFAULT_IP_ADDRESSES)?,
            ),
            bypass_dns_resolution,
            bypass_hostname_check,
            hostname_match: hostname_match(field!(self.hostname_match))?,
            ignore_non_system_node: field!(self.ignore_non_system_node).boolean(false)?,
            skip_deny_step: field!(self.skip_deny_step).boolean(false)?,
            dns_grace_period: field!(self.dns_grace_period)
                .duration((Duration::ZERO, DNS_GRACE_MAX), Duration::from_secs(300))?,
            verify_node_addresses: field!(self.verify_node_addresses).boolean(false)?,
            cluster_domain: cluster_domain(field!(self.cluster_domain))?,
            machine: None,
        };
        if policy.verify_node_addresses && policy.bypass_dns_resolution {
            warnings.push(Warning(
                "--verify-node-addresses with --bypass-dns-resolution: IP SANs are checked only against the Node's \
                 status.addresses, which a kubelet reports itself without a cloud provider: a node that adds another \
                 node's IP to its status gets a certificate for it"
                    .into(),
            ));
        }
        let dns = DnsConfig {
            servers: dns_servers(field!(self.dns_servers))?,
            timeout: field!(self.dns_timeout).duration(DNS_TIMEOUT_RANGE, Duration::from_secs(2))?,
        };
        Ok((policy, dns, warnings))
    }
}

/// A count validated within a non-negative range.
fn count(number: i64) -> usize {
    usize::try_from(number).unwrap_or(0)
}

fn provider_regex(field: Field<'_, Option<String>>, text: &str) -> Result<regex::Regex, ConfigError> {
    if text.trim().is_empty() {
        return Err(field.error(text, "required, and must not be empty"));
    }
    regex::RegexBuilder::new(text)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| field.error(text, one_line(&e.to_string())))
}

fn prefixes(field: Field<'_, Option<String>>, text: &str) -> Result<Vec<IpNet>, ConfigError> {
    text.split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(field.error(text, "empty entry in the comma-separated list"));
            }
            entry.parse::<IpNet>().map(|net| net.trunc()).map_err(|_| {
                field.error(text, format!("{entry:?} is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8"))
            })
        })
        .collect()
}

fn hostname_match(field: Field<'_, Option<String>>) -> Result<HostnameMatch, ConfigError> {
    match field.text().map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("strict") => Ok(HostnameMatch::Strict),
        Some("prefix") => Ok(HostnameMatch::Prefix),
        Some(_) => Err(field.error(field.text().unwrap_or_default(), "expected strict or prefix")),
    }
}

/// A DNS name, lowercased and without one trailing dot.
fn cluster_domain(field: Field<'_, Option<String>>) -> Result<String, ConfigError> {
    let Some(text) = field.text() else {
        return Ok(DEFAULT_CLUSTER_DOMAIN.to_owned());
    };
    let domain = text.trim().to_ascii_lowercase();
    let domain = domain.strip_suffix('.').unwrap_or(&domain);
    if is_dns_subdomain(domain) {
        Ok(domain.to_owned())
    } else {
        Err(field.error(text, "not a DNS name such as cluster.local"))
    }
}

fn dns_servers(field: Field<'_, Vec<String>>) -> Result<Option<Vec<SocketAddr>>, ConfigError> {
    let entries = field.value;
    if entries.is_empty() {
        return Ok(None);
    }
    let all = entries.join(",");
    entries
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(field.error(&all, "empty entry in the list"));
            }
            server(entry).ok_or_else(|| {
                field.error(&all, format!("{entry:?} is not ip[:port], e.g. 10.96.0.10 or [fd00::a]:53"))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn server(entry: &str) -> Option<SocketAddr> {
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return (addr.port() != 0).then_some(addr);
    }
    entry.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_accept_ip_with_optional_port() {
        assert_eq!(server("10.0.0.1"), Some("10.0.0.1:53".parse().unwrap()));
        assert_eq!(server("[fd00::1]:5353"), Some("[fd00::1]:5353".parse().unwrap()));
        assert_eq!(server("fd00::1"), Some("[fd00::1]:53".parse().unwrap()));
        assert_eq!(server("dns.example.com"), None);
        assert_eq!(server("10.0.0.1:0"), None);
    }

    #[test]
    fn the_cluster_domain_is_a_lowercase_dns_name() {
        let domain = |value: Option<&str>| {
            let args = PolicyArgs { cluster_domain: value.map(str::to_owned), ..PolicyArgs::default() };
            cluster_domain(field!(args.cluster_domain)).ok()
        };
        assert_eq!(domain(None).as_deref(), Some("cluster.local"));
        assert_eq!(domain(Some(" Corp.Example. ")).as_deref(), Some("corp.example"));
        assert_eq!(domain(Some("")), None);
        assert_eq!(domain(Some(".")), None);
        assert_eq!(domain(Some("a..b")), None);
        assert_eq!(domain(Some("*.local")), None);
    }

    #[test]
    fn prefixes_are_trimmed_and_truncated() {
        let args = PolicyArgs::default();
        let nets = prefixes(field!(args.provider_ip_prefixes), " 10.1.2.3/8 , fd00::/8").unwrap();
        assert_eq!(nets, vec!["10.0.0.0/8".parse::<IpNet>().unwrap(), "fd00::/8".parse().unwrap()]);
        assert!(prefixes(field!(args.provider_ip_prefixes), "10.0.0.0/8,,fd00::/8").is_err());
    }
}
