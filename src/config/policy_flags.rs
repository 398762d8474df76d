//! Policy and DNS flags, shared by `run` and `check`, validated into the policy's
//! [`PolicyConfig`] and a [`DnsConfig`].

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};
use ipnet::IpNet;

use super::ConfigError;
use super::flags::{Checked, boolean, duration, given_path, keyword, list, number, path};
use super::{regex_anchoring, rules_file};
use crate::policy::{HostnameMatch, PolicyConfig, UserRules, is_dns_subdomain};

/// The hard cap on a certificate lifetime this approver accepts: 367 days, in seconds (also the
/// default of `--max-expiration-sec`).
const MAX_EXPIRATION_CAP_SECS: i64 = 367 * 24 * 3600;
/// The longest `--dns-grace-period`.
const DNS_GRACE_MAX: Duration = Duration::from_secs(24 * 3600);
/// The bound on the compiled `--provider-regex`.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

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
/// clap reads each value into its type; an invalid one stops the program with one line naming
/// the flag, the env var and the value.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Regex every DNS SAN must match (required). Unanchored regexes match anywhere in the name.
    #[arg(long, env = "PROVIDER_REGEX", global = true, value_parser = provider_regex())]
    pub provider_regex: Option<regex::Regex>,
    /// Comma-separated IPv4/IPv6 prefixes IP SANs and resolved addresses must lie in [default: all addresses]
    #[arg(long, env = "PROVIDER_IP_PREFIXES", global = true, value_parser = prefixes())]
    pub provider_ip_prefixes: Option<Prefixes>,
    /// Largest accepted spec.expirationSeconds, 600..=31708800 (367 days, also the hard cap)
    #[arg(long, env = "MAX_EXPIRATION_SEC", global = true, default_value_t = MAX_EXPIRATION_CAP_SECS, value_parser = number::<i64>(600..=MAX_EXPIRATION_CAP_SECS))]
    pub max_expiration_sec: i64,
    /// Largest number of DNS SANs per CSR, 1..=1000
    #[arg(long, env = "ALLOWED_DNS_NAMES", global = true, default_value = "1", value_parser = number::<usize>(1..=1000))]
    pub allowed_dns_names: usize,
    /// Largest number of IP SANs per CSR, 0..=1000 (the default leaves room for every InternalIP and ExternalIP of a dual-stack node with several interfaces)
    #[arg(long, env = "ALLOWED_IP_ADDRESSES", global = true, default_value = "16", value_parser = number::<usize>(0..=1000))]
    pub allowed_ip_addresses: usize,
    /// Do not resolve DNS SANs (true/false/1/0)
    #[arg(long, env = "BYPASS_DNS_RESOLUTION", global = true, default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub bypass_dns_resolution: bool,
    /// Do not bind DNS SANs to the node name (true/false/1/0)
    #[arg(long, env = "BYPASS_HOSTNAME_CHECK", global = true, default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub bypass_hostname_check: bool,
    /// How DNS SANs bind to the node name: strict or prefix
    #[arg(long, env = "HOSTNAME_MATCH", global = true, default_value = "strict", value_parser = keyword(HOSTNAME_MATCHES))]
    pub hostname_match: HostnameMatch,
    /// Ignore CSRs whose username is not system:node:<name> instead of denying them
    #[arg(long, env = "IGNORE_NON_SYSTEM_NODE", global = true, default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub ignore_non_system_node: bool,
    /// Never deny: leave failing CSRs pending for a human, with an event
    #[arg(long, env = "SKIP_DENY_STEP", global = true, default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub skip_deny_step: bool,
    /// Nameserver ip[:port] to ask, repeatable or comma-separated [default: system resolver config]
    #[arg(long = "dns-server", env = "DNS_SERVERS", global = true, value_delimiter = ',', value_parser = dns_server())]
    pub dns_servers: Vec<SocketAddr>,
    /// Bound on each DNS lookup, e.g. 500ms, 2s
    #[arg(long, env = "DNS_TIMEOUT", global = true, default_value = "2s", value_parser = duration(Duration::from_millis(10), Duration::from_secs(60)))]
    pub dns_timeout: Duration,
    /// How long an unresolvable DNS SAN is retried before denial, e.g. 5m
    #[arg(long, env = "DNS_GRACE_PERIOD", global = true, default_value = "5m", value_parser = duration(Duration::ZERO, DNS_GRACE_MAX))]
    pub dns_grace_period: Duration,
    /// Require every SAN to be one of the Node's status.addresses or its name
    #[arg(long, env = "VERIFY_NODE_ADDRESSES", global = true, default_value = "false", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = boolean())]
    pub verify_node_addresses: bool,
    /// The cluster's DNS domain: DNS SANs under svc.<domain> are always denied
    #[arg(long, env = "CLUSTER_DOMAIN", global = true, default_value = "cluster.local", value_parser = cluster_domain())]
    pub cluster_domain: String,
    /// YAML file of CEL rules every CSR must also pass, run after the built-in checks (docs/rules.md)
    #[arg(long, env = "RULES_FILE", global = true, value_name = "FILE", value_parser = path())]
    pub rules: Option<PathBuf>,
}

