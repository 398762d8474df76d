//! The scan: each Node's kubelet dialled where serving renewal would dial it (the address comes
//! in already chosen by the dial rules, or the reason it is not dialled), a bounded number at
//! once, each within its time limit, so one unreachable kubelet never stalls the rest; what it
//! presents is read without trusting it and judged by [`judge`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use rustls::pki_types::{CertificateDer, UnixTime};

use super::certificate::ServedCertificate;
use super::view::AuditView;
use super::{Finding, NodeAudit, PolicyVerdict, state_name};
use crate::kubelet_tls::KubeletServingCa;
use crate::kubelet_tls::presented::{Presented, presented_chain};
use crate::kubernetes::node_target::NodeTarget;
use crate::policy::{
    ClusterView, DecisionKind, KUBELET_SERVING_SIGNER, NODE_USER_PREFIX, NODES_GROUP, Outcome, PolicyConfig, Resolver,
    Submission, evaluate_names,
};

/// How a scan dials and judges.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    /// `--kubelet-serving-ca-file`: the bundle chains are checked against, when given.
    pub ca: Option<KubeletServingCa>,
    /// How long the connection and the handshake with one kubelet may take together.
    pub dial_limit: Duration,
    /// How many kubelets are dialled at once (at least 1).
    pub concurrency: usize,
    /// A certificate whose notAfter is closer than this is expiring.
    pub expiring_within: Duration,
}

/// What judging needs besides the chain: the settings, the policy and its ports, the time.
pub struct Judge<'a, R, C> {
    /// How to dial and judge.
    pub settings: &'a ScanSettings,
    /// Today's policy.
    pub policy: &'a PolicyConfig,
    /// DNS, for the policy.
    pub resolver: &'a R,
    /// The cluster, for the policy.
    pub cluster: &'a C,
    /// The time of the audit.
    pub now: Timestamp,
}

