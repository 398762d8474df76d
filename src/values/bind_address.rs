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
        reason: NotBindAddress,
    },
}

/// What is wrong with a listen address that is not Go's `[host]:port`; the parts quoted are the
/// address's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBindAddress {
    /// `0`, which turns a server off only where the flag says so.
    #[error("disabling a server with \"0\" is not supported; give host:port such as :8080")]
    Zero,
    /// `[` without its `]`.
    #[error("missing ']' after the IPv6 address")]
    Unclosed,
    /// `[address]` without `:port`.
    #[error("missing port; give [address]:port, for example [::1]:8080")]
    NoBracketedPort,
    /// Between the brackets, not an IPv6 address.
    #[error("{0:?} is not an IPv6 address")]
    NotIpv6(String),
    /// No `:port`.
    #[error("missing port; give host:port, for example :8080")]
    NoPort,
    /// An IPv6 address without brackets.
    #[error("an IPv6 address must be in brackets, for example [::1]:8080")]
    Unbracketed,
    /// A host that is neither an IP address nor `localhost`.
    #[error("host {0:?} is not an IP address or localhost")]
    NotHost(String),
    /// A port that is not a number from 0 to 65535.
    #[error("port {0:?} is not a number from 0 to 65535")]
    NotPort(String),
}

impl BindAddress {
    /// Parses `:8080` (every interface), `0.0.0.0:8080`, `127.0.0.1:0`, `localhost:8080`,
    /// `[::1]:8081`. An empty address, `0`, a host name other than `localhost`, an unbracketed
    /// IPv6 address or a missing or non-numeric port is an error.
    pub fn parse(text: &str) -> Result<BindAddress, BindAddressError> {
        let invalid = |reason: NotBindAddress| BindAddressError::Invalid { address: text.to_owned(), reason };
        if text.trim().is_empty() {
            return Err(BindAddressError::Empty);
        }
        if text == "0" {
            return Err(invalid(NotBindAddress::Zero));
        }
        let (host, port) = match text.strip_prefix('[') {
            Some(rest) => {
                let (inner, after) = rest.split_once(']').ok_or_else(|| invalid(NotBindAddress::Unclosed))?;
                let port = after.strip_prefix(':').ok_or_else(|| invalid(NotBindAddress::NoBracketedPort))?;
                let ip = inner.parse::<Ipv6Addr>().map_err(|_| invalid(NotBindAddress::NotIpv6(inner.to_owned())))?;
                (Some(IpAddr::V6(ip)), port)
            }
            None => {
                let (host, port) = text.rsplit_once(':').ok_or_else(|| invalid(NotBindAddress::NoPort))?;
                let ip = match host {
                    "" => None,
                    _ if host.contains(':') => {
                        return Err(invalid(NotBindAddress::Unbracketed));
                    }
                    _ if host.eq_ignore_ascii_case("localhost") => Some(Ipv4Addr::LOCALHOST),
                    _ => Some(host.parse().map_err(|_| invalid(NotBindAddress::NotHost(host.to_owned())))?),
                };
                (ip.map(IpAddr::V4), port)
            }
        };
        // Digits only: `u16::from_str` would also take `+80`.
        let port: u16 = match port.parse() {
            Ok(number) if port.bytes().all(|b| b.is_ascii_digit()) => number,
            _ => return Err(invalid(NotBindAddress::NotPort(port.to_owned()))),
        };
        Ok(host.map_or(BindAddress::AnyHost(port), |ip| BindAddress::Exact(SocketAddr::new(ip, port))))
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
            (":8080", ":8080"),
            (":0", ":0"),
            ("0.0.0.0:8080", "0.0.0.0:8080"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("localhost:8081", "127.0.0.1:8081"),
            ("[::1]:8081", "[::1]:8081"),
            ("[::]:9090", "[::]:9090"),
        ];
        for (text, expected) in cases {
            let parsed = BindAddress::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(parsed.to_string(), expected, "{text}");
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
