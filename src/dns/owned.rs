//! Which records of an answer are the addresses of the name asked about.
//!
//! A resolver or forwarder may pass along records of other owners (in the answer section, or
//! additional data moved into it); they are no evidence about the name asked about, so only the A
//! and AAAA records owned by that name, or by a name on the CNAME chain that starts at it, count.

use std::net::IpAddr;

use hickory_resolver::proto::rr::rdata::CNAME;
use hickory_resolver::proto::rr::{DNSClass, Name, RData, Record, RecordType};

/// Most CNAME links followed from the name asked about; the addresses of a name further down the
/// chain do not count.
pub(super) const MAX_CNAME_LINKS: usize = 8;

/// The addresses of `record_type` (A or AAAA) that `answers` give `query`: the class IN records of
/// that type owned by `query` or by a name on the CNAME chain that starts at it. Names compare
/// case-insensitively. The chain ends after [`MAX_CNAME_LINKS`] links, at a name already on it (a
/// loop), and at a name with more than one CNAME target (ambiguous: neither is followed).
pub(super) fn owned_addresses(query: &Name, record_type: RecordType, answers: &[Record]) -> Vec<IpAddr> {
    let chain = cname_chain(query, answers);
    answers
        .iter()
        .filter(|record| record.dns_class == DNSClass::IN && chain.iter().any(|owner| same_name(owner, &record.name)))
        .filter_map(|record| match (&record.data, record_type) {
            (RData::A(a), RecordType::A) => Some(IpAddr::V4(a.0)),
            (RData::AAAA(aaaa), RecordType::AAAA) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect()
}

/// `query` and the names its CNAME records lead to, in order.
fn cname_chain<'a>(query: &'a Name, answers: &'a [Record]) -> Vec<&'a Name> {
    let mut chain = vec![query];
    let mut current = query;
    while chain.len() <= MAX_CNAME_LINKS {
        let targets: Vec<&Name> = answers
            .iter()
            .filter(|record| record.dns_class == DNSClass::IN && same_name(&record.name, current))
            .filter_map(|record| match &record.data {
                RData::CNAME(CNAME(target)) => Some(target),
                _ => None,
            })
            .collect();
        let Some((&target, others)) = targets.split_first() else {
            break;
        };
        let ambiguous = others.iter().any(|other| !same_name(other, target));
        if ambiguous || chain.iter().any(|name| same_name(name, target)) {
            break;
        }
        chain.push(target);
        current = target;
    }
    chain
}

/// DNS names are equal when their labels are, ignoring ASCII case (and the root label).
fn same_name(a: &Name, b: &Name) -> bool {
    a.eq_ignore_root(b)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use hickory_resolver::proto::rr::rdata::{A, AAAA};

    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn a(owner: &str, address: [u8; 4]) -> Record {
        Record::from_rdata(name(owner), 60, RData::A(A(Ipv4Addr::from(address))))
    }

    fn aaaa(owner: &str, address: &str) -> Record {
        Record::from_rdata(name(owner), 60, RData::AAAA(AAAA(address.parse::<Ipv6Addr>().unwrap())))
    }

    fn cname(owner: &str, target: &str) -> Record {
        Record::from_rdata(name(owner), 60, RData::CNAME(CNAME(name(target))))
    }

    fn v4(query: &str, answers: &[Record]) -> Vec<IpAddr> {
        owned_addresses(&name(query), RecordType::A, answers)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_the_owner_and_its_chain_count() {
        let answers = [
            a("evil.example.net.", [10, 6, 6, 6]),
            a("n1.example.com.", [10, 0, 0, 1]),
            aaaa("n1.example.com.", "fd00::1"),
        ];
        assert_eq!(v4("n1.example.com.", &answers), [ip("10.0.0.1")]);
        assert_eq!(owned_addresses(&name("n1.example.com."), RecordType::AAAA, &answers), [ip("fd00::1")]);
        assert_eq!(v4("n2.example.com.", &answers), Vec::<IpAddr>::new());
    }

    #[test]
    fn names_compare_case_insensitively() {
        let answers = [cname("ALIAS.example.com.", "N1.Example.COM."), a("n1.EXAMPLE.com.", [10, 0, 0, 1])];
        assert_eq!(v4("alias.EXAMPLE.com.", &answers), [ip("10.0.0.1")]);
    }

    #[test]
    fn a_cname_chain_is_followed_in_any_order() {
        let answers = [
            a("n1.example.com.", [10, 0, 0, 1]),
            cname("middle.example.net.", "n1.example.com."),
            a("other.example.com.", [10, 6, 6, 6]),
            cname("other.example.org.", "other.example.com."),
            cname("alias.example.com.", "middle.example.net."),
        ];
        assert_eq!(v4("alias.example.com.", &answers), [ip("10.0.0.1")]);
    }

    #[test]
    fn the_chain_is_bounded() {
        // alias0 -> alias1 -> ... -> aliasN, the address on aliasN.
        let chain = |links: usize| -> Vec<Record> {
            (0..links)
                .map(|i| cname(&format!("alias{i}.example.com."), &format!("alias{}.example.com.", i + 1)))
                .chain([a(&format!("alias{links}.example.com."), [10, 0, 0, 1])])
                .collect()
        };
        assert_eq!(v4("alias0.example.com.", &chain(MAX_CNAME_LINKS)), [ip("10.0.0.1")]);
        assert_eq!(v4("alias0.example.com.", &chain(MAX_CNAME_LINKS + 1)), Vec::<IpAddr>::new());
    }

    #[test]
    fn a_loop_ends_the_chain() {
        let answers = [
            cname("a.example.com.", "b.example.com."),
            cname("b.example.com.", "A.example.com."),
            a("b.example.com.", [10, 0, 0, 2]),
        ];
        assert_eq!(cname_chain(&name("a.example.com."), &answers).len(), 2);
        assert_eq!(v4("a.example.com.", &answers), [ip("10.0.0.2")]);
    }

    #[test]
    fn two_cname_targets_end_the_chain() {
        let answers = [
            cname("n1.example.com.", "good.example.com."),
            cname("n1.example.com.", "evil.example.net."),
            a("good.example.com.", [10, 0, 0, 1]),
            a("evil.example.net.", [10, 6, 6, 6]),
        ];
        assert_eq!(v4("n1.example.com.", &answers), Vec::<IpAddr>::new());
        // The same target twice is one target.
        let repeated = [
            cname("n1.example.com.", "good.example.com."),
            cname("n1.example.com.", "GOOD.example.com."),
            a("good.example.com.", [10, 0, 0, 1]),
        ];
        assert_eq!(v4("n1.example.com.", &repeated), [ip("10.0.0.1")]);
    }

    #[test]
    fn only_class_in_counts() {
        let mut chaos = a("n1.example.com.", [10, 6, 6, 6]);
        chaos.dns_class = DNSClass::CH;
        let mut chaos_cname = cname("alias.example.com.", "evil.example.net.");
        chaos_cname.dns_class = DNSClass::CH;
        let answers = [chaos, a("n1.example.com.", [10, 0, 0, 1]), chaos_cname, a("evil.example.net.", [10, 6, 6, 7])];
        assert_eq!(v4("n1.example.com.", &answers), [ip("10.0.0.1")]);
        assert_eq!(v4("alias.example.com.", &answers), Vec::<IpAddr>::new());
    }
}
