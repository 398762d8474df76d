//! The one table of identities no node may hold, whatever the flags, and where each entry comes
//! from. The cluster-identity check reads it for every SAN, the DNS-name syntax check for names a
//! C resolver dials as an address, and serving renewal for the addresses it will not dial.
//!
//! Names (compared in lowercase, without trailing dots):
//! - the apiserver's Service names that resolve in every pod whatever the cluster domain,
//!   `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`, and `kubernetes.default.svc.`
//!   under any domain (the Kubernetes DNS specification: `<service>.<namespace>.svc.<zone>`, found
//!   through the pod's search path; a wrong `--cluster-domain` must not open it);
//! - every name whose last label is `svc`: a Service's short name, `<service>.<namespace>.svc`
//!   (the Kubernetes DNS specification), which the pod's search path completes under the cluster
//!   domain;
//! - `svc.<cluster domain>` and every name under it (Service names), and `pod.<cluster domain>`
//!   and every name under it (pod names, `a-b-c-d.<namespace>.pod.<zone>`, which the cluster DNS
//!   answers with the address written in the name), and every name with an inner label `pod`
//!   (the same pod names under a cluster domain other than `--cluster-domain`);
//! - `localhost` and every name under it (RFC 6761 §6.3);
//! - the loopback aliases of `/etc/hosts`: Debian's and the kubelet's own pod hosts file
//!   (`ip6-localhost`, `ip6-loopback`, `ip6-localnet`, `ip6-mcastprefix`, `ip6-allnodes`,
//!   `ip6-allrouters`), Red Hat's (`localhost.localdomain`, `localhost4`, `localhost4.localdomain4`,
//!   `localhost6`, `localhost6.localdomain6`);
//! - cloud metadata names: `metadata.google.internal` and `metadata`, the same found through the
//!   VM's search path (Google Cloud, "About VM metadata"); `instance-data` and
//!   `instance-data.ec2.internal`, its name in the `ec2.internal` domain of AWS's DNS (AWS,
//!   "Instance metadata and user data"; cloud-init's EC2 datasource dials `instance-data.`).
//!
//! Names a C resolver dials as IPv4 addresses are no host names (checked with the DNS-name syntax):
//! `inet_aton(3)` reads one to four parts, each decimal, octal (`0177`) or hexadecimal (`0x7f`),
//! so `127.1`, `0177.0.0.1`, `0x7f000001` and `2130706433` are all `127.0.0.1`; a name whose last
//! label is all digits, or `0x` and hexadecimal digits, is refused, as the WHATWG URL standard's
//! host parser ("ends in a number") and RFC 3696 §2 (no all-numeric top-level domain) do.
//!
//! IPv4 addresses: `0.0.0.0/8` "this network" (RFC 791, RFC 6890), `127.0.0.0/8` loopback
//! (RFC 1122), `169.254.0.0/16` link-local (RFC 3927), where clouds serve instance metadata
//! (`169.254.169.254`: AWS, Google Cloud, Azure, OpenStack; `169.254.170.2`: AWS ECS task
//! metadata), `224.0.0.0/4` multicast (RFC 5771), `255.255.255.255` broadcast (RFC 919),
//! `100.100.100.200` (Alibaba Cloud's metadata service, "Instance metadata") and `168.63.129.16`
//! (Azure's WireServer, "What is IP address 168.63.129.16?").
//!
//! IPv6 addresses: `::` and `::1` (RFC 4291), `fe80::/10` link-local (RFC 4291), `fec0::/10`
//! site-local (deprecated by RFC 3879), `ff00::/8` multicast (RFC 4291), the NAT64 prefixes
//! `64:ff9b::/96` (RFC 6052) and `64:ff9b:1::/48` (RFC 8215) and Teredo's `2001::/32` (RFC 4380),
//! whose addresses stand for IPv4 hosts, and AWS's IPv6 endpoints `fd00:ec2::254` (instance
//! metadata), `fd00:ec2::253` (DNS) and `fd00:ec2::123` (time). And every IPv6 address that embeds a
//! reserved IPv4 address: IPv4-mapped `::ffff:0:0/96` and IPv4-compatible `::/96` (RFC 4291
//! §2.5.5), IPv4-translated `::ffff:0:0:0/96` (RFC 2765 §2.1) and 6to4 `2002::/16` (RFC 3056 §2).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The Service names of the apiserver that resolve inside every pod, whatever the cluster domain.
const APISERVER_NAMES: [&str; 3] = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];
/// The apiserver's Service name followed by any domain.
const APISERVER_UNDER_ANY_DOMAIN: &str = "kubernetes.default.svc.";
/// RFC 6761 reserves the whole `localhost.` domain for loopback: every name under it too.
const LOCALHOST: &str = "localhost";
/// The last label of a Service's short name (`<service>.<namespace>.svc`).
const SERVICE_LABEL: &str = "svc";
/// The label of pod DNS names (`a-b-c-d.<namespace>.pod.<cluster domain>`).
const POD_LABEL: &str = "pod";
/// Loopback and multicast aliases of `/etc/hosts` (Debian, Red Hat, the kubelet's pod hosts file).
const HOSTS_ALIASES: [&str; 11] = [
    "localhost.localdomain",
    "localhost4",
    "localhost4.localdomain4",
    "localhost6",
    "localhost6.localdomain6",
    "ip6-localhost",
    "ip6-loopback",
    "ip6-localnet",
    "ip6-mcastprefix",
    "ip6-allnodes",
    "ip6-allrouters",
];
/// Names of cloud metadata services: Google Cloud's, and AWS's.
const METADATA_NAMES: [&str; 4] =
    ["metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"];

