//! Hostile CSR names: characters that mean something in a URL, and a name longer than any URL.

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::PostParams;

use crate::harness::{Created, Expect, RECOVERY, Scenario, logs, tail};
use crate::support::cluster::{Approver, SERIAL, unique};
use crate::verdict::{decided, printable, writes};

/// What the apiserver accepts in a CSR name that is not itself in a URL path: a query, a fragment,
/// characters a URL may not hold, and one ending the name.
const ACCEPTED: [(&str, &str); 6] =
    [("query", "?x"), ("fragment", "#x"), ("space", " x"), ("newline", "\nx"), ("escape", "\x1bx"), ("trailing", "?")];
/// What it refuses: a name must be usable as a path segment (no `/`, no `%`).
const REFUSED: [&str; 3] = ["%x", "%2Fx", "/x"];
/// Longer than the longest URL the client's `http` crate builds (64 KiB).
const LONG: usize = 70_000;
/// How long the approver's handling of the long name is watched once everything else is decided.
const WATCHED: Duration = Duration::from_secs(30);

#[tokio::test]
async fn hostile_csr_names_are_each_decided_once_and_touch_no_other_csr() {
    let _serial = SERIAL.lock().await;
    let Scenario { cp: _cp, admin, lease_name: _, lease, replicas, leader: _, nodes } = Scenario::start(1).await;
    let approver = &replicas[0].approver;
    let base = unique("h");

    for suffix in REFUSED {
        let name = format!("{base}-refused{suffix}");
        let csr = testkit::csr::object(&name, testkit::csr::SERVING_SIGNER, &[], "");
        let refused = Api::<CertificateSigningRequest>::all(admin.clone()).create(&PostParams::default(), &csr).await;
        assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422), "{}: {refused:?}", printable(&name));
    }

    // Beside each hostile name, the plain name a careless URL would address instead, decided the
    // other way: a write that reached it would show.
    let mut created = Vec::new();
    for (i, (label, suffix)) in ACCEPTED.iter().enumerate() {
        let plain = format!("{base}-{label}");
        let (own, other) =
            if i % 2 == 0 { (Expect::Approved, Expect::Denied) } else { (Expect::Denied, Expect::Approved) };
        created.push(nodes.create_as(&plain, other).await);
        created.push(nodes.create_as(&format!("{plain}{suffix}"), own).await);
    }
    let long_prefix = format!("{base}-long-");
    let long = nodes.create_as(&format!("{long_prefix}{}", "x".repeat(LONG)), Expect::Approved).await;
    let done = Instant::now();

    let report = decided(&admin, "hostile names", &created, done, "their creation", RECOVERY).await;
    let long = LongName::observe(&admin, approver, &long, &long_prefix).await;
    let writes = writes(&replicas, &lease);
    report.assert_within(RECOVERY, || logs(&replicas));
    long.assert(approver);
    writes.assert(report.decided() + usize::from(long.decided));
}

/// What became of the CSR of the long name.
struct LongName {
    /// Decided once, as expected, within [`RECOVERY`].
    decided: bool,
    /// Warning and error lines naming it, in all.
    complaints: usize,
    /// Of those, the ones logged in the [`WATCHED`] period.
    complaints_watched: usize,
    /// Approval write attempts (of every CSR) in the [`WATCHED`] period, from `/metrics`.
    attempts_watched: Option<f64>,
}

impl LongName {
    /// Waits for its decision; if none comes, watches the approver for [`WATCHED`].
    async fn observe(admin: &kube::Client, approver: &Approver, long: &Created, prefix: &str) -> LongName {
        let csrs = std::slice::from_ref(long);
        let report = decided(admin, "the 70,000-character name", csrs, Instant::now(), "now", RECOVERY).await;
        let complaints = || approver.log_lines().iter().filter(|line| complains_about(line, prefix)).count();
        if report.decided() == 1 {
            report.assert_within(RECOVERY, || tail(&approver.logs(), 40));
            return LongName { decided: true, complaints: complaints(), complaints_watched: 0, attempts_watched: None };
        }
        let (before, attempts_before) = (complaints(), approver.write_attempts().await);
        tokio::time::sleep(WATCHED).await;
        let (after, attempts_after) = (complaints(), approver.write_attempts().await);
        let attempts_watched = attempts_after.zip(attempts_before).map(|(after, before)| after - before);
        let long = LongName { decided: false, complaints: after, complaints_watched: after - before, attempts_watched };
        println!(
            "long name undecided: {} warnings or errors in all, {} in {WATCHED:?}; approval write attempts (of every CSR) in it: {:?}",
            long.complaints, long.complaints_watched, long.attempts_watched
        );
        long
    }

    /// Unless it was decided: it was reported, at most once per backoff step (2 s at the shortest)
    /// while watched, and fewer than 20 writes were attempted meanwhile (every other CSR is decided).
    fn assert(&self, approver: &Approver) {
        if self.decided {
            return;
        }
        let logs = || tail(&approver.logs(), 40);
        assert!(self.complaints > 0, "the undecided long name was never reported:\n{}", logs());
        assert!(self.complaints_watched <= 16, "more than one report per 2 s backoff step:\n{}", logs());
        let attempts = self.attempts_watched;
        assert!(attempts.is_none_or(|a| a < 20.0), "{attempts:?} approval write attempts in {WATCHED:?}");
    }
}

/// Whether `line` is a warning or an error naming the CSR whose name starts with `prefix`.
fn complains_about(line: &serde_json::Value, prefix: &str) -> bool {
    matches!(line["level"].as_str(), Some("WARN" | "ERROR")) && line.to_string().contains(prefix)
}