/// The keywords of `--hostname-match`.
const HOSTNAME_MATCHES: &[(&str, HostnameMatch)] =
    &[("strict", HostnameMatch::Strict), ("prefix", HostnameMatch::Prefix)];

/// The prefixes of `--provider-ip-prefixes`, each truncated to its network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefixes(pub Vec<IpNet>);

impl PolicyArgs {
    /// The rules and resolver settings, and the warnings they deserve; a missing
    /// `--provider-regex` is the one error left after clap has read every value.
    pub fn validate(&self) -> Result<(PolicyConfig, DnsConfig, Vec<Warning>), ConfigError> {
        let mut warnings = Vec::new();
        let provider_regex = self
            .provider_regex
            .clone()
            .ok_or_else(|| ConfigError::of_field("provider_regex", "", "required, and must not be empty"))?;
        for alternative in regex_anchoring::unanchored_alternatives(provider_regex.as_str()) {
            warnings.push(Warning(format!(
                "--provider-regex {:?}: {alternative:?} is not anchored with ^...$, so it matches anywhere in a DNS name",
                provider_regex.as_str()
            )));
        }
        let ip_prefixes = match &self.provider_ip_prefixes {
            Some(Prefixes(prefixes)) => prefixes.clone(),
            None => {
                warnings.push(Warning(
                    "--provider-ip-prefixes is not set: IP SANs and resolved addresses may be any address".into(),
                ));
                vec![IpNet::V4(Default::default()), IpNet::V6(Default::default())]
            }
        };
        for (on, name) in [
            (self.bypass_dns_resolution, "--bypass-dns-resolution: DNS SANs are not resolved"),
            (self.bypass_hostname_check, "--bypass-hostname-check: DNS SANs are not bound to the node name"),
        ] {
            if on {
                warnings.push(Warning(name.to_owned()));
            }
        }
        if self.verify_node_addresses && self.bypass_dns_resolution {
            warnings.push(Warning(
                "--verify-node-addresses with --bypass-dns-resolution: IP SANs are checked only against the Node's \
                 status.addresses, which a kubelet reports itself without a cloud provider: a node that adds another \
                 node's IP to its status gets a certificate for it"
                    .into(),
            ));
        }
        let user_rules = match given_path(&self.rules) {
            Some(path) => rules_file::read(&path)
                .map_err(|problem| ConfigError::of_field("rules", &path.display().to_string(), problem))?,
            None => UserRules::default(),
        };
        warnings.extend(user_rules.warnings().into_iter().map(Warning));
        let policy = PolicyConfig {
            provider_regex,
            ip_prefixes,
            max_expiration_secs: self.max_expiration_sec,
            allowed_dns_names: self.allowed_dns_names,
            allowed_ip_addresses: self.allowed_ip_addresses,
            bypass_dns_resolution: self.bypass_dns_resolution,
            bypass_hostname_check: self.bypass_hostname_check,
            hostname_match: self.hostname_match,
            ignore_non_system_node: self.ignore_non_system_node,
            skip_deny_step: self.skip_deny_step,
            dns_grace_period: self.dns_grace_period,
            verify_node_addresses: self.verify_node_addresses,
            cluster_domain: self.cluster_domain.clone(),
            machine: None,
            user_rules,
        };
        let servers = (!self.dns_servers.is_empty()).then(|| self.dns_servers.clone());
        Ok((policy, DnsConfig { servers, timeout: self.dns_timeout }, warnings))
    }
}