/// Reserved IPv4 ranges: network, prefix length, what it is.
const V4: [(Ipv4Addr, u8, &str); 7] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this network\" (0.0.0.0/8)"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback (127.0.0.0/8)"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local (169.254.0.0/16, cloud metadata)"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast (224.0.0.0/4)"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "the broadcast address (255.255.255.255)"),
    (Ipv4Addr::new(100, 100, 100, 200), 32, "Alibaba Cloud's metadata service (100.100.100.200)"),
    (Ipv4Addr::new(168, 63, 129, 16), 32, "Azure's WireServer (168.63.129.16)"),
];

/// Reserved IPv6 ranges: network, prefix length, what it is.
const V6: [(Ipv6Addr, u8, &str); 11] = [
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified (::)"),
    (Ipv6Addr::LOCALHOST, 128, "loopback (::1)"),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local (fe80::/10)"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site-local (fec0::/10)"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast (ff00::/8)"),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, "NAT64 (64:ff9b::/96), an IPv4 host's address"),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, "local-use NAT64 (64:ff9b:1::/48), an IPv4 host's address"),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, "Teredo (2001::/32), an IPv4 tunnel's address"),
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), 128, "AWS's instance metadata service (fd00:ec2::254)"),
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253), 128, "AWS's DNS server (fd00:ec2::253)"),
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123), 128, "AWS's time server (fd00:ec2::123)"),
];

/// What kind of address no node may hold `ip` is, or `None`. An IPv6 address that embeds an IPv4
/// address (mapped, translated, compatible, 6to4) is reserved when the embedded one is.
pub fn reserved_address(ip: IpAddr) -> Option<ReservedKind> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4).map(ReservedKind::Range),
        IpAddr::V6(v6) => v6_kind(v6).map(ReservedKind::Range).or_else(|| {
            let (how, v4) = embedded_ipv4(v6)?;
            v4_kind(v4).map(|kind| ReservedKind::Embedding { how, v4, kind })
        }),
    }
}

/// What kind of address no node may hold an address is ([`reserved_address`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedKind {
    /// An address of a reserved range, named as the table names it.
    Range(&'static str),
    /// An IPv6 address that embeds a reserved IPv4 address.
    Embedding {
        /// How it embeds it, e.g. `6to4 (2002::/16)`.
        how: &'static str,
        /// The IPv4 address embedded.
        v4: Ipv4Addr,
        /// The embedded address's range, named.
        kind: &'static str,
    },
}

