//! Serving renewals in machine mode: a node no Machine claims asks again for the names of the
//! certificate its kubelet serves. The shell verified the chain; these cases are the pure checks
//! on the served leaf (CN, validity, the SANs as sets), and what a failed dial or a missing
//! certificate leads to. Cluster-machine-approver's `TestAuthorizeServingRenewal` cases are marked.

use node_csr_approver_core::policy::{
    CheckId, ClusterError, DecisionKind, Evidence, KubeletCertificate, Outcome, Reason,
};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, SanType, SerialNumber, date_time_ymd};

use super::{case, evidence, n1_machine, serving_n1};
use crate::support::Request;
use crate::support::table::{Case, assert_all};

use DecisionKind::{Approve, Deny, Retry};

/// A served certificate: CN `system:node:<node>`, these SANs, valid through 2026.
struct Served {
    node: &'static str,
    sans: Vec<SanType>,
    valid: (i32, i32),
}

impl Served {
    /// What a kubelet of node n1 serves: n1.nodes.example.com and 10.0.0.11.
    fn n1() -> Served {
        Served { node: "n1", sans: vec![dns("n1.nodes.example.com"), ip("10.0.0.11")], valid: (2025, 2027) }
    }

    fn sans(self, sans: Vec<SanType>) -> Served {
        Served { sans, ..self }
    }

    fn der(&self) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, format!("system:node:{}", self.node));
        params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
        params.subject_alt_names = self.sans.clone();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = date_time_ymd(self.valid.0, 1, 1);
        params.not_after = date_time_ymd(self.valid.1, 1, 1);
        params.serial_number = Some(SerialNumber::from(vec![0x1a, 0x2b, 0x3c]));
        params.self_signed(&KeyPair::generate().unwrap()).unwrap().der().to_vec()
    }

    /// Evidence: no Machine claims n1, its kubelet serves this certificate.
    fn evidence(&self) -> Evidence {
        served(Ok(KubeletCertificate::Verified(self.der())))
    }
}

