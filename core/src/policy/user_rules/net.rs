//! IP addresses and prefixes for the rules, with the names and semantics of the Kubernetes CEL
//! library (`k8s.io/apiserver/pkg/cel/library`, `ip.go` and `cidr.go`) that ValidatingAdmissionPolicy
//! offers: `ip()`, `isIP()`, `ip.isCanonical()`, `cidr()`, `isCIDR()`, `string()`, and the methods
//! `family`, `isUnspecified`, `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`,
//! `isGlobalUnicast` of an IP and `containsIP`, `containsCIDR`, `ip`, `masked`, `prefixLength` of
//! a CIDR. Parsing follows Go's `net/netip` as that library uses it: no leading zeros in IPv4
//! octets or in a prefix length, no zone, no IPv4-mapped IPv6 address.

use std::any::Any;
use std::net::IpAddr;

use cel::common::types::{CelBool, CelInt, CelString, Kind, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The CEL type of an IP address, named as in Kubernetes.
static IP_TYPE: Type = Type::simple_type(Kind::Opaque, "net.IP");
/// The CEL type of a prefix, named as in Kubernetes.
static CIDR_TYPE: Type = Type::simple_type(Kind::Opaque, "net.CIDR");

/// An IP address: IPv4, or IPv6 that is not IPv4-mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ip(IpAddr);

/// A prefix as written: its address (not masked) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

/// Parses an address as Go's `netip.ParseAddr` does, refusing IPv4-mapped IPv6 addresses.
/// Rust's parser, like Go's, refuses leading zeros in IPv4 octets and zones.
fn parse_ip(text: &str) -> Result<IpAddr, NotIp> {
    let addr: IpAddr = text.parse().map_err(|_| NotIp::Syntax(text.to_owned()))?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(NotIp::Ipv4Mapped(text.to_owned()));
    }
    Ok(addr)
}

/// Why a text is not an IP address for the rules, as Kubernetes says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotIp {
    /// Not an address.
    #[error("IP Address {0:?} parse error during conversion from string")]
    Syntax(String),
    /// An IPv4-mapped IPv6 address.
    #[error("IPv4-mapped IPv6 address {0:?} is not allowed")]
    Ipv4Mapped(String),
}

/// Why a text is not a prefix for the rules, as Kubernetes says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network address parse error during conversion from string: {text:?}: {why}")]
struct NotCidr {
    /// The text.
    text: String,
    /// What is wrong with it.
    why: CidrProblem,
}

/// What is wrong with a prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum CidrProblem {
    /// No slash.
    #[error("no '/'")]
    NoSlash,
    /// The address before the slash.
    #[error("{0}")]
    Address(NotIp),
    /// The length is not decimal digits without a leading zero.
    #[error("bad bits after slash")]
    BadBits,
    /// The length is longer than the address.
    #[error("prefix length out of range")]
    LengthOutOfRange,
}

/// Parses a prefix as Go's `netip.ParsePrefix` does: the address, then a length of decimal
/// digits without a sign or a leading zero, at most 32 or 128.
fn parse_cidr(text: &str) -> Result<Cidr, NotCidr> {
    let error = |why| NotCidr { text: text.to_owned(), why };
    let (address, bits) = text.rsplit_once('/').ok_or_else(|| error(CidrProblem::NoSlash))?;
    let addr = parse_ip(address).map_err(|e| error(CidrProblem::Address(e)))?;
    let digits = !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit());
    if !digits || (bits.len() > 1 && bits.starts_with('0')) {
        return Err(error(CidrProblem::BadBits));
    }
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match bits.parse::<u8>() {
        Ok(bits) if bits <= max => Ok(Cidr { addr, bits }),
        _ => Err(error(CidrProblem::LengthOutOfRange)),
    }
}