impl std::fmt::Display for ReservedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReservedKind::Range(kind) => f.write_str(kind),
            ReservedKind::Embedding { how, v4, kind } => write!(f, "{how} embedding {v4}, {kind}"),
        }
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    V4.iter()
        .find(|(net, len, _)| bits >> (32 - u32::from(*len)) == u32::from(*net) >> (32 - u32::from(*len)))
        .map(|(_, _, kind)| *kind)
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    V6.iter()
        .find(|(net, len, _)| bits >> (128 - u32::from(*len)) == u128::from(*net) >> (128 - u32::from(*len)))
        .map(|(_, _, kind)| *kind)
}

/// The host `ip` stands for: the IPv4 address an IPv6 address embeds (IPv4-mapped, translated,
/// compatible, 6to4), else `ip` itself. Every spelling of one IPv4 host compares equal through it:
/// `10.96.0.1`, `::ffff:10.96.0.1`, `::ffff:0:a60:1` and `2002:a60:1::/48`.
pub(crate) fn host(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(ip, |(_, v4)| IpAddr::V4(v4)),
        IpAddr::V4(_) => ip,
    }
}

/// The IPv4 address an IPv6 address of `::ffff:0:0/96`, `::ffff:0:0:0/96`, `::/96` or
/// `2002::/16` carries, and which form it is.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<(&'static str, Ipv4Addr)> {
    let o = ip.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let segments = ip.segments();
    match segments[..6] {
        [0, 0, 0, 0, 0, 0xffff] => Some(("IPv4-mapped (::ffff:0:0/96)", low)),
        [0, 0, 0, 0, 0xffff, 0] => Some(("IPv4-translated (::ffff:0:0:0/96)", low)),
        [0, 0, 0, 0, 0, 0] => Some(("IPv4-compatible (::/96)", low)),
        [0x2002, ..] => Some(("6to4 (2002::/16)", Ipv4Addr::new(o[2], o[3], o[4], o[5]))),
        _ => None,
    }
}

/// Why `name` (as written in the request) names the apiserver, a Service or pod of the cluster,
/// loopback or a metadata service, or `None`. The name is compared in lowercase and without
/// trailing dots, as resolvers treat it.
pub(crate) fn reserved_name(name: &str, cluster_domain: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let name = lower.trim_end_matches('.');
    let services = format!("svc.{cluster_domain}");
    let pods = format!("{POD_LABEL}.{cluster_domain}");
    let labels: Vec<&str> = name.split('.').collect();
    let inner = labels.get(1..labels.len().saturating_sub(1)).unwrap_or_default();
    let inner_pod_label = inner.contains(&POD_LABEL);
    if APISERVER_NAMES.contains(&name) || name.starts_with(APISERVER_UNDER_ANY_DOMAIN) {
        Some(format!("DNS SAN {name:?} is the apiserver's Service name"))
    } else if within(name, &services) {
        Some(format!("DNS SAN {name:?} lies in the cluster's Service domain {services:?} (--cluster-domain)"))
    } else if within(name, &pods) {
        Some(format!("DNS SAN {name:?} lies in the cluster's pod domain {pods:?} (--cluster-domain)"))
    } else if inner_pod_label {
        Some(format!("DNS SAN {name:?} has the form of a pod's DNS name (<address>.<namespace>.pod.<domain>)"))
    } else if labels.last() == Some(&SERVICE_LABEL) {
        Some(format!("DNS SAN {name:?} has the form of a Service's short name (<service>.<namespace>.svc)"))
    } else if within(name, LOCALHOST) {
        Some(format!("DNS SAN {name:?} lies in the reserved loopback domain {LOCALHOST:?} (RFC 6761)"))
    } else if HOSTS_ALIASES.contains(&name) {
        Some(format!("DNS SAN {name:?} is a loopback alias of /etc/hosts"))
    } else if METADATA_NAMES.contains(&name) {
        Some(format!("DNS SAN {name:?} is a cloud metadata service"))
    } else {
        None
    }
}

/// `name` is `domain` or a name under it.
fn within(name: &str, domain: &str) -> bool {
    name == domain || name.strip_suffix(domain).is_some_and(|head| head.ends_with('.'))
}

