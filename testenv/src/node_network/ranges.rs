//! The documentation ranges node networks take their addresses from, and the check that this
//! machine uses none of them, read from `ip -j` output.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde_json::Value;

use crate::Error;

/// The IPv4 range of node networks: TEST-NET-2 (RFC 5737), never routed on the internet.
pub const IPV4_RANGE: &str = "198.51.100.0/24";

/// The IPv6 range of node networks: the documentation prefix (RFC 3849), never routed.
pub const IPV6_RANGE: &str = "2001:db8::/32";

/// The first address of [`IPV4_RANGE`], as a number.
pub(super) fn ipv4_base() -> u32 {
    u32::from(Ipv4Addr::new(198, 51, 100, 0))
}

/// The first address of [`IPV6_RANGE`], as a number.
pub(super) fn ipv6_base() -> u128 {
    u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0))
}

/// An error naming the first address (in `addresses`, `ip -j address show`) or route (in
/// `routes`, `ip -j route show table all` of each family) of a link whose name does not start with
/// `ours` that overlaps [`IPV4_RANGE`] or [`IPV6_RANGE`]. Default routes overlap everything and
/// say nothing of the ranges: they are skipped.
pub(super) fn check_unused(addresses: &str, routes: &[String], ours: &str) -> Result<(), Error> {
    let ranges: Vec<IpNet> = [IPV4_RANGE, IPV6_RANGE].iter().filter_map(|range| range.parse().ok()).collect();
    let theirs = |entry: &Value, key: &str| !entry[key].as_str().unwrap_or_default().starts_with(ours);
    let mut used: Vec<(IpNet, String)> = Vec::new();
    for link in parse(addresses)?.iter().filter(|link| theirs(link, "ifname")) {
        for info in link["addr_info"].as_array().into_iter().flatten() {
            let (Some(local), Some(bits)) = (info["local"].as_str(), info["prefixlen"].as_u64()) else { continue };
            let net = local.parse().ok().and_then(|ip| IpNet::new(ip, u8::try_from(bits).ok()?).ok());
            used.extend(net.map(|net| (net, format!("address {local}/{bits} of {}", link["ifname"]))));
        }
    }
    for table in routes {
        for route in parse(table)?.iter().filter(|route| theirs(route, "dev")) {
            let dst = route["dst"].as_str().unwrap_or("default");
            let net = dst.parse::<IpNet>().ok().or_else(|| dst.parse::<std::net::IpAddr>().ok().map(IpNet::from));
            used.extend(net.map(|net| (net, format!("route {route}"))));
        }
    }
    for (net, what) in used.iter().filter(|(net, _)| net.prefix_len() > 0) {
        if let Some(range) =
            ranges.iter().find(|range| range.contains(&net.network()) || net.contains(&range.network()))
        {
            return Err(Error::Network(format!(
                "this machine uses {range}, where testenv puts node networks: {what} overlaps it"
            )));
        }
    }
    Ok(())
}

/// Whether the link `ip -j address show dev LINK` describes is up with no tentative address.
pub(super) fn link_ready(shown: &str) -> bool {
    let Ok(links) = parse(shown) else { return false };
    links.iter().all(|link| {
        link["operstate"] == "UP"
            && link["addr_info"].as_array().into_iter().flatten().all(|info| info.get("tentative").is_none())
    }) && !links.is_empty()
}

fn parse(json: &str) -> Result<Vec<Value>, Error> {
    let value: Value = serde_json::from_str(json).map_err(|error| Error::Network(format!("reading ip -j: {error}")))?;
    Ok(value.as_array().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's addresses and routes, as `ip -j` printed them, with a node network's link.
    const ADDRESSES: &str = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
        {"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24},{"family":"inet6","local":"fd00::2","prefixlen":64}]},
        {"ifname":"ncsr3","addr_info":[{"family":"inet","local":"198.51.100.13","prefixlen":30}]}]"#;
    const ROUTES_V4: &str = r#"[{"dst":"default","gateway":"192.0.2.1","dev":"eth0"},{"dst":"192.0.2.0/24","dev":"eth0"},
        {"dst":"198.51.100.12/30","dev":"ncsr3"},{"type":"local","dst":"198.51.100.13","dev":"ncsr3","table":"local"}]"#;
    const ROUTES_V6: &str = r#"[{"dst":"fd00::/64","dev":"eth0"},{"dst":"default","gateway":"fd00::1","dev":"eth0"}]"#;

    fn check(addresses: &str, v4: &str, v6: &str) -> Result<(), Error> {
        check_unused(addresses, &[v4.to_owned(), v6.to_owned()], "ncsr")
    }

    #[test]
    fn default_routes_and_our_own_links_do_not_count() {
        check(ADDRESSES, ROUTES_V4, ROUTES_V6).unwrap();
    }

    #[test]
    fn an_address_inside_a_range_is_refused() {
        let addresses = ADDRESSES.replace("192.0.2.2", "198.51.100.200");
        let error = check(&addresses, ROUTES_V4, ROUTES_V6).unwrap_err().to_string();
        assert!(error.contains("198.51.100.200/24 of \"eth0\""), "{error}");
    }

    #[test]
    fn an_address_whose_network_holds_a_range_is_refused() {
        let addresses = ADDRESSES.replace(r#""fd00::2","prefixlen":64"#, r#""2001:db8:1::2","prefixlen":16"#);
        let error = check(&addresses, ROUTES_V4, ROUTES_V6).unwrap_err().to_string();
        assert!(error.contains("2001:db8::/32"), "{error}");
    }

    #[test]
    fn a_route_into_a_range_is_refused() {
        let v6 = ROUTES_V6.replace("fd00::/64", "2001:db8:ff::/48");
        let error = check(ADDRESSES, ROUTES_V4, &v6).unwrap_err().to_string();
        assert!(error.contains("2001:db8:ff::/48"), "{error}");
        let v4 = ROUTES_V4.replace(r#""dst":"192.0.2.0/24""#, r#""dst":"198.51.100.77""#);
        assert!(check(ADDRESSES, &v4, ROUTES_V6).is_err());
    }

    #[test]
    fn a_link_is_ready_when_up_without_tentative_addresses() {
        let up = r#"[{"ifname":"ncsr0","operstate":"UP","addr_info":[{"local":"2001:db8::1","prefixlen":64}]}]"#;
        assert!(link_ready(up));
        assert!(!link_ready(&up.replace("UP", "LOWERLAYERDOWN")));
        assert!(!link_ready(&up.replace(r#""prefixlen":64"#, r#""prefixlen":64,"tentative":true"#)));
        assert!(!link_ready("[]"));
    }
}