impl<R: Resolver, C: ClusterView> Judge<'_, R, C> {
    /// Audits every target, at most `concurrency` at once; the reports sorted by Node name.
    pub async fn scan(&self, targets: Vec<NodeTarget>) -> Vec<NodeAudit> {
        let limit = self.settings.concurrency.max(1);
        // A loop rather than `buffer_unordered` over a closure: the future stays `Send` for every
        // lifetime, so the controller can spawn it.
        let (mut waiting, mut running) = (targets.iter(), FuturesUnordered::new());
        let mut reports = Vec::with_capacity(targets.len());
        loop {
            while running.len() < limit {
                let Some(target) = waiting.next() else { break };
                running.push(self.scan_node(target));
            }
            match running.next().await {
                Some(report) => reports.push(report),
                None => break,
            }
        }
        reports.sort_by(|a, b| a.node.cmp(&b.node));
        reports
    }

    /// Audits one Node: dials its kubelet (when the rules give an address) and judges the chain.
    pub async fn scan_node(&self, target: &NodeTarget) -> NodeAudit {
        let address = match &target.target {
            Ok(address) => *address,
            Err(why) => {
                return NodeAudit::without_certificate(&target.node, None, Finding::NotDialled, why.to_string());
            }
        };
        match presented_chain(address, self.settings.dial_limit).await {
            Presented::Unreachable(why) => NodeAudit::without_certificate(
                &target.node,
                Some(address),
                Finding::Unreachable,
                format!("{address}: {why}"),
            ),
            Presented::Proven(chain) => self.judge(&target.node, address, &chain, None).await,
            Presented::Unproven(chain, why) => self.judge(&target.node, address, &chain, Some(why)).await,
        }
    }

    /// Judges the chain (leaf first) that the kubelet of `node` presented at `address`;
    /// `unproven` says why the kubelet did not prove it holds the leaf's key, if it did not.
    pub async fn judge(
        &self,
        node: &str,
        address: SocketAddr,
        chain: &[CertificateDer<'_>],
        unproven: Option<String>,
    ) -> NodeAudit {
        let (certificate, names) = match ServedCertificate::read(chain) {
            Ok(read) => read,
            Err(why) => {
                return NodeAudit::without_certificate(node, Some(address), Finding::Malformed, why.to_string());
            }
        };
        let mut findings = BTreeSet::new();
        if unproven.is_some() {
            findings.insert(Finding::Malformed);
        }
        // Verified at a time the leaf is valid, so that an expired certificate is `expired`, not
        // also `untrusted`.
        let at = unix_time(self.now.clamp(certificate.not_before, certificate.not_after));
        let verification = self.settings.ca.as_ref().map(|ca| ca.verify(chain, address.ip(), at));
        let verified = verification.as_ref().map(Result::is_ok);
        if verified != Some(true) && certificate.self_issued_chain {
            findings.insert(Finding::SelfSigned);
        } else if verified == Some(false) {
            findings.insert(Finding::Untrusted);
        }
        let seconds_left = certificate.not_after.as_second().saturating_sub(self.now.as_second());
        if seconds_left <= 0 || certificate.not_before > self.now {
            findings.insert(Finding::Expired);
        } else if seconds_left.unsigned_abs() < self.settings.expiring_within.as_secs() {
            findings.insert(Finding::Expiring);
        }
        let (policy, decision) = self.verdict(node, &names).await;
        match decision {
            DecisionKind::Approve => {}
            DecisionKind::Deny | DecisionKind::Hold => {
                findings.insert(Finding::NonCompliant);
            }
            DecisionKind::Retry | DecisionKind::Ignore => {
                findings.insert(Finding::Undetermined);
            }
        }
        NodeAudit {
            node: node.to_owned(),
            state: state_name(&findings),
            findings,
            address: Some(address),
            detail: unproven,
            cn_is_node: Some(certificate.cn_is_node(node)),
            certificate: Some(certificate),
            verified,
            verify_error: verification.and_then(Result::err).map(|error| error.to_string()),
            seconds_left: Some(seconds_left),
            policy: Some(policy),
        }
    }

    /// What today's policy says of a serving CSR of `node` asking for `names`.
    async fn verdict(&self, node: &str, names: &crate::csr::CsrFacts) -> (PolicyVerdict, DecisionKind) {
        let submission = Submission {
            name: format!("served by {node}"),
            signer_name: KUBELET_SERVING_SIGNER.to_owned(),
            username: format!("{NODE_USER_PREFIX}{node}"),
            groups: vec![NODES_GROUP.to_owned(), "system:authenticated".to_owned()],
            usages: vec!["digital signature".to_owned(), "server auth".to_owned()],
            ..Submission::default()
        };
        let view = AuditView { cluster: self.cluster };
        let evaluation = evaluate_names(&submission, names, self.policy, self.resolver, &view, self.now).await;
        let failed = evaluation.checks.iter().filter_map(|row| match &row.outcome {
            Outcome::Fail(failure) => {
                Some(format!("{}: {} ({})", row.check.as_str(), failure.message, failure.reason.as_str()))
            }
            _ => None,
        });
        let decision = evaluation.decision;
        let verdict = PolicyVerdict {
            decision: decision.kind.as_str(),
            reason: decision.reason.as_str(),
            message: decision.message,
            failed: failed.collect(),
        };
        (verdict, decision.kind)
    }
}

