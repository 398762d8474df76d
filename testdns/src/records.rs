//! The DNS data a [`crate::DnsServer`] serves and the reply it makes to one query.

use std::collections::HashMap;
use std::fmt::Display;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_server::proto::op::ResponseCode;
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, SOA};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};

use crate::DEFAULT_TTL;

/// Longest CNAME chain followed inside the data; longer chains (or loops) answer SERVFAIL.
const MAX_CNAME_CHAIN: usize = 8;

/// DNS data to serve: a builder of A, AAAA and CNAME records.
///
/// Names are absolute whether or not they end with a dot, and compare case-insensitively.
/// Invalid names or addresses are reported by the method that takes the records
/// ([`crate::DnsServer::start`], [`crate::DnsServer::set_records`], [`crate::DnsServer::add`]).
#[derive(Debug, Clone)]
pub struct Records {
    ttl: u32,
    follow_cnames: bool,
    pub(crate) names: HashMap<LowerName, Node>,
    errors: Vec<String>,
}

/// The data of one name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    name: Name,
    a: Vec<Ipv4Addr>,
    aaaa: Vec<Ipv6Addr>,
    cname: Option<Name>,
    faults: Vec<(RecordType, Mode)>,
    /// Records of any owner sent along with every answer to a query for this name.
    extra: Vec<(Section, Name, RData)>,
}

/// The section of a response that [`Records::extra_a`] and its siblings put a record in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The answer section.
    Answer,
    /// The additional section.
    Additional,
}

/// What to do with one request.
pub(crate) enum Reply {
    /// Send nothing.
    Silent,
    /// An error response without records.
    Error(ResponseCode),
    /// An authoritative answer.
    Answer { code: ResponseCode, answers: Vec<Record>, soa: Option<Box<Record>>, additionals: Vec<Record> },
}

impl Reply {
    /// The reply a mode imposes, or `None` to answer from the records.
    pub(crate) fn imposed_by(mode: Mode) -> Option<Self> {
        match mode {
            Mode::Answer => None,
            Mode::Unresponsive => Some(Self::Silent),
            Mode::ServFail => Some(Self::Error(ResponseCode::ServFail)),
            Mode::Refused => Some(Self::Error(ResponseCode::Refused)),
        }
    }
}

impl Default for Records {
    fn default() -> Self {
        Self::new()
    }
}

impl Records {
    /// No records, TTL [`DEFAULT_TTL`], CNAMEs followed inside the data.
    pub fn new() -> Self {
        Self { ttl: DEFAULT_TTL, follow_cnames: true, names: HashMap::new(), errors: Vec::new() }
    }

    /// Sets the TTL of every answer and of negative answers (SOA TTL and minimum), in seconds.
    pub fn ttl(mut self, seconds: u32) -> Self {
        self.ttl = seconds;
        self
    }

    /// Whether an answer follows CNAMEs inside the data (the default) or stops at the first one,
    /// so that a resolver asks for its target itself, one query per link.
    pub fn follow_cnames(mut self, follow: bool) -> Self {
        self.follow_cnames = follow;
        self
    }

    /// Adds an A record, e.g. `.a("n1.example.com", "10.0.0.1")` (the address may also be an
    /// [`Ipv4Addr`]).
    pub fn a(mut self, name: &str, address: impl Display) -> Self {
        if let Some(address) = self.parse_address::<Ipv4Addr>("A", name, address)
            && let Some(node) = self.node(name)
        {
            node.a.push(address);
        }
        self
    }

    /// Adds an AAAA record, e.g. `.aaaa("n1.example.com", "fd00::1")` (the address may also be
    /// an [`Ipv6Addr`]).
    pub fn aaaa(mut self, name: &str, address: impl Display) -> Self {
        if let Some(address) = self.parse_address::<Ipv6Addr>("AAAA", name, address)
            && let Some(node) = self.node(name)
        {
            node.aaaa.push(address);
        }
        self
    }

    /// Adds an A or AAAA record depending on the address family.
    pub fn ip(self, name: &str, address: IpAddr) -> Self {
        match address {
            IpAddr::V4(v4) => self.a(name, v4),
            IpAddr::V6(v6) => self.aaaa(name, v6),
        }
    }

