//! Command-line flags and environment variables, parsed into a validated [`PolicyConfig`] and
//! [`DnsConfig`]. Every startup error is produced here and names the flag, its env var and the value.

mod anchoring;
mod machine;
mod run;

pub use machine::{Bootstrapper, MachineApi, MachineArgs, MachineConfig, MachinePolicy, MachineSource};
pub use run::{LeaderConfig, LogFormat, RunArgs, RunConfig};

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::Args;
use ipnet::IpNet;
use regex::Regex;

/// The hard cap on a certificate lifetime this approver accepts: 367 days, in seconds.
pub const MAX_EXPIRATION_CAP_SECS: i64 = 367 * 24 * 3600;
/// The shortest lifetime Kubernetes accepts in `spec.expirationSeconds`.
const MIN_EXPIRATION_SECS: i64 = 600;
const MAX_DNS_NAMES: usize = 1000;
/// The hard cap on `--allowed-ip-addresses`.
const MAX_IP_ADDRESSES: usize = 1000;
/// The default of `--allowed-ip-addresses`: room for every InternalIP and ExternalIP of a
/// dual-stack node with several interfaces.
const DEFAULT_IP_ADDRESSES: i64 = 16;
const DNS_TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(60));
const DNS_GRACE_MAX: Duration = Duration::from_secs(24 * 3600);
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A configuration value that cannot be used; the program stops with exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("invalid value {value:?} for {flag} (env {env}): {problem}")]
pub struct ConfigError {
    /// The command-line flag, e.g. `--provider-regex`.
    pub flag: &'static str,
    /// The environment variable read when the flag is absent.
    pub env: &'static str,
    /// The offending value as given.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

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
    /// Machine-mode rules, when machine mode is on.
    pub machine: Option<MachinePolicy>,
}

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
#[derive(Debug, Clone, Args)]
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
}

impl PolicyArgs {
    /// Validates every value; the first invalid one is returned as a [`ConfigError`].
    pub fn validate(&self) -> Result<(PolicyConfig, DnsConfig, Vec<Warning>), ConfigError> {
        let mut warnings = Vec::new();
        let regex_text = self.provider_regex.as_deref().unwrap_or_default();
        let provider_regex = parse_regex(regex_text)?;
        for alternative in anchoring::unanchored_alternatives(regex_text) {
            warnings.push(Warning(format!(
                "--provider-regex {regex_text:?}: {alternative:?} is not anchored with ^...$, so it matches \
                 anywhere in a DNS name"
            )));
        }
        let ip_prefixes = match &self.provider_ip_prefixes {
            Some(text) => parse_prefixes(text)?,
            None => {
                warnings.push(Warning(
                    "--provider-ip-prefixes is not set: IP SANs and resolved addresses may be any address".into(),
                ));
                vec![IpNet::V4(Default::default()), IpNet::V6(Default::default())]
            }
        };
        let bypass_dns_resolution = parse_flag(&BYPASS_DNS_RESOLUTION, &self.bypass_dns_resolution)?;
        let bypass_hostname_check = parse_flag(&BYPASS_HOSTNAME_CHECK, &self.bypass_hostname_check)?;
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
            max_expiration_secs: parse_number(
                &MAX_EXPIRATION_SEC,
                self.max_expiration_sec.as_deref(),
                MIN_EXPIRATION_SECS..=MAX_EXPIRATION_CAP_SECS,
                MAX_EXPIRATION_CAP_SECS,
            )?,
            allowed_dns_names: parse_number(
                &ALLOWED_DNS_NAMES,
                self.allowed_dns_names.as_deref(),
                1..=MAX_DNS_NAMES as i64,
                1,
            )? as usize,
            allowed_ip_addresses: parse_number(
                &ALLOWED_IP_ADDRESSES,
                self.allowed_ip_addresses.as_deref(),
                0..=MAX_IP_ADDRESSES as i64,
                DEFAULT_IP_ADDRESSES,
            )? as usize,
            bypass_dns_resolution,
            bypass_hostname_check,
            hostname_match: parse_hostname_match(self.hostname_match.as_deref())?,
            ignore_non_system_node: parse_flag(&IGNORE_NON_SYSTEM_NODE, &self.ignore_non_system_node)?,
            skip_deny_step: parse_flag(&SKIP_DENY_STEP, &self.skip_deny_step)?,
            dns_grace_period: parse_duration(
                &DNS_GRACE_PERIOD,
                self.dns_grace_period.as_deref(),
                (Duration::ZERO, DNS_GRACE_MAX),
                Duration::from_secs(300),
            )?,
            verify_node_addresses: parse_flag(&VERIFY_NODE_ADDRESSES, &self.verify_node_addresses)?,
            machine: None,
        };
        let dns = DnsConfig {
            servers: parse_dns_servers(&self.dns_servers)?,
            timeout: parse_duration(
                &DNS_TIMEOUT,
                self.dns_timeout.as_deref(),
                DNS_TIMEOUT_RANGE,
                Duration::from_secs(2),
            )?,
        };
        Ok((policy, dns, warnings))
    }
}

/// A flag and the env var that stands in for it.
struct Source {
    flag: &'static str,
    env: &'static str,
}

impl Source {
    fn error(&self, value: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError { flag: self.flag, env: self.env, value: value.to_owned(), problem: problem.into() }
    }
}