/// `now` as rustls reads the time.
fn unix_time(now: Timestamp) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(now.as_second().max(0).unsigned_abs()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::kubernetes::cluster::StaticCluster;
    use crate::policy::Resolution;

    /// DNS that knows no name (the policy here bypasses DNS resolution).
    struct NoDns;

    impl Resolver for NoDns {
        async fn resolve(&self, _name: &str) -> Resolution {
            Resolution::NotFound
        }
    }

    /// DNS that never answers in time.
    struct DnsDown;

    impl Resolver for DnsDown {
        async fn resolve(&self, _name: &str) -> Resolution {
            Resolution::Unavailable(crate::policy::DnsFailure::Timeout)
        }
    }

    const NODE: &str = "n-1.nodes.example.com";

    /// A CA, and a leaf it issues for NODE naming `ip`, valid from `from` to `until`.
    fn issued(ip: &str, from: Timestamp, until: Timestamp) -> (rcgen::Certificate, Vec<CertificateDer<'static>>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "kubernetes");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![NODE.to_owned(), ip.to_owned()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{NODE}"));
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        let time =
            |t: Timestamp| rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(t.as_second() as u64);
        (params.not_before, params.not_after) = (time(from), time(until));
        let leaf = params.signed_by(&rcgen::KeyPair::generate().unwrap(), &rcgen::Issuer::new(ca_params, ca_key));
        (ca, vec![leaf.unwrap().der().clone()])
    }

    fn ca_of(ca: &rcgen::Certificate, dir: &tempfile::TempDir) -> KubeletServingCa {
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, ca.pem()).unwrap();
        KubeletServingCa::read(&path).unwrap()
    }

    async fn findings(chain: &[CertificateDer<'_>], ca: Option<KubeletServingCa>, now: Timestamp) -> NodeAudit {
        let settings = ScanSettings {
            ca,
            dial_limit: Duration::from_secs(1),
            concurrency: 1,
            expiring_within: Duration::from_secs(7 * 86_400),
        };
        let policy = testkit::policy::config();
        let judge =
            Judge { settings: &settings, policy: &policy, resolver: &NoDns, cluster: &StaticCluster::default(), now };
        judge.judge(NODE, "10.0.0.7:10250".parse().unwrap(), chain, None).await
    }

    fn names(audit: &NodeAudit) -> Vec<&'static str> {
        audit.findings.iter().map(|finding| finding.as_str()).collect()
    }

    #[tokio::test]
    async fn a_certificate_is_judged_by_its_issuer_its_validity_and_todays_policy() {
        let dir = tempfile::tempdir().unwrap();
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let day = jiff::SignedDuration::from_hours(24);
        let (ca, chain) = issued("10.0.0.7", now - day, now + day * 30);
        let good = findings(&chain, Some(ca_of(&ca, &dir)), now).await;
        assert_eq!((good.state, good.verified, good.cn_is_node), ("compliant", Some(true), Some(true)), "{good:#?}");
        assert_eq!(good.seconds_left, Some(30 * 86_400));
        assert_eq!(good.policy.as_ref().map(|p| p.decision), Some("approve"));
        assert_eq!(names(&findings(&chain, None, now).await), Vec::<&str>::new(), "no bundle: nothing to verify");

        let soon = findings(&chain, Some(ca_of(&ca, &dir)), now + day * 25).await;
        assert_eq!(names(&soon), ["expiring"]);
        let late = findings(&chain, Some(ca_of(&ca, &dir)), now + day * 31).await;
        assert_eq!((names(&late), late.verified), (vec!["expired"], Some(true)), "{late:#?}");
        let early = findings(&chain, Some(ca_of(&ca, &dir)), now - day * 2).await;
        assert_eq!(names(&early), ["expired"]);

        let (other_ca, _) = issued("10.0.0.7", now - day, now + day * 30);
        let foreign = findings(&chain, Some(ca_of(&other_ca, &dir)), now).await;
        assert_eq!((names(&foreign), foreign.verified), (vec!["untrusted"], Some(false)));
        assert!(foreign.verify_error.is_some(), "{foreign:#?}");
        let (ca, elsewhere) = issued("10.0.0.8", now - day, now + day * 30);
        let wrong_address = findings(&elsewhere, Some(ca_of(&ca, &dir)), now).await;
        assert_eq!(names(&wrong_address), ["untrusted"], "issued for another address than the one dialled");

        let (ca, outside) = issued("192.0.2.7", now - day, now + day * 30);
        let denied = findings(&outside, None, now).await;
        assert_eq!(names(&denied), ["non-compliant"]);
        let policy = denied.policy.unwrap();
        assert_eq!((policy.decision, policy.reason), ("deny", "IPNotInPrefixes"), "{policy:#?}");
        drop(ca);

        let mut resolving = testkit::policy::config();
        resolving.bypass_dns_resolution = false;
        let settings = ScanSettings {
            ca: None,
            dial_limit: Duration::from_secs(1),
            concurrency: 1,
            expiring_within: day.unsigned_abs(),
        };
        let judge = Judge {
            settings: &settings,
            policy: &resolving,
            resolver: &DnsDown,
            cluster: &StaticCluster::default(),
            now,
        };
        let unknown = judge.judge(NODE, "10.0.0.7:10250".parse().unwrap(), &chain, None).await;
        assert_eq!(
            (names(&unknown), unknown.policy.unwrap().decision),
            (vec!["undetermined"], "retry"),
            "DNS did not answer"
        );

        let garbage = findings(&[CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01])], None, now).await;
        assert_eq!((names(&garbage), garbage.certificate), (vec!["malformed"], None));
    }

    #[tokio::test]
    async fn a_certificates_names_are_judged_as_a_request_for_them_is() {
        use testkit::request::{Request, legit};
        let node = "n-2";
        let requests = [
            legit(node, 7),
            legit(node, 7).ip("192.0.2.7"),
            legit(node, 7).dns("other.nodes.example.com"),
            Request::node("n-3").dns("n-2.nodes.example.com"),
            Request::node(node).ip("10.0.0.1").ip("169.254.169.254"),
            Request::node(node),
        ];
        let (policy, cluster, now) = (testkit::policy::config(), StaticCluster::default(), Timestamp::now());
        for request in requests {
            let sub = testkit::policy::serving(node, &request.pem());
            let by_request = crate::policy::evaluate(&sub, &policy, &NoDns, &cluster, now).await;
            let names = crate::csr::CsrFacts::from_pem(&sub.request).unwrap();
            let by_names = evaluate_names(&sub, &names, &policy, &NoDns, &cluster, now).await;
            let outcome = |evaluation: &crate::policy::Evaluation| {
                let rows = evaluation.checks.iter().filter(|row| row.check != crate::policy::CheckId::Request);
                (evaluation.decision.clone(), rows.cloned().collect::<Vec<_>>())
            };
            assert_eq!(outcome(&by_names), outcome(&by_request), "{request:?}");
        }
    }

    /// A leaf for NODE with subject CN `cn` and SANs NODE, 10.0.0.7 and `more`, valid from
    /// 2026-05-01 for 61 days, issued by a CA named CN `issuer`.
    fn named(cn: &str, more: &[rcgen::SanType], issuer: &str) -> Vec<CertificateDer<'static>> {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, issuer);
        let mut params = rcgen::CertificateParams::new(vec![NODE.to_owned(), "10.0.0.7".to_owned()]).unwrap();
        params.subject_alt_names.extend(more.iter().cloned());
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        let start = rcgen::date_time_ymd(2026, 5, 1);
        (params.not_before, params.not_after) = (start, start + Duration::from_secs(61 * 86_400));
        let leaf = params.signed_by(&rcgen::KeyPair::generate().unwrap(), &rcgen::Issuer::new(ca_params, ca_key));
        vec![leaf.unwrap().der().clone()]
    }

    #[tokio::test]
    async fn text_from_a_hostile_certificate_is_quoted_and_escaped_in_the_event_note() {
        use crate::audit::states::StateMemory;
        use crate::display::needs_escape;
        // A right-to-left override, a newline and an ANSI escape.
        let hostile = "\u{202e}gpj.exe\n\u{1b}[31m";
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let (other_ca, _) = issued("10.0.0.7", now, now);
        let dir = tempfile::tempdir().unwrap();
        let subject = named(&format!("system:node:{NODE}{hostile}"), &[], &format!("ca{hostile}"));
        // A SAN is ASCII (IA5String): no U+202E.
        let uri = rcgen::SanType::URI("https://x\n\u{1b}[2J\u{7f}/".try_into().unwrap());
        let san = named(&format!("system:node:{NODE}"), &[uri], "ca");
        let mut reports = Vec::new();
        for chain in [subject, san] {
            let mut report = findings(&chain, Some(ca_of(&other_ca, &dir)), now).await;
            assert_eq!(names(&report), ["untrusted", "non-compliant"], "{report:#?}");
            report.node = format!("n{}", reports.len());
            report.detail = Some(format!("the handshake: {hostile}"));
            reports.push(report);
        }

        let changes = StateMemory::default().update(&reports);
        let notes: Vec<&str> = changes.iter().map(|change| change.note.as_str()).collect();
        for note in &notes {
            assert!(!note.chars().any(needs_escape), "{note:?}");
            assert!(note.ends_with(r"; the handshake: \u{202e}gpj.exe\n\u{1b}[31m"), "{note}");
        }
        // RFC 4514 text writes a newline and an escape as `\0a` and `\1b`, the quotes `\\0a`.
        for shown in [
            r#"subject "O=system:nodes,CN=system:node:n-1.nodes.example.com\u{202e}gpj.exe\\0a\\1b[31m", "#,
            r#"issuer "CN=ca\u{202e}gpj.exe\\0a\\1b[31m", notAfter 2026-07-01T00:00:00Z (30d left)"#,
            r#"subject CN ["system:node:n-1.nodes.example.com\u{202e}gpj.exe\n\u{1b}[31m"] is not exactly"#,
        ] {
            assert!(notes[0].contains(shown), "{shown} in {}", notes[0]);
        }
        assert!(notes[1].contains(r"https://x\n\u{1b}[2J\u{7f}/"), "the SAN in today's policy: {}", notes[1]);
    }
}
