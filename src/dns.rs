//! DNS evidence: the policy's [`Resolver`] port implemented with hickory-resolver.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError as HickoryDnsError, NetError, NoRecords};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RecordType};

use crate::policy::{DnsFailure, Resolution, Resolver};

mod owned;

/// The system resolver configuration read by [`HickoryResolver::new`] when no servers are given.
pub const SYSTEM_RESOLV_CONF: &str = "/etc/resolv.conf";

/// Longest time a negative answer (NXDOMAIN, no records) is cached, whatever the zone's SOA says:
/// the policy retries a not-yet-resolvable name during its grace period and must see it appear.
const NEGATIVE_MAX_TTL: Duration = Duration::from_secs(2);

/// Longest time a positive answer is cached, whatever its TTL: approvals rest on fresh addresses.
const POSITIVE_MAX_TTL: Duration = Duration::from_secs(30);

/// Answers cached (one per name and record type: 512 names). Within their TTL they serve a CSR
/// evaluated again (a retry, a conflict) and a node asking twice; a burst of distinct nodes gets no
/// hit from any size, and hickory's default of 8,192 held about 5 MiB during a catch-up of 10,000
/// CSRs (BENCHMARKS.md).
const CACHE_ENTRIES: u64 = 1024;

/// An error building a [`HickoryResolver`].
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The resolver configuration file could not be read.
    #[error("cannot read resolver configuration {path}: {source}")]
    ReadConfig {
        /// The file that was read.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The resolver configuration is unusable (for example, it names no nameserver).
    #[error("invalid resolver configuration: {0}")]
    InvalidConfig(#[source] NetError),
    /// No nameserver was given.
    #[error("no DNS nameservers configured")]
    NoNameservers,
}

/// A [`Resolver`] backed by hickory-resolver.
///
/// Names are always looked up as absolute names: the configuration's search list and domain are
/// never used, and neither is `/etc/hosts`. Only A and AAAA records owned by the name, or by a name
/// on the CNAME chain that starts at it, count as its addresses. A and AAAA are queried
/// concurrently, each bounded by the configured timeout. Negative answers are cached for at most
/// 2 s, positive ones for at most 30 s, [`CACHE_ENTRIES`] answers at most.
#[derive(Debug, Clone)]
pub struct HickoryResolver {
    inner: TokioResolver,
    timeout: Duration,
}

impl HickoryResolver {
    /// Builds a resolver that asks exactly `servers` (UDP, with TCP fallback), or, with `None`,
    /// the nameservers of the system configuration ([`SYSTEM_RESOLV_CONF`]).
    pub fn new(servers: Option<&[SocketAddr]>, timeout: Duration) -> Result<Self, DnsError> {
        match servers {
            Some(servers) => {
                let name_servers = servers.iter().map(|addr| name_server(*addr)).collect();
                Self::build(name_servers, ResolverOpts::default(), timeout)
            }
            None => {
                let contents = std::fs::read(SYSTEM_RESOLV_CONF)
                    .map_err(|source| DnsError::ReadConfig { path: SYSTEM_RESOLV_CONF.to_owned(), source })?;
                Self::from_resolv_conf(contents, 53, timeout)
            }
        }
    }

    /// Builds a resolver from resolv.conf contents, using only its nameservers and options
    /// (`edns0`): its `search` and `domain` lines are ignored, and `timeout`, `attempts` and
    /// `ndots` are replaced by this resolver's own settings. The nameservers are asked on `port`
    /// (53 for a real resolv.conf, which cannot name a port).
    pub fn from_resolv_conf(contents: impl AsRef<[u8]>, port: u16, timeout: Duration) -> Result<Self, DnsError> {
        let (config, options) =
            hickory_resolver::system_conf::parse_resolv_conf(contents.as_ref()).map_err(DnsError::InvalidConfig)?;
        let (_domain, _search, mut name_servers) = config.into_parts();
        for connection in name_servers.iter_mut().flat_map(|ns| ns.connections.iter_mut()) {
            connection.port = port;
        }
        Self::build(name_servers, options, timeout)
    }

    fn build(
        name_servers: Vec<NameServerConfig>,
        mut options: ResolverOpts,
        timeout: Duration,
    ) -> Result<Self, DnsError> {
        if name_servers.is_empty() {
            return Err(DnsError::NoNameservers);
        }
        // No search list or domain: a relative name is only ever tried as itself.
        let config = ResolverConfig::from_parts(None, Vec::new(), name_servers);
        options.ndots = 0;
        // One try per server within our own timeout; the caller retries later.
        options.timeout = timeout;
        options.attempts = 0;
        options.use_hosts_file = ResolveHosts::Never;
        options.negative_max_ttl = Some(NEGATIVE_MAX_TTL);
        options.positive_max_ttl = Some(POSITIVE_MAX_TTL);
        options.cache_size = CACHE_ENTRIES;
        // The CNAME records of a chain the resolver follows itself stay in the answers: without
        // them the addresses at its end would have no link to the name asked about.
        options.preserve_intermediates = true;
        let inner = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options)
            .build()
            .map_err(DnsError::InvalidConfig)?;
        Ok(Self { inner, timeout })
    }

    /// Looks up one record type; `Ok(empty)` means NXDOMAIN or no records of that type.
    async fn lookup(&self, name: Name, record_type: RecordType) -> Result<Vec<IpAddr>, DnsFailure> {
        let result = tokio::time::timeout(self.timeout, self.inner.lookup(name.clone(), record_type)).await;
        match result {
            Err(_elapsed) => Err(DnsFailure::Timeout),
            Ok(Err(error)) => classify(error).map(|()| Vec::new()),
            // Only the answer section, and in it only records of `name` and its CNAME chain.
            Ok(Ok(lookup)) => Ok(owned::owned_addresses(&name, record_type, lookup.answers())),
        }
    }
}

