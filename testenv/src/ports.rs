//! Free TCP ports for the components a test starts.
//!
//! A port the kernel hands out for `bind(0)` comes from its ephemeral range, the same range it
//! draws the local ports of outgoing connections from: between the moment a test picks it and the
//! moment a component listens on it, a connection (the apiserver dialling a kubelet on the
//! machine's own address, say) may take it. Ports here come from below that range, are checked
//! free on every address, and taken in turn, so one process is not handed a port twice before it
//! has gone round the whole range.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Error;

/// The lowest port handed out: above the well-known and registered ports components use
/// (the kubelet's 10250, the controller manager's 10257, ...).
const LOWEST: u16 = 15000;

/// The kernel's default lowest ephemeral port, when `ip_local_port_range` cannot be read.
const DEFAULT_EPHEMERAL_LOW: u16 = 32768;

/// Where this process looks next.
static NEXT: Mutex<Option<u16>> = Mutex::new(None);

/// A TCP port that was free on every address a moment ago, outside the kernel's ephemeral range,
/// and the next such port after the one this process was handed last (another process may still
/// take it before it is used).
pub fn free_port() -> Result<u16, Error> {
    let range = port_range();
    let span = range.end - range.start;
    let mut state = NEXT.lock().unwrap_or_else(PoisonError::into_inner);
    let next = state.get_or_insert_with(|| range.start + starting_offset(span));
    for _ in 0..span {
        let candidate = *next;
        *next = if candidate + 1 >= range.end { range.start } else { candidate + 1 };
        if is_free(candidate) {
            return Ok(candidate);
        }
    }
    Err(Error::Unexpected(format!("no free port in {range:?}")))
}

/// The ports handed out: from [`LOWEST`] to the kernel's ephemeral range (at least 1000 of them).
fn port_range() -> Range<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_LOW);
    LOWEST..ephemeral_low.max(LOWEST + 1000)
}

/// Where a process starts looking: apart for processes started together, so that test programs run
/// side by side rarely try the same ports.
fn starting_offset(span: u16) -> u16 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|now| now.subsec_nanos()).unwrap_or_default();
    let mixed = std::process::id().wrapping_mul(7919).wrapping_add(nanos);
    u16::try_from(mixed % u32::from(span)).unwrap_or_default()
}

/// Whether nothing listens on or is bound to `port`, on any IPv4 or IPv6 address.
fn is_free(port: u16) -> bool {
    // One after the other: `[::]` also covers IPv4, so it would collide with the first listener.
    if TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).is_err() {
        return false;
    }
    // A machine without IPv6 cannot bind `[::]` at all; only a port in use counts against it.
    let v6 = TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)));
    !matches!(v6, Err(error) if error.kind() == ErrorKind::AddrInUse)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use socket2::{Domain, Socket, Type};

    use super::*;

    #[test]
    fn ports_are_outside_the_ephemeral_range_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice: {ports:?}");
        for port in ports {
            assert!(port_range().contains(&port), "{port} is outside {:?}", port_range());
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }

    #[test]
    fn a_port_in_use_is_not_free() {
        let port = free_port().unwrap();
        let _listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).unwrap();
        assert!(!is_free(port));
    }

    #[test]
    fn a_port_in_use_on_ipv6_only_is_not_free() {
        let port = free_port().unwrap();
        let socket = Socket::new(Domain::IPV6, Type::STREAM, None).unwrap();
        socket.set_only_v6(true).unwrap();
        socket.bind(&SocketAddr::from((Ipv6Addr::LOCALHOST, port)).into()).unwrap();
        socket.listen(1).unwrap();
        assert!(!is_free(port));
    }
}