/// The address as a 128-bit number and its width in bits.
fn bits_of(addr: IpAddr) -> (u128, u8) {
    match addr {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

impl Cidr {
    /// True when `addr` is of the same family and its first `bits` bits are the prefix's.
    fn contains(&self, addr: IpAddr) -> bool {
        self.addr.is_ipv4() == addr.is_ipv4() && same_prefix(self.addr, addr, self.bits)
    }

    /// Go's `Prefix.Overlaps(other) && Bits() <= other.Bits()`: `other` lies inside.
    fn contains_cidr(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.bits <= other.bits
            && same_prefix(self.addr, other.addr, self.bits)
    }

    fn masked(&self) -> Cidr {
        let (value, width) = bits_of(self.addr);
        let kept = value & !low_bits(width - self.bits);
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::from(u32::try_from(kept).unwrap_or_default().to_be_bytes()),
            IpAddr::V6(_) => IpAddr::from(kept.to_be_bytes()),
        };
        Cidr { addr, bits: self.bits }
    }
}

/// A mask of the `count` lowest bits.
fn low_bits(count: u8) -> u128 {
    if count >= 128 { u128::MAX } else { (1u128 << count) - 1 }
}

/// True when the first `bits` bits of `a` and `b` (of one family) are equal.
fn same_prefix(a: IpAddr, b: IpAddr, bits: u8) -> bool {
    let ((a, width), (b, _)) = (bits_of(a), bits_of(b));
    (a ^ b) & !low_bits(width - bits) == 0
}

/// Go's `netip.Addr.String()`: dotted IPv4, RFC 5952 IPv6 (Rust prints both the same way for
/// the addresses `ip()` accepts).
fn show(addr: IpAddr) -> String {
    addr.to_string()
}

macro_rules! opaque_val {
    ($rust:ty, $cel:ident) => {
        impl Val for $rust {
            fn get_type(&self) -> &Type {
                &$cel
            }
            fn cel_type() -> &'static Type {
                &$cel
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$rust>().is_some_and(|other| other == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(*self)
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }
        impl StaticVal for $rust {}
    };
}
opaque_val!(Ip, IP_TYPE);
opaque_val!(Cidr, CIDR_TYPE);

fn failed(function: &str, why: impl std::fmt::Display) -> ExecutionError {
    ExecutionError::function_error(function, why)
}

fn ip(text: &CelString) -> Result<Ip, ExecutionError> {
    parse_ip(text.inner()).map(Ip).map_err(|e| failed("ip", e))
}

fn is_ip(text: &CelString) -> CelBool {
    parse_ip(text.inner()).is_ok().into()
}

fn ip_is_canonical(text: &CelString) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip(text.inner()).map_err(|e| failed("ip.isCanonical", e))?;
    Ok((show(addr) == text.inner()).into())
}

fn ip_to_string(ip: &Ip) -> CelString<'static> {
    show(ip.0).into()
}

fn family(ip: &Ip) -> CelInt {
    (if ip.0.is_ipv4() { 4 } else { 6 }).into()
}

fn is_unspecified(ip: &Ip) -> CelBool {
    ip.0.is_unspecified().into()
}

fn is_loopback(ip: &Ip) -> CelBool {
    ip.0.is_loopback().into()
}

/// Go: 224.0.0.0/24, or an IPv6 multicast address of link scope (ffx2::/16).
fn is_link_local_multicast(ip: &Ip) -> CelBool {
    match ip.0 {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
    .into()
}

/// Go: 169.254.0.0/16 or fe80::/10.
fn link_local_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    link_local_unicast(ip.0).into()
}

/// Go: not unspecified, loopback, multicast, link-local unicast or the IPv4 broadcast address
/// (private and unique-local addresses are global unicast).
fn is_global_unicast(ip: &Ip) -> CelBool {
    let broadcast = matches!(ip.0, IpAddr::V4(v4) if v4.is_broadcast());
    (!broadcast && !ip.0.is_unspecified() && !ip.0.is_loopback() && !ip.0.is_multicast() && !link_local_unicast(ip.0))
        .into()
}

fn cidr(text: &CelString) -> Result<Cidr, ExecutionError> {
    parse_cidr(text.inner()).map_err(|e| failed("cidr", e))
}

fn is_cidr(text: &CelString) -> CelBool {
    parse_cidr(text.inner()).is_ok().into()
}

fn cidr_to_string(cidr: &Cidr) -> CelString<'static> {
    format!("{}/{}", show(cidr.addr), cidr.bits).into()
}

fn contains_ip(cidr: &Cidr, ip: &Ip) -> CelBool {
    cidr.contains(ip.0).into()
}

fn contains_ip_string(cidr: &Cidr, text: &CelString) -> Result<CelBool, ExecutionError> {
    Ok(contains_ip(cidr, &self::ip(text)?))
}

fn contains_cidr(cidr: &Cidr, other: &Cidr) -> CelBool {
    cidr.contains_cidr(other).into()
}

fn contains_cidr_string(cidr: &Cidr, text: &CelString) -> Result<CelBool, ExecutionError> {
    Ok(contains_cidr(cidr, &self::cidr(text)?))
}

fn cidr_ip(cidr: &Cidr) -> Ip {
    Ip(cidr.addr)
}

fn masked(cidr: &Cidr) -> Cidr {
    cidr.masked()
}

fn prefix_length(cidr: &Cidr) -> CelInt {
    i64::from(cidr.bits).into()
}

/// Adds the library to `env`.
pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(IP_TYPE.to_owned())?;
    env.add_type(CIDR_TYPE.to_owned())?;
    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>)?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn ip_is_canonical: (CelString) -> Result<CelBool>, name = "ip.isCanonical")?;
    cel::add_overload!(env, fn ip_to_string: (Ip) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt)?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool)?;
    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>)?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn cidr_to_string: (Cidr) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr)?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt)?;
    Ok(())
}

#[cfg(test)]
mod tests;