fn at(time: &str) -> jiff::Timestamp {
    time.parse().unwrap()
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

fn ip(address: &str) -> SanType {
    SanType::IpAddress(address.parse().unwrap())
}

/// Evidence: the Machine of n1 is not yet claimed, and the dial of n1's kubelet found `found`.
fn served(found: Result<KubeletCertificate, ClusterError>) -> Evidence {
    Evidence { kubelet_certificate: Some(found), ..evidence(vec![n1_machine(None)]) }
}

/// The request of a renewal by n1 for n1.nodes.example.com and 10.0.0.11.
fn same() -> Request {
    Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.11")
}

fn renewal(name: &'static str, request: Request, evidence: Evidence, expect: (DecisionKind, Reason)) -> Case {
    case(name, serving_n1(request), evidence, expect).cfg(|c| c.machine.as_mut().unwrap().serving_renewal = true)
}

/// Every renewal case.
pub(super) fn cases() -> Vec<Case> {
    let waits = (Retry, Reason::MachineNotFound);
    let approved = (Approve, Reason::AutoApproved);
    vec![
        // CMA "all good".
        renewal("the same sans", same(), Served::n1().evidence(), approved),
        renewal(
            "the same sans in another order",
            Request::node("n1").ip("10.0.0.11").dns("n1.nodes.example.com"),
            Served::n1().evidence(),
            approved,
        ),
        renewal(
            "dns sans differ in case only",
            Request::node("n1").dns("N1.Nodes.Example.com").ip("10.0.0.11"),
            Served::n1().evidence(),
            approved,
        ),
        renewal(
            "served dns san in upper case",
            same(),
            Served::n1().sans(vec![dns("N1.NODES.EXAMPLE.COM"), ip("10.0.0.11")]).evidence(),
            approved,
        ),
        renewal(
            "ipv6 written differently",
            Request::node("n1").dns("n1.nodes.example.com").ip("fd00:0:0::0011"),
            Served::n1().sans(vec![dns("n1.nodes.example.com"), ip("fd00::11")]).evidence(),
            approved,
        ),
        renewal(
            "served ipv4-mapped address is the same address",
            same(),
            Served::n1().sans(vec![dns("n1.nodes.example.com"), ip("::ffff:10.0.0.11")]).evidence(),
            approved,
        ),
        // CMA "SAN list differs" (extraAddr).
        renewal("an extra dns san", same().dns("n1b.nodes.example.com"), Served::n1().evidence(), waits)
            .cfg(|c| (c.allowed_dns_names, c.bypass_hostname_check) = (2, true)),
        renewal("an extra ip san", same().ip("10.0.0.12"), Served::n1().evidence(), waits),
        renewal("a san fewer", Request::node("n1").dns("n1.nodes.example.com"), Served::n1().evidence(), waits),
        renewal(
            "another ip",
            Request::node("n1").dns("n1.nodes.example.com").ip("10.0.0.12"),
            Served::n1().evidence(),
            waits,
        ),
        renewal(
            "served email san",
            same(),
            Served::n1()
                .sans(vec![
                    dns("n1.nodes.example.com"),
                    ip("10.0.0.11"),
                    SanType::Rfc822Name("n1@example.com".try_into().unwrap()),
                ])
                .evidence(),
            waits,
        ),
        // CMA "Request from different node" and "Unexpected CN".
        renewal("another node's certificate", same(), Served { node: "n2", ..Served::n1() }.evidence(), waits),
        // CMA "reject expired".
        renewal("expired", same(), Served { valid: (2024, 2025), ..Served::n1() }.evidence(), waits),
        renewal("not yet valid", same(), Served { valid: (2027, 2028), ..Served::n1() }.evidence(), waits),
        // Valid from notBefore to notAfter, both included, as Go's x509 has it.
        renewal("at notBefore", same(), Served::n1().evidence(), approved).at(at("2025-01-01T00:00:00Z")),
        renewal("a second before notBefore", same(), Served::n1().evidence(), waits).at(at("2024-12-31T23:59:59Z")),
        renewal("at notAfter", same(), Served::n1().evidence(), approved).at(at("2027-01-01T00:00:00Z")),
        renewal("a second after notAfter", same(), Served::n1().evidence(), waits).at(at("2027-01-01T00:00:01Z")),
        renewal("unreadable certificate", same(), served(Ok(KubeletCertificate::Verified(b"garbage".to_vec()))), waits),
        // CMA "No certificate match": the shell found nothing the bundle verifies.
        renewal(
            "untrusted certificate",
            same(),
            served(Ok(KubeletCertificate::Unusable("unknown issuer".into()))),
            waits,
        ),
        renewal(
            "kubelet unreachable",
            same(),
            served(Ok(KubeletCertificate::Unreachable("timed out".into()))),
            (Retry, Reason::KubeletUnreachable),
        ),
        renewal(
            "node unreadable",
            same(),
            served(Err(ClusterError::Request("503".into()))),
            (Retry, Reason::ClusterUnavailable),
        ),
        renewal("not looked up", same(), evidence(vec![n1_machine(None)]), (Retry, Reason::ClusterUnavailable)),
        renewal("under the brake", same(), Served::n1().evidence(), (Retry, Reason::TooManyPending)).evidence(|e| {
            e.load = Some(Ok(node_csr_approver_core::policy::BrakeInputs { pending: 500, machines: 1, nodes: 1 }))
        }),
        // Renewals off: the evidence is not read.
        case("renewals off", serving_n1(same()), Served::n1().evidence(), waits),
        // A Machine that claims the node decides, whatever the kubelet serves.
        renewal(
            "a machine decides first",
            same().ip("10.0.0.12"),
            Served::n1().sans(vec![dns("n1.nodes.example.com"), ip("10.0.0.11"), ip("10.0.0.12")]).evidence(),
            (Deny, Reason::MachineAddressMismatch),
        )
        .evidence(|e| e.machines = Some(Ok(vec![n1_machine(Some("n1"))]))),
        renewal("machines unreadable", same(), Served::n1().evidence(), (Retry, Reason::ClusterUnavailable))
            .evidence(|e| e.machines = Some(Err(ClusterError::Request("503".into())))),
    ]
}

/// Cluster-machine-approver's `TestAuthorizeServingRenewal` fixtures as they are: node `test`
/// serving `node1`, `node1.local`, 127.0.0.1 and 10.0.0.1 (names not bound to the node, which the
/// flags here allow; a loopback address, which nothing allows).
fn cma_cases() -> Vec<Case> {
    let cma = |name: &'static str, node: &'static str, request: Request, served: Served, expect| {
        let sub = crate::support::serving(node, &request.pem());
        case(name, sub, served.evidence(), expect).cfg(|c| {
            let machine = c.machine.as_mut().unwrap();
            machine.serving_renewal = true;
            c.provider_regex = regex::Regex::new("^[a-z0-9.-]+$").unwrap();
            c.ip_prefixes = vec!["0.0.0.0/0".parse().unwrap()];
            (c.allowed_dns_names, c.allowed_ip_addresses, c.bypass_hostname_check) = (2, 3, true);
        })
    };
    let request = |node: &str| Request::node(node).dns("node1").dns("node1.local").ip("10.0.0.1");
    let served = || Served {
        node: "test",
        sans: vec![dns("node1"), dns("node1.local"), ip("127.0.0.1"), ip("10.0.0.1")],
        valid: (2025, 2027),
    };
    let without_loopback = || Served { sans: vec![dns("node1"), dns("node1.local"), ip("10.0.0.1")], ..served() };
    let waits = (Retry, Reason::MachineNotFound);
    vec![
        // "all good": we never approve a loopback SAN, whatever the evidence.
        cma("cma all good", "test", request("test").ip("127.0.0.1"), served(), (Deny, Reason::ClusterIdentity)),
        cma(
            "cma all good without loopback",
            "test",
            request("test"),
            without_loopback(),
            (Approve, Reason::AutoApproved),
        ),
        cma("cma SAN list differs", "test", request("test").ip("99.0.1.1"), without_loopback(), waits),
        cma("cma request from different node", "foobar", request("foobar"), without_loopback(), waits),
        cma("cma unexpected CN", "panda", request("panda"), without_loopback(), waits),
        cma("cma reject expired", "test", request("test"), Served { valid: (2024, 2025), ..without_loopback() }, waits),
    ]
}

#[test]
fn every_renewal_case_decides_as_expected() {
    assert_all(&cases());
    assert_all(&cma_cases());
}

#[test]
fn a_renewal_names_the_certificate_it_renews() {
    let evaluation =
        renewal("the same sans", same(), Served::n1().evidence(), (Approve, Reason::AutoApproved)).evaluate();
    let message = &evaluation.decision.message;
    assert!(message.contains("kubelet-renewal"), "{message}");
    assert!(message.contains("serial 1A:2B:3C, notAfter 2027-01-01T00:00:00Z"), "{message}");
}

#[test]
fn a_renewal_that_fails_says_why_in_the_decision() {
    let extra =
        renewal("an extra ip san", same().ip("10.0.0.12"), Served::n1().evidence(), (Retry, Reason::MachineNotFound));
    let message = extra.evaluate().decision.message;
    assert!(message.contains("no Machine has status.nodeRef.name \"n1\" yet"), "{message}");
    assert!(
        message.contains("IP SANs {10.0.0.11, 10.0.0.12} are not those of the served certificate 1A:2B:3C"),
        "{message}"
    );
}

#[test]
fn a_renewal_not_looked_at_says_why() {
    let skipped = |name: &str| {
        let all = cases();
        let case = all.iter().find(|c| c.name == name).unwrap();
        let row = case.evaluate().checks.into_iter().find(|row| row.check == CheckId::KubeletRenewal);
        match row.map(|row| row.outcome) {
            Some(Outcome::Skip(why)) => why,
            other => panic!("{name}: kubelet-renewal {other:?}"),
        }
    };
    assert_eq!(skipped("renewals off"), "--kubelet-serving-ca-file is not set");
    assert_eq!(skipped("a machine decides first"), "Machine openshift-machine-api/m1 claims the node");
    assert_eq!(skipped("machines unreadable"), "the Machines could not be read");
}