    /// Makes `name` an alias of `target` (which may or may not be in the data).
    pub fn cname(mut self, name: &str, target: &str) -> Self {
        if let Some(target) = self.parse(target)
            && let Some(node) = self.node(name)
        {
            node.cname = Some(target);
        }
        self
    }

    /// Sends an A record of `owner` in `section` of every answer to a query for `queried` (of any
    /// type), as a resolver or forwarder passing other records along would: `owner` need not be
    /// `queried`, nor on its CNAME chain. `queried` then exists. Answer records go first.
    pub fn extra_a(mut self, queried: &str, section: Section, owner: &str, address: impl Display) -> Self {
        if let Some(address) = self.parse_address::<Ipv4Addr>("A", owner, address) {
            self.add_extra(queried, section, owner, RData::A(A(address)));
        }
        self
    }

    /// Like [`Records::extra_a`], with an AAAA record.
    pub fn extra_aaaa(mut self, queried: &str, section: Section, owner: &str, address: impl Display) -> Self {
        if let Some(address) = self.parse_address::<Ipv6Addr>("AAAA", owner, address) {
            self.add_extra(queried, section, owner, RData::AAAA(AAAA(address)));
        }
        self
    }

    /// Like [`Records::extra_a`], with a CNAME record from `owner` to `target`.
    pub fn extra_cname(mut self, queried: &str, section: Section, owner: &str, target: &str) -> Self {
        if let Some(target) = self.parse(target) {
            self.add_extra(queried, section, owner, RData::CNAME(CNAME(target)));
        }
        self
    }

    /// Declares `name` as existing without any record: queries answer NOERROR with no records.
    pub fn exists(mut self, name: &str) -> Self {
        self.node(name);
        self
    }

    /// Makes queries for `name` and `query_type` fail as `mode` says (SERVFAIL, REFUSED or no
    /// answer at all) while other types of the name are answered; [`Mode::Answer`] clears it.
    pub fn fault(mut self, name: &str, query_type: QueryType, mode: Mode) -> Self {
        let record_type = query_type.record_type();
        if let Some(node) = self.node(name) {
            node.faults.retain(|(t, _)| *t != record_type);
            node.faults.push((record_type, mode));
        }
        self
    }

