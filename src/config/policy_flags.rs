//! Policy and DNS flags, shared by `run` and `check`, validated into the policy's
//! [`PolicyConfig`]; the resolver's flags are its [`DnsConfig`].

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use ipnet::IpNet;

use super::{ConfigError, Flag, regex_anchoring, rules_file};
use crate::policy::{HostnameMatch, PolicyConfig, UserRules, is_dns_subdomain};
use crate::values::{Checked, ValueError, duration, given, keyword, list, number, path, shared};

/// The hard cap on a certificate lifetime this approver accepts: 367 days, in seconds (also the
/// default of `--max-expiration-sec`).
const MAX_EXPIRATION_CAP_SECS: i64 = 367 * 24 * 3600;
/// The longest `--dns-grace-period`.
const DNS_GRACE_MAX: Duration = Duration::from_secs(24 * 3600);
/// The bound on the compiled `--provider-regex`.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Policy and DNS flags shared by `run` and `check`; every flag also reads an env var.
///
/// A type spelled with its path (`std::vec::Vec`, `std::option::Option`) is one value that clap's
/// derive does not read as a repeated or optional flag: the value parser returns all of it.
///
/// clap reads each value into its type; an invalid one stops the program with one line naming
/// the flag, the env var and the value.
#[derive(Debug, Clone, Args)]
#[command(mut_args(shared))]
pub struct PolicyArgs {
    /// Regex every DNS SAN must match (required). Unanchored regexes match anywhere in the name.
    #[arg(long, env = "PROVIDER_REGEX", value_parser = Checked(provider_regex))]
    pub provider_regex: Option<regex::Regex>,
    /// Comma-separated IPv4/IPv6 prefixes IP SANs and resolved addresses must lie in [default: all addresses]
    #[arg(long, env = "PROVIDER_IP_PREFIXES", value_parser = Checked(prefixes))]
    pub provider_ip_prefixes: Option<std::vec::Vec<IpNet>>,
    /// Largest accepted spec.expirationSeconds, 600..=31708800 (367 days, also the hard cap)
    #[arg(long, env = "MAX_EXPIRATION_SEC", default_value_t = MAX_EXPIRATION_CAP_SECS, value_parser = number::<i64>(600..=MAX_EXPIRATION_CAP_SECS))]
    pub max_expiration_sec: i64,
    /// Largest number of DNS SANs per CSR, 1..=1000
    #[arg(long, env = "ALLOWED_DNS_NAMES", default_value = "1", value_parser = number::<usize>(1..=1000))]
    pub allowed_dns_names: usize,
    /// Largest number of IP SANs per CSR, 0..=1000 (the default leaves room for every InternalIP and ExternalIP of a dual-stack node with several interfaces)
    #[arg(long, env = "ALLOWED_IP_ADDRESSES", default_value = "16", value_parser = number::<usize>(0..=1000))]
    pub allowed_ip_addresses: usize,
    /// Do not resolve DNS SANs (true/false/1/0)
    #[arg(long, env = "BYPASS_DNS_RESOLUTION", default_value = "false")]
    pub bypass_dns_resolution: bool,
    /// Do not bind DNS SANs to the node name (true/false/1/0)
    #[arg(long, env = "BYPASS_HOSTNAME_CHECK", default_value = "false")]
    pub bypass_hostname_check: bool,
    /// How DNS SANs bind to the node name: strict or prefix
    #[arg(long, env = "HOSTNAME_MATCH", default_value = "strict", value_parser = keyword(HOSTNAME_MATCHES))]
    pub hostname_match: HostnameMatch,
    /// Ignore CSRs whose username is not system:node:<name> instead of denying them
    #[arg(long, env = "IGNORE_NON_SYSTEM_NODE", default_value = "false")]
    pub ignore_non_system_node: bool,
    /// Never deny: leave failing CSRs pending for a human, with an event
    #[arg(long, env = "SKIP_DENY_STEP", default_value = "false")]
    pub skip_deny_step: bool,
    /// The resolver's flags.
    #[command(flatten)]
    pub dns: DnsConfig,
    /// How long an unresolvable DNS SAN is retried before denial, e.g. 5m
    #[arg(long, env = "DNS_GRACE_PERIOD", default_value = "5m", value_parser = duration(Duration::ZERO, DNS_GRACE_MAX))]
    pub dns_grace_period: Duration,
    /// Require every SAN to be one of the Node's status.addresses or its name
    #[arg(long, env = "VERIFY_NODE_ADDRESSES", default_value = "false")]
    pub verify_node_addresses: bool,
    /// The cluster's DNS domain: DNS SANs under svc.<domain> are always denied
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local", value_parser = Checked(cluster_domain))]
    pub cluster_domain: String,
    /// YAML file of CEL rules every CSR must also pass, run after the built-in checks (docs/rules.md)
    #[arg(long, env = "RULES_FILE", value_name = "FILE", value_parser = Checked(path))]
    pub rules: Option<PathBuf>,
}

/// The resolver's flags.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[command(mut_args(shared))]
pub struct DnsConfig {
    /// Nameserver ip[:port] to ask, repeatable or comma-separated [default: system resolver config]
    #[arg(long = "dns-server", env = "DNS_SERVERS", value_name = "DNS_SERVERS", value_delimiter = ',', value_parser = Checked(dns_server))]
    pub servers: Option<Vec<SocketAddr>>,
    /// Bound on each DNS lookup, e.g. 500ms, 2s
    #[arg(long = "dns-timeout", env = "DNS_TIMEOUT", value_name = "DNS_TIMEOUT", default_value = "2s", value_parser = duration(Duration::from_millis(10), Duration::from_secs(60)))]
    pub timeout: Duration,
}