/// A non-empty regex within the size limit, written on one line when it does not compile.
fn provider_regex() -> Checked<impl Fn(&str) -> Result<regex::Regex, String> + Clone> {
    Checked(|text: &str| {
        if text.trim().is_empty() {
            return Err("required, and must not be empty".into());
        }
        regex::RegexBuilder::new(text).size_limit(REGEX_SIZE_LIMIT).build().map_err(|e| one_line(&e.to_string()))
    })
}

/// Comma-separated CIDR prefixes, each truncated to its network.
fn prefixes() -> Checked<impl Fn(&str) -> Result<Prefixes, String> + Clone> {
    Checked(|text: &str| {
        list(text, |entry| {
            entry
                .parse::<IpNet>()
                .map(|net| net.trunc())
                .map_err(|_| format!("{entry:?} is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8"))
        })
        .map(Prefixes)
    })
}

/// A DNS name, lowercased and without one trailing dot.
fn cluster_domain() -> Checked<impl Fn(&str) -> Result<String, String> + Clone> {
    Checked(|text: &str| {
        let domain = text.trim().to_ascii_lowercase();
        let domain = domain.strip_suffix('.').unwrap_or(&domain);
        if is_dns_subdomain(domain) {
            Ok(domain.to_owned())
        } else {
            Err("not a DNS name such as cluster.local".into())
        }
    })
}

/// One nameserver: `ip[:port]`, port 53 when omitted.
fn dns_server() -> Checked<impl Fn(&str) -> Result<SocketAddr, String> + Clone> {
    Checked(|text: &str| {
        let entry = text.trim();
        if entry.is_empty() {
            return Err("empty entry in the list".into());
        }
        server(entry).ok_or_else(|| format!("{entry:?} is not ip[:port], e.g. 10.96.0.10 or [fd00::a]:53"))
    })
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
    use super::super::flags::reading::read;
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
        let domain = |args: &[&str]| read::<PolicyArgs>(args).ok().map(|args| args.cluster_domain);
        assert_eq!(domain(&[]).as_deref(), Some("cluster.local"));
        assert_eq!(domain(&["--cluster-domain= Corp.Example. "]).as_deref(), Some("corp.example"));
        for bad in ["", ".", "a..b", "*.local"] {
            assert_eq!(domain(&[&format!("--cluster-domain={bad}")]), None, "{bad}");
        }
    }

    #[test]
    fn prefixes_are_trimmed_and_truncated() {
        let read = prefixes().0;
        let nets = read(" 10.1.2.3/8 , fd00::/8").unwrap();
        assert_eq!(nets.0, vec!["10.0.0.0/8".parse::<IpNet>().unwrap(), "fd00::/8".parse().unwrap()]);
        assert!(read("10.0.0.0/8,,fd00::/8").is_err());
    }

    #[test]
    fn verifying_node_addresses_without_dns_is_warned_about() {
        let warned = |args: &[&str]| {
            let all = [&["--provider-regex=^x$", "--provider-ip-prefixes=10.0.0.0/8"][..], args].concat();
            let (_, _, warnings) = read::<PolicyArgs>(&all).unwrap().validate().unwrap();
            warnings.iter().any(|w| w.0.starts_with("--verify-node-addresses with --bypass-dns-resolution"))
        };
        assert!(warned(&["--verify-node-addresses", "--bypass-dns-resolution"]));
        assert!(!warned(&["--verify-node-addresses"]));
        assert!(!warned(&["--bypass-dns-resolution"]));
    }

    #[test]
    fn a_provider_regex_is_required() {
        let error = read::<PolicyArgs>(&[]).unwrap().validate().unwrap_err();
        assert_eq!((error.flag.as_str(), error.env.as_str()), ("--provider-regex", "PROVIDER_REGEX"));
        assert!(read::<PolicyArgs>(&["--provider-regex= "]).unwrap_err().contains("required"));
    }
}
