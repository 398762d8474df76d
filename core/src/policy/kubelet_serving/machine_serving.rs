//! Machine mode's checks of a serving CSR: its SANs against the node's Machine or, when no Machine
//! claims the node and renewal is on (`--kubelet-serving-ca-file`), against the certificate the
//! node's kubelet serves now; then the pending brake.

use std::collections::BTreeSet;
use std::net::IpAddr;

use jiff::Timestamp;

use crate::csr::{CertificateFacts, CsrError, CsrFacts};

use super::super::Reason;
use super::super::evidence::Evidence;
use super::super::identity::NODE_USER_PREFIX;
use super::super::machine_checks;
use super::super::ports::{ClusterError, KubeletCertificate};
use super::super::report::{CheckId, Failure, Report};
use super::super::rules::MachinePolicy;
use super::Parsed;

/// Records the Machine-address (or renewal) check and the pending brake.
pub(super) fn record(report: &mut Report, rules: &MachinePolicy, parsed: &Parsed, evidence: &Evidence, now: Timestamp) {
    let machine = machine_checks::machines(&evidence.machines)
        .and_then(|machines| machine_checks::machine_of_node(machines, &parsed.node));
    match machine {
        Err(not_found) if not_found.reason == Reason::MachineNotFound && rules.serving_renewal => {
            report.skip(CheckId::MachineAddresses, format!("{}: kubelet-renewal decides", not_found.message));
            let renewal = renewal(parsed, &not_found, evidence.kubelet_certificate.as_ref(), now);
            report.record(CheckId::KubeletRenewal, renewal);
        }
        machine => {
            let why_no_renewal = match &machine {
                _ if !rules.serving_renewal => "--kubelet-serving-ca-file is not set".to_owned(),
                Ok(machine) => format!("Machine {} claims the node", machine.id),
                Err(_) => "the Machines could not be read".to_owned(),
            };
            let belongs = machine.and_then(|machine| {
                machine_checks::serving_sans_belong(machine, &parsed.dns_names, &parsed.facts.ip_addresses)
            });
            report.record(CheckId::MachineAddresses, belongs);
            report.skip(CheckId::KubeletRenewal, why_no_renewal);
        }
    }
    report.record(CheckId::PendingBrake, machine_checks::pending_brake(&evidence.load, rules));
}

/// The renewal check on the served certificate: a dial that failed is retried; anything that is
/// not a renewal leaves the CSR waiting for a Machine, as without renewal.
fn renewal(
    parsed: &Parsed,
    not_found: &Failure,
    served: Option<&Result<KubeletCertificate, ClusterError>>,
    now: Timestamp,
) -> Result<String, Failure> {
    let node = &parsed.node;
    let not_a_renewal = |why: &dyn std::fmt::Display| {
        Failure::retry(
            Reason::MachineNotFound,
            format!("{}, and the request renews no certificate: {why}", not_found.message),
        )
    };
    match served {
        None => Err(Failure::retry(Reason::ClusterUnavailable, "the kubelet's certificate was not looked up")),
        Some(Err(error)) => {
            Err(Failure::retry(Reason::ClusterUnavailable, format!("cannot read Node {node:?}: {error}")))
        }
        Some(Ok(KubeletCertificate::Unreachable(why))) => Err(Failure::retry(
            Reason::KubeletUnreachable,
            format!("{}, and node {node:?}'s kubelet could not be reached: {why}", not_found.message),
        )),
        Some(Ok(KubeletCertificate::Unusable(why))) => Err(not_a_renewal(why)),
        Some(Ok(KubeletCertificate::Verified(der))) => {
            renews(node, &parsed.facts, der, now).map_err(|why| not_a_renewal(&why))
        }
    }
}

/// Why the served certificate is not one the request renews; the serial and the names are the
/// certificate's and the request's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotRenewal {
    /// The certificate cannot be read.
    #[error("the served certificate cannot be read: {0}")]
    Unreadable(CsrError),
    /// Issued to someone else.
    #[error("the served certificate {serial} has CN {common_names:?}, not {expected:?}")]
    CommonName { serial: String, common_names: Vec<String>, expected: String },
    /// Not valid at the time of the decision.
    #[error("the served certificate {serial} is not valid now: notBefore {not_before}, notAfter {not_after}")]
    NotValidNow { serial: String, not_before: Timestamp, not_after: Timestamp },
    /// SANs other than DNS and IP.
    #[error("the served certificate {0} carries SANs other than DNS and IP")]
    OtherSans(String),
    /// Other DNS SANs than the request's.
    #[error("DNS SANs {asked:?} are not those of the served certificate {serial}: {served:?}")]
    DnsSans { asked: BTreeSet<String>, serial: String, served: BTreeSet<String> },
    /// Other IP SANs than the request's.
    #[error("IP SANs {asked:?} are not those of the served certificate {serial}: {served:?}")]
    IpSans { asked: BTreeSet<IpAddr>, serial: String, served: BTreeSet<IpAddr> },
}

/// The request renews the served certificate `der`: issued to `system:node:<node>`, valid at
/// `now`, with exactly the request's DNS SANs (case-insensitively) and IP SANs (canonically),
/// as sets, and no SAN of another type.
pub(crate) fn renews(node: &str, request: &CsrFacts, der: &[u8], now: Timestamp) -> Result<String, NotRenewal> {
    let served = CertificateFacts::from_der(der).map_err(NotRenewal::Unreadable)?;
    let (names, serial) = (&served.names, &served.serial);
    let expected = format!("{NODE_USER_PREFIX}{node}");
    if names.common_names != [expected.as_str()] {
        return Err(NotRenewal::CommonName {
            serial: serial.clone(),
            common_names: names.common_names.clone(),
            expected,
        });
    }
    if now < served.not_before || now > served.not_after {
        let (not_before, not_after) = (served.not_before, served.not_after);
        return Err(NotRenewal::NotValidNow { serial: serial.clone(), not_before, not_after });
    }
    if !(names.emails.is_empty() && names.uris.is_empty() && names.other_sans.is_empty()) {
        return Err(NotRenewal::OtherSans(serial.clone()));
    }
    let dns = |names: &[String]| names.iter().map(|n| n.to_ascii_lowercase()).collect::<BTreeSet<_>>();
    let ips = |ips: &[IpAddr]| ips.iter().map(IpAddr::to_canonical).collect::<BTreeSet<_>>();
    let (asked_dns, served_dns) = (dns(&request.dns_names), dns(&names.dns_names));
    if asked_dns != served_dns {
        return Err(NotRenewal::DnsSans { asked: asked_dns, serial: serial.clone(), served: served_dns });
    }
    let (asked_ips, served_ips) = (ips(&request.ip_addresses), ips(&names.ip_addresses));
    if asked_ips != served_ips {
        return Err(NotRenewal::IpSans { asked: asked_ips, serial: serial.clone(), served: served_ips });
    }
    Ok(format!(
        "renews the certificate node {node:?}'s kubelet serves (serial {serial}, notAfter {}): the same {} DNS and {} IP SANs",
        served.not_after,
        served_dns.len(),
        served_ips.len()
    ))
}