const PROVIDER_REGEX: Source = Source { flag: "--provider-regex", env: "PROVIDER_REGEX" };
const PROVIDER_IP_PREFIXES: Source = Source { flag: "--provider-ip-prefixes", env: "PROVIDER_IP_PREFIXES" };
const MAX_EXPIRATION_SEC: Source = Source { flag: "--max-expiration-sec", env: "MAX_EXPIRATION_SEC" };
const ALLOWED_DNS_NAMES: Source = Source { flag: "--allowed-dns-names", env: "ALLOWED_DNS_NAMES" };
const ALLOWED_IP_ADDRESSES: Source = Source { flag: "--allowed-ip-addresses", env: "ALLOWED_IP_ADDRESSES" };
const BYPASS_DNS_RESOLUTION: Source = Source { flag: "--bypass-dns-resolution", env: "BYPASS_DNS_RESOLUTION" };
const BYPASS_HOSTNAME_CHECK: Source = Source { flag: "--bypass-hostname-check", env: "BYPASS_HOSTNAME_CHECK" };
const HOSTNAME_MATCH: Source = Source { flag: "--hostname-match", env: "HOSTNAME_MATCH" };
const IGNORE_NON_SYSTEM_NODE: Source = Source { flag: "--ignore-non-system-node", env: "IGNORE_NON_SYSTEM_NODE" };
const SKIP_DENY_STEP: Source = Source { flag: "--skip-deny-step", env: "SKIP_DENY_STEP" };
const DNS_SERVERS: Source = Source { flag: "--dns-server", env: "DNS_SERVERS" };
const DNS_TIMEOUT: Source = Source { flag: "--dns-timeout", env: "DNS_TIMEOUT" };
const DNS_GRACE_PERIOD: Source = Source { flag: "--dns-grace-period", env: "DNS_GRACE_PERIOD" };
const VERIFY_NODE_ADDRESSES: Source = Source { flag: "--verify-node-addresses", env: "VERIFY_NODE_ADDRESSES" };

fn parse_regex(text: &str) -> Result<Regex, ConfigError> {
    if text.trim().is_empty() {
        return Err(PROVIDER_REGEX.error(text, "required, and must not be empty"));
    }
    regex::RegexBuilder::new(text)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| PROVIDER_REGEX.error(text, one_line(&e.to_string())))
}

fn parse_prefixes(text: &str) -> Result<Vec<IpNet>, ConfigError> {
    text.split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(PROVIDER_IP_PREFIXES.error(text, "empty entry in the comma-separated list"));
            }
            entry.parse::<IpNet>().map(|net| net.trunc()).map_err(|_| {
                PROVIDER_IP_PREFIXES
                    .error(text, format!("{entry:?} is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8"))
            })
        })
        .collect()
}

fn parse_flag(source: &Source, value: &Option<String>) -> Result<bool, ConfigError> {
    let Some(text) = value else { return Ok(false) };
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(source.error(text, "expected true, false, 1 or 0")),
    }
}

fn parse_number(
    source: &Source,
    value: Option<&str>,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<i64, ConfigError> {
    let Some(text) = value else { return Ok(default) };
    let problem = || format!("expected a whole number from {} to {}", range.start(), range.end());
    let number: i64 = text.trim().parse().map_err(|_| source.error(text, problem()))?;
    if range.contains(&number) { Ok(number) } else { Err(source.error(text, problem())) }
}

fn parse_duration(
    source: &Source,
    value: Option<&str>,
    (min, max): (Duration, Duration),
    default: Duration,
) -> Result<Duration, ConfigError> {
    let Some(text) = value else { return Ok(default) };
    let problem = || {
        format!(
            "expected a duration such as 500ms, 2s or 5m, from {} to {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        )
    };
    let duration = humantime::parse_duration(text.trim()).map_err(|_| source.error(text, problem()))?;
    if (min..=max).contains(&duration) { Ok(duration) } else { Err(source.error(text, problem())) }
}

fn parse_hostname_match(value: Option<&str>) -> Result<HostnameMatch, ConfigError> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("strict") => Ok(HostnameMatch::Strict),
        Some("prefix") => Ok(HostnameMatch::Prefix),
        Some(_) => Err(HOSTNAME_MATCH.error(value.unwrap_or_default(), "expected strict or prefix")),
    }
}

fn parse_dns_servers(entries: &[String]) -> Result<Option<Vec<SocketAddr>>, ConfigError> {
    if entries.is_empty() {
        return Ok(None);
    }
    let all = entries.join(",");
    entries
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(DNS_SERVERS.error(&all, "empty entry in the list"));
            }
            parse_server(entry).ok_or_else(|| {
                DNS_SERVERS.error(&all, format!("{entry:?} is not ip[:port], e.g. 10.96.0.10 or [fd00::a]:53"))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn parse_server(entry: &str) -> Option<SocketAddr> {
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
        assert_eq!(parse_server("10.0.0.1"), Some("10.0.0.1:53".parse().unwrap()));
        assert_eq!(parse_server("[fd00::1]:5353"), Some("[fd00::1]:5353".parse().unwrap()));
        assert_eq!(parse_server("fd00::1"), Some("[fd00::1]:53".parse().unwrap()));
        assert_eq!(parse_server("dns.example.com"), None);
        assert_eq!(parse_server("10.0.0.1:0"), None);
    }

    #[test]
    fn prefixes_are_trimmed_and_truncated() {
        let nets = parse_prefixes(" 10.1.2.3/8 , fd00::/8").unwrap();
        assert_eq!(nets, vec!["10.0.0.0/8".parse::<IpNet>().unwrap(), "fd00::/8".parse().unwrap()]);
        assert!(parse_prefixes("10.0.0.0/8,,fd00::/8").is_err());
    }
}
