//! testdns answered over real UDP and TCP sockets, checked with raw DNS messages.
// Test helpers outside #[test] functions unwrap too; clippy.toml only covers the tests.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use hickory_server::proto::op::{Message, Query, ResponseCode};
use hickory_server::proto::rr::{Name, RData, RecordType};
use testdns::{DnsServer, Error, Mode, QueryType, Records, Section};

/// Sends one query and returns the response, or `None` if none came within 300 ms.
fn ask(addr: SocketAddr, name: &str, record_type: RecordType, tcp: bool) -> Option<Message> {
    ask_within(addr, name, record_type, tcp, Duration::from_millis(300))
}

/// Sends one query and returns the response, or `None` if none came within `timeout`.
fn ask_within(addr: SocketAddr, name: &str, record_type: RecordType, tcp: bool, timeout: Duration) -> Option<Message> {
    let mut query = Message::query();
    query.metadata.id = 4242;
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_str(name).unwrap(), record_type));
    let bytes = query.to_vec().unwrap();
    let response = if tcp {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(timeout)).unwrap();
        let len = u16::try_from(bytes.len()).unwrap().to_be_bytes();
        stream.write_all(&len).unwrap();
        stream.write_all(&bytes).unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).ok()?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut buf).ok()?;
        buf
    } else {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(timeout)).unwrap();
        socket.send_to(&bytes, addr).unwrap();
        let mut buf = vec![0u8; 4096];
        let (len, _) = socket.recv_from(&mut buf).ok()?;
        buf.truncate(len);
        buf
    };
    let message = Message::from_vec(&response).unwrap();
    assert_eq!(message.metadata.id, 4242);
    Some(message)
}

/// Runs `ask` off the async runtime so the server (on that runtime) keeps running.
async fn ask_async(addr: SocketAddr, name: &'static str, record_type: RecordType, tcp: bool) -> Option<Message> {
    tokio::task::spawn_blocking(move || ask(addr, name, record_type, tcp)).await.unwrap()
}

fn addresses(message: &Message) -> Vec<IpAddr> {
    message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect()
}

fn has_soa(message: &Message) -> bool {
    message.authorities.iter().any(|record| matches!(record.data, RData::SOA(_)))
}