    /// Number of names in the data.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the data holds no name.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn parse(&mut self, name: &str) -> Option<Name> {
        parse_name(name).map_err(|e| self.errors.push(e)).ok()
    }

    fn parse_address<T>(&mut self, kind: &str, name: &str, address: impl Display) -> Option<T>
    where
        T: std::str::FromStr,
        T::Err: Display,
    {
        let address = address.to_string();
        address.parse::<T>().map_err(|e| self.errors.push(format!("{kind} {name}: {address:?}: {e}"))).ok()
    }

    fn add_extra(&mut self, queried: &str, section: Section, owner: &str, data: RData) {
        if let Some(owner) = self.parse(owner)
            && let Some(node) = self.node(queried)
        {
            node.extra.push((section, owner, data));
        }
    }

    fn node(&mut self, name: &str) -> Option<&mut Node> {
        let name = self.parse(name)?;
        Some(self.names.entry(LowerName::new(&name)).or_insert(Node { name, ..Node::default() }))
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if self.errors.is_empty() { Ok(()) } else { Err(self.errors.join("; ")) }
    }

    /// Merges `other`'s names into these (its TTL and CNAME-following are ignored).
    pub(crate) fn merge(&mut self, other: Records) {
        for (key, node) in other.names {
            let existing = self.names.entry(key).or_insert(Node { name: node.name.clone(), ..Node::default() });
            existing.a.extend(node.a);
            existing.aaaa.extend(node.aaaa);
            if node.cname.is_some() {
                existing.cname = node.cname;
            }
            for (record_type, mode) in node.faults {
                existing.faults.retain(|(t, _)| *t != record_type);
                existing.faults.push((record_type, mode));
            }
            existing.extra.extend(node.extra);
        }
    }

    /// The reply to one query: a fault set for the name and type, or the answer.
    pub(crate) fn reply(&self, name: &Name, query_type: RecordType) -> Reply {
        let node = self.names.get(&LowerName::new(name));
        let fault = node.and_then(|node| {
            node.faults.iter().find(|(record_type, _)| *record_type == query_type).map(|(_, mode)| *mode)
        });
        if let Some(reply) = fault.and_then(Reply::imposed_by) {
            return reply;
        }
        let (code, answers) = self.answer(name, query_type);
        // RFC 2308: negative answers (also at the end of a CNAME chain) carry the SOA.
        let negative = code == ResponseCode::NXDomain
            || (code == ResponseCode::NoError
                && !answers.iter().any(|r| r.record_type() == query_type || query_type == RecordType::ANY));
        let soa = negative.then(|| Box::new(self.soa()));
        let extra = |wanted: Section| {
            node.into_iter()
                .flat_map(|node| node.extra.iter())
                .filter(move |(section, _, _)| *section == wanted)
                .map(|(_, owner, data)| Record::from_rdata(owner.clone(), self.ttl, data.clone()))
        };
        let answers = extra(Section::Answer).chain(answers).collect();
        Reply::Answer { code, answers, soa, additionals: extra(Section::Additional).collect() }
    }

    /// The answer to one query: response code and answer records.
    fn answer(&self, query_name: &Name, query_type: RecordType) -> (ResponseCode, Vec<Record>) {
        let mut answers = Vec::new();
        let mut owner = query_name.clone();
        for _ in 0..=MAX_CNAME_CHAIN {
            let Some(node) = self.names.get(&LowerName::new(&owner)) else {
                // RFC 6604: the response code is that of the last name in the chain.
                return (ResponseCode::NXDomain, answers);
            };
            let record = |data: RData| Record::from_rdata(owner.clone(), self.ttl, data);
            if let Some(target) = &node.cname {
                answers.push(record(RData::CNAME(CNAME(target.clone()))));
                if matches!(query_type, RecordType::CNAME | RecordType::ANY) || !self.follow_cnames {
                    return (ResponseCode::NoError, answers);
                }
                owner = target.clone();
                continue;
            }
            if matches!(query_type, RecordType::A | RecordType::ANY) {
                answers.extend(node.a.iter().map(|a| record(RData::A(A(*a)))));
            }
            if matches!(query_type, RecordType::AAAA | RecordType::ANY) {
                answers.extend(node.aaaa.iter().map(|a| record(RData::AAAA(AAAA(*a)))));
            }
            return (ResponseCode::NoError, answers);
        }
        (ResponseCode::ServFail, Vec::new())
    }

    fn soa(&self) -> Record {
        let soa = SOA::new(
            Name::from_labels(["ns", "testdns"]).unwrap_or_else(|_| Name::root()),
            Name::from_labels(["hostmaster", "testdns"]).unwrap_or_else(|_| Name::root()),
            1,
            3600,
            600,
            86400,
            self.ttl,
        );
        Record::from_rdata(Name::root(), self.ttl, RData::SOA(soa))
    }
}

/// `name` as an absolute name.
pub(crate) fn parse_name(name: &str) -> Result<Name, String> {
    let mut parsed = Name::from_ascii(name).map_err(|e| format!("name {name:?}: {e}"))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// A query type that [`Records::fault`] can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    /// IPv4 address queries.
    A,
    /// IPv6 address queries.
    Aaaa,
}

impl QueryType {
    fn record_type(self) -> RecordType {
        match self {
            Self::A => RecordType::A,
            Self::Aaaa => RecordType::AAAA,
        }
    }
}

/// How the server treats every query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Answer from the records (the default).
    Answer = 0,
    /// Never answer; the port stays bound, so clients time out.
    Unresponsive = 1,
    /// Answer SERVFAIL.
    ServFail = 2,
    /// Answer REFUSED.
    Refused = 3,
}

impl Mode {
    pub(crate) fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Unresponsive,
            2 => Self::ServFail,
            3 => Self::Refused,
            _ => Self::Answer,
        }
    }
}