/// Startup conditions worth a warning: the configuration is valid but weaker than it could be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning(pub String);

/// The keywords of `--hostname-match`.
const HOSTNAME_MATCHES: &[(&str, HostnameMatch)] =
    &[("strict", HostnameMatch::Strict), ("prefix", HostnameMatch::Prefix)];

impl PolicyArgs {
    /// The rules and resolver settings, and the warnings they deserve; a missing
    /// `--provider-regex` and the `--rules` file are the errors left after clap has read every value.
    pub fn validate(self) -> Result<(PolicyConfig, DnsConfig, Vec<Warning>), ConfigError> {
        let error = |flag, value: String, problem| ConfigError { flag, value, problem };
        let provider_regex = self
            .provider_regex
            .ok_or_else(|| error(Flag::ProviderRegex, String::new(), ValueError::Required.into()))?;
        let mut warnings: Vec<Warning> = regex_anchoring::unanchored_alternatives(provider_regex.as_str())
            .into_iter()
            .map(|alternative| {
                let regex = provider_regex.as_str();
                Warning(format!(
                    "--provider-regex {regex:?}: {alternative:?} is not anchored with ^...$, so it matches anywhere in a DNS name"
                ))
            })
            .collect();
        let ip_prefixes = self.provider_ip_prefixes.unwrap_or_else(|| {
            warnings.push(Warning(
                "--provider-ip-prefixes is not set: IP SANs and resolved addresses may be any address".into(),
            ));
            vec![IpNet::V4(Default::default()), IpNet::V6(Default::default())]
        });
        for (on, warning) in [
            (self.bypass_dns_resolution, "--bypass-dns-resolution: DNS SANs are not resolved"),
            (self.bypass_hostname_check, "--bypass-hostname-check: DNS SANs are not bound to the node name"),
            (
                self.verify_node_addresses && self.bypass_dns_resolution,
                "--verify-node-addresses with --bypass-dns-resolution: IP SANs are checked only against the Node's \
                 status.addresses, which a kubelet reports itself without a cloud provider: a node that adds another \
                 node's IP to its status gets a certificate for it",
            ),
        ] {
            if on {
                warnings.push(Warning(warning.to_owned()));
            }
        }
        let user_rules = match given(self.rules) {
            Some(path) => rules_file::read(&path)
                .map_err(|problem| error(Flag::Rules, path.display().to_string(), problem.into()))?,
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
            cluster_domain: self.cluster_domain,
            machine: None,
            user_rules,
        };
        Ok((policy, self.dns, warnings))
    }
}

/// A non-empty regex within the size limit.
fn provider_regex(text: &str) -> Result<regex::Regex, ValueError> {
    if text.trim().is_empty() {
        return Err(ValueError::Required);
    }
    Ok(regex::RegexBuilder::new(text).size_limit(REGEX_SIZE_LIMIT).build()?)
}

/// Comma-separated CIDR prefixes, each truncated to its network.
fn prefixes(text: &str) -> Result<Vec<IpNet>, ValueError> {
    let prefix =
        |entry: &str| entry.parse::<IpNet>().map(|net| net.trunc()).map_err(|_| ValueError::NotPrefix(entry.into()));
    list(text, prefix)
}

/// A DNS name, lowercased and without one trailing dot.
fn cluster_domain(text: &str) -> Result<String, ValueError> {
    let domain = text.trim().to_ascii_lowercase();
    let domain = domain.strip_suffix('.').unwrap_or(&domain);
    if is_dns_subdomain(domain) { Ok(domain.to_owned()) } else { Err(ValueError::NotDomain) }
}

/// One nameserver: `ip[:port]`, port 53 when omitted.
fn dns_server(text: &str) -> Result<SocketAddr, ValueError> {
    let entry = text.trim();
    if entry.is_empty() {
        return Err(ValueError::EmptyServer);
    }
    server(entry).ok_or_else(|| ValueError::NotServer(entry.to_owned()))
}

fn server(entry: &str) -> Option<SocketAddr> {
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return (addr.port() != 0).then_some(addr);
    }
    entry.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::reading::read;

    #[test]
    fn servers_accept_ip_with_optional_port() {
        assert_eq!(server("10.0.0.1"), Some("10.0.0.1:53".parse().unwrap()));
        assert_eq!(server("[fd00::1]:5353"), Some("[fd00::1]:5353".parse().unwrap()));
        assert_eq!(server("fd00::1"), Some("[fd00::1]:53".parse().unwrap()));
        assert_eq!(server("dns.example.com"), None);
        assert_eq!(server("10.0.0.1:0"), None);
    }

    #[test]
    fn the_servers_are_the_systems_unless_given() {
        assert_eq!(read::<PolicyArgs>(&[]).unwrap().dns.servers, None);
        let given = read::<PolicyArgs>(&["--dns-server=10.0.0.1,[fd00::1]:5353", "--dns-server", "10.0.0.2"]);
        let servers = ["10.0.0.1:53", "[fd00::1]:5353", "10.0.0.2:53"].map(|s| s.parse().unwrap()).to_vec();
        assert_eq!(given.unwrap().dns.servers, Some(servers));
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
        let nets = prefixes(" 10.1.2.3/8 , fd00::/8").unwrap();
        assert_eq!(nets, vec!["10.0.0.0/8".parse::<IpNet>().unwrap(), "fd00::/8".parse().unwrap()]);
        assert!(prefixes("10.0.0.0/8,,fd00::/8").is_err());
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
        assert_eq!(error.flag, Flag::ProviderRegex);
        assert!(error.to_string().contains("--provider-regex (env PROVIDER_REGEX)"), "{error}");
        assert!(read::<PolicyArgs>(&["--provider-regex= "]).unwrap_err().contains("required"));
    }
}