/// A C resolver (`inet_aton`) dials `name` as an IPv4 address, or refuses it as a malformed one:
/// its last label (one trailing dot aside) is all digits, or `0x` followed by hexadecimal digits.
pub(crate) fn reads_as_ipv4(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    match hex {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_reserved_by_whole_labels() {
        let reserved = |name| reserved_name(name, "cluster.local").is_some();
        assert!(reserved("svc.cluster.local"));
        assert!(reserved("a.svc.cluster.local."));
        assert!(!reserved("asvc.cluster.local"));
        assert!(!reserved("svc.cluster.local.example.com"));
        assert!(reserved("LOCALHOST.."));
        assert!(!reserved("mylocalhost"));
        assert!(reserved("kubernetes.default.svc.example.com"));
        assert!(!reserved("kubernetes.default.svcs.example.com"));
        assert!(reserved("pod.cluster.local"));
        assert!(reserved("10-0-0-1.default.pod.example.com"));
        assert!(!reserved("pod.example.com"));
        assert!(!reserved("a.pods.example.com"));
        assert!(!reserved("a.example.pod"));
    }

    #[test]
    fn short_service_names_and_metadata_names_are_reserved_in_any_case_and_with_trailing_dots() {
        let reserved = |name| reserved_name(name, "cluster.local");
        for name in [
            "svc",
            "a.svc",
            "my-service.my-namespace.svc",
            "My-Service.My-Namespace.SVC.",
            "a.b.svc..",
            "metadata",
            "METADATA.",
            "instance-data",
            "Instance-Data.",
            "instance-data.ec2.internal",
            "INSTANCE-DATA.EC2.INTERNAL.",
        ] {
            assert!(reserved(name).is_some(), "{name}");
        }
        assert!(reserved("a.b.svc").unwrap().contains("a Service's short name"));
        assert!(reserved("instance-data").unwrap().contains("a cloud metadata service"));
        for name in ["a.svcs", "a.svc.example.com", "svc-a", "metadata.example.com", "instance-data.example.com"] {
            assert!(reserved(name).is_none(), "{name}");
        }
    }

    #[test]
    fn an_address_stands_for_the_ipv4_host_it_embeds() {
        let host = |ip: &str| host(ip.parse().unwrap()).to_string();
        assert_eq!(host("2002:a60:1::"), "10.96.0.1");
        assert_eq!(host("2002:a60:1:ffff::7"), "10.96.0.1");
        assert_eq!(host("::ffff:0:a60:1"), "10.96.0.1");
        assert_eq!(host("::ffff:10.96.0.1"), "10.96.0.1");
        assert_eq!(host("::a60:1"), "10.96.0.1");
        assert_eq!(host("10.96.0.1"), "10.96.0.1");
        assert_eq!(host("2003:a60:1::"), "2003:a60:1::");
        assert_eq!(host("fd00::a60:1"), "fd00::a60:1");
    }

    #[test]
    fn embedded_addresses_are_read_where_each_form_puts_them() {
        let kind = |ip: &str| reserved_address(ip.parse().unwrap());
        assert!(kind("2002:7f00:1::1").unwrap().to_string().contains("6to4 (2002::/16) embedding 127.0.0.1"));
        assert!(kind("2002:a00:1::1").is_none());
        assert!(kind("::ffff:0:a9fe:a9fe").unwrap().to_string().contains("embedding 169.254.169.254"));
        assert!(kind("::ffff:0:a00:1").is_none());
        assert!(kind("::7f00:1").unwrap().to_string().contains("IPv4-compatible"));
        assert!(kind("1::ffff:7f00:1").is_none());
    }

    #[test]
    fn numeric_last_labels_read_as_ipv4() {
        for name in ["127.1", "2130706433", "0x7f000001", "0X7F.1", "a.0x", "a.1."] {
            assert!(reads_as_ipv4(name), "{name}");
        }
        for name in ["a.b1", "0x7g", "1.a", "a.0xz", "a.", ""] {
            assert!(!reads_as_ipv4(name), "{name}");
        }
    }
}
