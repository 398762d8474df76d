//! Listen addresses in the Go tool's syntax (`:8080`, `127.0.0.1:8080`, `[::1]:8081`), so
//! `METRICS_BIND_ADDRESS` and `HEALTH_PROBE_BIND_ADDRESS` values carry over.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Where to listen: every interface (`:8080`) or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindAddress {
    /// `:port`: `[::]`, which on Linux also accepts IPv4 (the admin server falls back to `0.0.0.0`
    /// where IPv6 is unavailable).
    AnyHost(u16),
    /// One address and port.
    Exact(SocketAddr),
}

/// A listen address that is not Go's `[host]:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindAddressError {
    /// The address is empty.
    #[error("empty bind address: give host:port, for example :8080 or 127.0.0.1:8080")]
    Empty,
    /// The address is not `[host]:port` with an IP address (or `localhost`) as host.
    #[error("invalid bind address {address:?}: {reason}")]
    Invalid {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl BindAddress {
    /// Parses `:8080` (every interface), `0.0.0.0:8080`, `127.0.0.1:0`, `localhost:8080`,
    /// `[::1]:8081`. An empty address, `0`, a host name other than `localhost`, an unbracketed
    /// IPv6 address or a missing or non-numeric port is an error.
    pub fn parse(text: &str) -> Result<BindAddress, BindAddressError> {
        if text.trim().is_empty() {
            return Err(BindAddressError::Empty);
        }
        if text == "0" {
            return Err(invalid(text, "disabling a server with \"0\" is not supported; give host:port such as :8080"));
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let Some((inner, after)) = rest.split_once(']') else {
                return Err(invalid(text, "missing ']' after the IPv6 address"));
            };
            let Some(port) = after.strip_prefix(':') else {
                return Err(invalid(text, "missing port; give [address]:port, for example [::1]:8080"));
            };
            match inner.parse::<Ipv6Addr>() {
                Ok(ip) => (Some(IpAddr::V6(ip)), port),
                Err(_) => return Err(invalid(text, format!("{inner:?} is not an IPv6 address"))),
            }
        } else {
            let Some((host, port)) = text.rsplit_once(':') else {
                return Err(invalid(text, "missing port; give host:port, for example :8080"));
            };
            if host.contains(':') {
                return Err(invalid(text, "an IPv6 address must be in brackets, for example [::1]:8080"));
            }
            let ip = if host.is_empty() {
                None
            } else if host.eq_ignore_ascii_case("localhost") {
                Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
            } else {
                match host.parse::<Ipv4Addr>() {
                    Ok(ip) => Some(IpAddr::V4(ip)),
                    Err(_) => return Err(invalid(text, format!("host {host:?} is not an IP address or localhost"))),
                }
            };
            (ip, port)
        };
        // Digits only: `u16::from_str` would also take `+80`.
        let port: u16 = match port.parse() {
            Ok(number) if port.bytes().all(|b| b.is_ascii_digit()) => number,
            _ => return Err(invalid(text, format!("port {port:?} is not a number from 0 to 65535"))),
        };
        Ok(match host {
            None => BindAddress::AnyHost(port),
            Some(ip) => BindAddress::Exact(SocketAddr::new(ip, port)),
        })
    }

    /// The socket address it stands for: `:port` is `[::]:port`.
    pub fn socket_addr(self) -> SocketAddr {
        match self {
            BindAddress::AnyHost(port) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            BindAddress::Exact(address) => address,
        }
    }
}

impl std::fmt::Display for BindAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindAddress::AnyHost(port) => write!(f, ":{port}"),
            BindAddress::Exact(address) => write!(f, "{address}"),
        }
    }
}

fn invalid(address: &str, reason: impl Into<String>) -> BindAddressError {
    BindAddressError::Invalid { address: address.to_owned(), reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_host_is_wildcard() {
        assert_eq!(BindAddress::parse(":8080").unwrap(), BindAddress::AnyHost(8080));
        assert_eq!(BindAddress::parse("localhost:1").unwrap(), BindAddress::Exact("127.0.0.1:1".parse().unwrap()));
    }

    #[test]
    fn go_forms_are_accepted() {
        let cases = [
            (":8080", "[::]:8080"),
            (":0", "[::]:0"),
            ("0.0.0.0:8080", "0.0.0.0:8080"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("localhost:8081", "127.0.0.1:8081"),
            ("[::1]:8081", "[::1]:8081"),
            ("[::]:9090", "[::]:9090"),
        ];
        for (text, expected) in cases {
            let parsed = BindAddress::parse(text).unwrap_or_else(|e| panic!("{text}: {e}")).socket_addr();
            assert_eq!(parsed, expected.parse::<SocketAddr>().unwrap(), "{text}");
        }
    }

    #[test]
    fn bad_forms_are_rejected() {
        assert!(matches!(BindAddress::parse(""), Err(BindAddressError::Empty)));
        assert!(matches!(BindAddress::parse("  "), Err(BindAddressError::Empty)));
        for text in [
            "0",
            "8080",
            "127.0.0.1",
            ":",
            ":http",
            ":+80",
            ":65536",
            ":-1",
            "::1:8080",
            "[::1]",
            "[10.0.0.1]:80",
            "example.com:8080",
            "256.0.0.1:80",
            "127.0.0.1:80:80",
        ] {
            let err = BindAddress::parse(text).expect_err(text);
            assert!(matches!(err, BindAddressError::Invalid { .. }), "{text}: {err}");
            assert!(err.to_string().contains(&format!("{text:?}")), "the message names the address: {err}");
        }
    }
}