impl Resolver for HickoryResolver {
    async fn resolve(&self, name: &str) -> Resolution {
        let mut fqdn = match Name::from_ascii(name) {
            Ok(fqdn) => fqdn,
            Err(e) => {
                return Resolution::Unavailable(DnsFailure::Other(format!("invalid DNS name {name:?}: {e}")));
            }
        };
        fqdn.set_fqdn(true);
        let (v4, v6) = tokio::join!(self.lookup(fqdn.clone(), RecordType::A), self.lookup(fqdn, RecordType::AAAA));
        combine(v4, v6)
    }
}

/// A nameserver at `addr` over UDP, with TCP for truncated answers.
fn name_server(addr: SocketAddr) -> NameServerConfig {
    let mut udp = ConnectionConfig::udp();
    udp.port = addr.port();
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = addr.port();
    NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
}

/// `Ok(())` for a definitive negative answer (NXDOMAIN, or NOERROR without records), else the
/// failure.
fn classify(error: NetError) -> Result<(), DnsFailure> {
    match error {
        NetError::Dns(HickoryDnsError::NoRecordsFound(NoRecords { response_code, .. })) => match response_code {
            ResponseCode::NXDomain | ResponseCode::NoError => Ok(()),
            code => Err(failure_for(code)),
        },
        NetError::Dns(HickoryDnsError::ResponseCode(code)) => Err(failure_for(code)),
        NetError::Timeout => Err(DnsFailure::Timeout),
        NetError::Io(e) if e.kind() == io::ErrorKind::TimedOut => Err(DnsFailure::Timeout),
        other => Err(DnsFailure::Other(other.to_string())),
    }
}

fn failure_for(code: ResponseCode) -> DnsFailure {
    match code {
        ResponseCode::ServFail => DnsFailure::ServFail,
        ResponseCode::Refused => DnsFailure::Refused,
        code => DnsFailure::Other(format!("response code {code}")),
    }
}

/// Any failure wins (the address set would be incomplete); then addresses (A first, no
/// duplicates); else not found.
fn combine(v4: Result<Vec<IpAddr>, DnsFailure>, v6: Result<Vec<IpAddr>, DnsFailure>) -> Resolution {
    match (v4, v6) {
        (Err(failure), _) | (_, Err(failure)) => Resolution::Unavailable(failure),
        (Ok(v4), Ok(v6)) => {
            let mut addresses: Vec<IpAddr> = Vec::with_capacity(v4.len() + v6.len());
            for address in v4.into_iter().chain(v6) {
                if !addresses.contains(&address) {
                    addresses.push(address);
                }
            }
            if addresses.is_empty() { Resolution::NotFound } else { Resolution::Addresses(addresses) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_prefers_failure_then_addresses() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(combine(Ok(vec![a]), Err(DnsFailure::ServFail)), Resolution::Unavailable(DnsFailure::ServFail));
        assert_eq!(combine(Err(DnsFailure::Timeout), Ok(vec![])), Resolution::Unavailable(DnsFailure::Timeout));
        assert_eq!(combine(Ok(vec![a, a]), Ok(vec![b])), Resolution::Addresses(vec![a, b]));
        assert_eq!(combine(Ok(vec![]), Ok(vec![])), Resolution::NotFound);
    }

    #[test]
    fn builds_outside_a_runtime() {
        let server: SocketAddr = "127.0.0.1:53".parse().unwrap();
        HickoryResolver::new(Some(&[server]), Duration::from_secs(1)).unwrap();
        HickoryResolver::from_resolv_conf(
            "nameserver 10.96.0.10\nsearch a.svc.cluster.local\n",
            53,
            Duration::from_secs(1),
        )
        .unwrap();
    }

    #[test]
    fn rejects_config_without_nameservers() {
        let err = HickoryResolver::new(Some(&[]), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, DnsError::NoNameservers), "{err}");
        let err = HickoryResolver::from_resolv_conf("search example.com\n", 53, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, DnsError::InvalidConfig(_)), "{err}");
    }
}