fn sample() -> Records {
    Records::new()
        .a("n1.example.com", "10.0.0.1")
        .aaaa("n1.example.com", "fd00::1")
        .cname("alias.example.com", "n1.example.com")
        .exists("empty.example.com")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_records_over_udp_and_tcp() {
    let server = DnsServer::start(sample()).await.unwrap();
    assert!(server.addr().ip().is_loopback());
    for tcp in [false, true] {
        let a = ask_async(server.addr(), "n1.example.com.", RecordType::A, tcp).await.unwrap();
        assert_eq!(a.metadata.response_code, ResponseCode::NoError);
        assert!(a.metadata.authoritative);
        assert_eq!(addresses(&a), vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        let aaaa = ask_async(server.addr(), "N1.EXAMPLE.com.", RecordType::AAAA, tcp).await.unwrap();
        assert_eq!(addresses(&aaaa), vec!["fd00::1".parse::<IpAddr>().unwrap()]);
    }
    assert_eq!(server.queries_for("n1.example.com"), 4);
    assert_eq!(server.total_queries(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_cnames_within_the_data() {
    let server = DnsServer::start(sample()).await.unwrap();
    let response = ask_async(server.addr(), "alias.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert!(matches!(response.answers[0].data, RData::CNAME(_)));
    assert_eq!(addresses(&response), vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cnames_can_be_left_to_the_resolver() {
    let server = DnsServer::start(sample().follow_cnames(false)).await.unwrap();
    let response = ask_async(server.addr(), "alias.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert_eq!(response.answers.len(), 1, "{response:?}");
    assert!(
        matches!(&response.answers[0].data, RData::CNAME(target) if target.0 == Name::from_str("n1.example.com.").unwrap())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_records_of_other_owners_go_along_in_their_section() {
    let records = sample()
        .extra_a("n1.example.com", Section::Answer, "evil.example.net", "10.6.6.6")
        .extra_cname("n1.example.com", Section::Answer, "other.example.net", "evil.example.net")
        .extra_aaaa("n1.example.com", Section::Additional, "evil.example.net", "fd66::6")
        .extra_a("only-extra.example.com", Section::Additional, "only-extra.example.com", "10.0.0.7");
    let server = DnsServer::start(records).await.unwrap();
    let evil = Name::from_str("evil.example.net.").unwrap();
    for record_type in [RecordType::A, RecordType::AAAA] {
        let response = ask_async(server.addr(), "n1.example.com.", record_type, false).await.unwrap();
        // The extra answers go first, then the name's own.
        assert_eq!(response.answers[0].name, evil, "{response:?}");
        assert!(matches!(response.answers[1].data, RData::CNAME(_)), "{response:?}");
        assert_eq!(response.answers.len(), 3, "{response:?}");
        assert_eq!(response.additionals.len(), 1, "{response:?}");
        assert_eq!(response.additionals[0].name, evil);
    }
    // A name with extras only exists, without records of its own.
    let response = ask_async(server.addr(), "only-extra.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert!(response.answers.is_empty() && has_soa(&response) && response.additionals.len() == 1);
    let bad = DnsServer::start(Records::new().extra_aaaa("n1.example.com", Section::Answer, "x.net", "10.0.0.1")).await;
    assert!(matches!(bad, Err(Error::InvalidRecords(_))), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_name_is_nxdomain_and_missing_type_is_nodata() {
    let server = DnsServer::start(sample().ttl(120)).await.unwrap();
    let nx = ask_async(server.addr(), "n2.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert!(nx.answers.is_empty() && has_soa(&nx));
    assert_eq!(nx.authorities[0].ttl, 120);
    for (name, record_type) in [("empty.example.com.", RecordType::A), ("alias.example.com.", RecordType::MX)] {
        let nodata = ask_async(server.addr(), name, record_type, false).await.unwrap();
        assert_eq!(nodata.metadata.response_code, ResponseCode::NoError, "{name}");
        assert!(addresses(&nodata).is_empty() && has_soa(&nodata), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_change_while_running() {
    let server = DnsServer::start(Records::new()).await.unwrap();
    let before = ask_async(server.addr(), "late.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(before.metadata.response_code, ResponseCode::NXDomain);
    server.add(Records::new().a("late.example.com", "10.0.0.9")).unwrap();
    let after = ask_async(server.addr(), "late.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(addresses(&after), vec!["10.0.0.9".parse::<IpAddr>().unwrap()]);
    assert!(server.remove("late.example.com").unwrap());
    let removed = ask_async(server.addr(), "late.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(removed.metadata.response_code, ResponseCode::NXDomain);
    server.set_records(sample()).unwrap();
    let replaced = ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(addresses(&replaced).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_servfail_refused_unresponsive_and_back() {
    let server = DnsServer::servfail().await.unwrap();
    assert_eq!(server.mode(), Mode::ServFail);
    let response = ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);

    server.set_records(sample()).unwrap();
    server.set_mode(Mode::Refused);
    let response = ask_async(server.addr(), "n1.example.com.", RecordType::A, true).await.unwrap();
    assert_eq!(response.metadata.response_code, ResponseCode::Refused);

    server.pause();
    for tcp in [false, true] {
        assert!(ask_async(server.addr(), "n1.example.com.", RecordType::A, tcp).await.is_none());
    }
    server.resume();
    let response = ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(addresses(&response).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_answers_come_late_over_udp_and_tcp() {
    let server = DnsServer::start(sample()).await.unwrap();
    server.set_delay(Duration::from_secs(1));
    assert!(ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.is_none(), "held back");
    let addr = server.addr();
    let patient = |tcp| {
        tokio::task::spawn_blocking(move || {
            ask_within(addr, "n1.example.com.", RecordType::A, tcp, Duration::from_secs(30))
        })
    };
    let (udp, tcp) = (patient(false), patient(true));
    for response in [udp.await.unwrap(), tcp.await.unwrap()] {
        assert_eq!(addresses(&response.expect("answered after the delay")).len(), 1);
    }
    server.set_delay(Duration::ZERO);
    assert!(ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.is_some(), "prompt again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unresponsive_server_holds_its_port_and_never_answers() {
    let server = DnsServer::unresponsive().await.unwrap();
    assert!(ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.is_none());
    assert_eq!(server.total_queries(), 1);
    // The port is taken: another socket cannot bind it.
    assert!(std::net::UdpSocket::bind(server.addr()).is_err());
    assert!(std::net::TcpListener::bind(server.addr()).is_err());
}

#[tokio::test]
async fn stops_when_dropped() {
    let server = DnsServer::start(sample()).await.unwrap();
    let addr = server.addr();
    drop(server);
    // Let the runtime reap the aborted tasks, then the port is free again.
    let mut free = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if std::net::TcpListener::bind(addr).is_ok() && std::net::UdpSocket::bind(addr).is_ok() {
            free = true;
            break;
        }
    }
    assert!(free, "port {addr} still bound after drop");
}

#[test]
fn runs_on_its_own_thread_from_synchronous_code() {
    let server = DnsServer::start_on_thread(sample()).unwrap();
    let response = ask(server.addr(), "n1.example.com.", RecordType::A, false).unwrap();
    assert_eq!(addresses(&response).len(), 1);
    let addr = server.addr();
    drop(server);
    assert!(std::net::TcpListener::bind(addr).is_ok(), "stopped on drop");
}

#[test]
fn serves_at_a_given_address_over_udp_and_tcp() {
    // Another loopback address than 127.0.0.1, as the bench uses for port 53.
    let server = DnsServer::start_on_thread_at(sample(), "127.0.53.1:0".parse().unwrap()).unwrap();
    assert_eq!(server.addr().ip(), "127.0.53.1".parse::<IpAddr>().unwrap());
    assert_ne!(server.addr().port(), 0);
    for tcp in [false, true] {
        let response = ask(server.addr(), "n1.example.com.", RecordType::A, tcp).unwrap();
        assert_eq!(addresses(&response).len(), 1, "tcp: {tcp}");
    }
    let taken = server.addr();
    assert!(matches!(DnsServer::start_on_thread_at(sample(), taken), Err(Error::Bind(_))));
}

#[tokio::test]
async fn invalid_records_are_reported() {
    let bad = Records::new().a("n1.example.com", "10.0.0.300");
    assert!(matches!(DnsServer::start(bad).await, Err(Error::InvalidRecords(_))));
    let server = DnsServer::start(Records::new()).await.unwrap();
    let bad = Records::new().aaaa("n1.example.com", "10.0.0.1");
    assert!(matches!(server.add(bad), Err(Error::InvalidRecords(_))));
    let bad = Records::new().cname("a..b", "n1.example.com");
    assert!(matches!(server.set_records(bad), Err(Error::InvalidRecords(_))));
}

#[test]
fn serves_ten_thousand_names() {
    let mut records = Records::new();
    for i in 0..10_000u32 {
        records = records.a(&format!("node-{i}.example.com"), format!("10.2.{}.{}", i / 256, i % 256));
    }
    assert_eq!(records.len(), 10_000);
    let server = DnsServer::start_on_thread(records).unwrap();
    for i in [0u32, 4_321, 9_999] {
        let name = format!("node-{i}.example.com.");
        let response = ask(server.addr(), &name, RecordType::A, false).unwrap();
        let expected: IpAddr = format!("10.2.{}.{}", i / 256, i % 256).parse().unwrap();
        assert_eq!(addresses(&response), vec![expected]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_apply_to_one_name_and_type_only() {
    let records = sample().fault("n1.example.com", QueryType::Aaaa, Mode::ServFail).fault(
        "alias.example.com",
        QueryType::A,
        Mode::Unresponsive,
    );
    let server = DnsServer::start(records).await.unwrap();
    let a = ask_async(server.addr(), "n1.example.com.", RecordType::A, false).await.unwrap();
    assert_eq!(addresses(&a).len(), 1);
    let aaaa = ask_async(server.addr(), "n1.example.com.", RecordType::AAAA, false).await.unwrap();
    assert_eq!(aaaa.metadata.response_code, ResponseCode::ServFail);
    assert!(ask_async(server.addr(), "alias.example.com.", RecordType::A, false).await.is_none());
    // Cleared by a later Mode::Answer fault.
    server.add(Records::new().fault("n1.example.com", QueryType::Aaaa, Mode::Answer)).unwrap();
    let aaaa = ask_async(server.addr(), "n1.example.com.", RecordType::AAAA, false).await.unwrap();
    assert_eq!(addresses(&aaaa).len(), 1);
}
