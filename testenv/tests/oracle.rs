//! csr-oracle: Go's reading of request bytes, over one long-running process.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use testenv::{GoView, Oracle};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A PEM PKCS#10 request with subject CN `common_name`, O `system:nodes` and the SANs `sans`.
fn request(common_name: &str, sans: Vec<SanType>) -> Result<String, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
    params.subject_alt_names = sans;
    params.serialize_request(&KeyPair::generate()?)?.pem()
}

/// The base64 lines of a PEM block, without its BEGIN and END lines.
fn body(pem: &str) -> String {
    pem.lines().filter(|line| !line.starts_with("-----")).collect::<Vec<_>>().join("\n")
}

/// What Go reports for an accepted request of node `node` in `system:nodes`.
fn accepted(node: &str, dns_names: &[&str], ip_addresses: &[IpAddr]) -> GoView {
    let common_name = format!("system:node:{node}");
    GoView {
        ok: true,
        common_names: vec![common_name.clone()],
        common_name,
        organizations: vec!["system:nodes".to_owned()],
        dns_names: dns_names.iter().map(|name| (*name).to_owned()).collect(),
        ip_addresses: ip_addresses.to_vec(),
        ..GoView::default()
    }
}

fn rejected_at(view: &GoView) -> Option<&str> {
    assert!(!view.ok, "accepted: {view:?}");
    assert!(view.error.as_deref().is_some_and(|error| !error.is_empty()), "no error: {view:?}");
    view.stage.as_deref()
}

#[test]
fn reads_a_kubelet_serving_request() -> TestResult {
    let pem = request(
        "system:node:n1",
        vec![
            SanType::DnsName("n1.example.com".try_into()?),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11))),
            SanType::IpAddress("fd00::11".parse()?),
        ],
    )?;
    let mut oracle = Oracle::start()?;
    let view = oracle.read(pem.as_bytes())?;
    assert_eq!(view, accepted("n1", &["n1.example.com"], &["10.0.0.11".parse()?, "fd00::11".parse()?]), "{view:?}");
    Ok(())
}

#[test]
fn reads_the_block_after_an_unmatched_end_line() -> TestResult {
    let first = request("system:node:first", vec![SanType::DnsName("first".try_into()?)])?;
    let second = request("system:node:second", vec![SanType::DnsName("second".try_into()?)])?;
    // The first block's END line carries no type: Go skips it and reads the second block.
    let text = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END -----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        body(&first),
        body(&second)
    );
    let view = Oracle::start()?.read(text.as_bytes())?;
    assert_eq!(view, accepted("second", &["second"], &[]), "{view:?}");
    Ok(())
}

#[test]
fn writes_an_ipv4_mapped_address_as_ipv4() -> TestResult {
    let mapped = Ipv4Addr::new(10, 9, 9, 9).to_ipv6_mapped();
    let pem = request("system:node:n2", vec![SanType::IpAddress(IpAddr::V6(mapped))])?;
    let view = Oracle::start()?.read(pem.as_bytes())?;
    assert_eq!(view.ip_addresses, vec![IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))], "{view:?}");
    Ok(())
}

#[test]
fn names_the_stage_that_refuses() -> TestResult {
    let mut oracle = Oracle::start()?;
    let pem = request("system:node:n3", vec![SanType::DnsName("n3".try_into()?)])?;

    assert_eq!(rejected_at(&oracle.read(b"")?), Some("pem"));
    assert_eq!(rejected_at(&oracle.read(b"\x00\xffnot a request at all\n")?), Some("pem"));
    let certificate = pem.replace("CERTIFICATE REQUEST", "CERTIFICATE");
    assert_eq!(rejected_at(&oracle.read(certificate.as_bytes())?), Some("type"));
    let not_der = "-----BEGIN CERTIFICATE REQUEST-----\naGVsbG8=\n-----END CERTIFICATE REQUEST-----\n";
    assert_eq!(rejected_at(&oracle.read(not_der.as_bytes())?), Some("x509"));

    // The same request with one bit of its signature flipped (the signature ends the DER).
    let der = pem::parse(&pem)?;
    let mut forged = der.contents().to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let forged = pem::encode(&pem::Pem::new("CERTIFICATE REQUEST", forged));
    assert_eq!(rejected_at(&oracle.read(forged.as_bytes())?), Some("signature"));

    // The process keeps answering after refusals.
    assert!(oracle.read(pem.as_bytes())?.ok);
    Ok(())
}

#[test]
fn reads_a_request_of_over_a_mebibyte() -> TestResult {
    let pem = request("system:node:n4", vec![SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST))])?;
    // Text before the block is ignored by Go's PEM decoder.
    let padded = format!("{}\n{pem}", "x".repeat(1 << 20));
    let view = Oracle::start()?.read(padded.as_bytes())?;
    assert_eq!(view, accepted("n4", &[], &[IpAddr::V6(Ipv6Addr::LOCALHOST)]), "{view:?}");
    Ok(())
}

#[test]
fn answers_thousands_of_requests_a_minute() -> TestResult {
    const REQUESTS: u32 = 3000;
    let pem = request("system:node:n5", vec![SanType::DnsName("n5".try_into()?)])?;
    let mut oracle = Oracle::start()?;
    let start = Instant::now();
    for _ in 0..REQUESTS {
        assert!(oracle.read(pem.as_bytes())?.ok);
    }
    let elapsed = start.elapsed();
    eprintln!("{REQUESTS} requests in {elapsed:?}");
    // 10,000 a minute at the very least, even on a loaded machine.
    assert!(elapsed < Duration::from_secs(18), "{REQUESTS} requests took {elapsed:?}");
    Ok(())
}
