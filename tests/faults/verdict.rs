//! The verdict on a scenario: every CSR decided exactly once as it must be, within the recovery
//! bound, by approval writes that are few, go through the approval subresource only, and are made
//! only while the Lease names their replica.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client};
use node_csr_approver::kubernetes::object_fields::{Condition, Csr};

use crate::harness::{Created, Expect, Replica};
use crate::support::lease::LeaseLog;

/// Beyond the bound, how long a CSR is waited for before it counts as never decided.
const GRACE: Duration = Duration::from_secs(20);
/// Once every CSR is decided, how long to wait for a second decision that should not come.
const SETTLE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);

/// What became of the CSRs of a scenario.
#[derive(Debug)]
pub struct Report {
    scenario: String,
    event: String,
    created: usize,
    forged: usize,
    approved: usize,
    denied: usize,
    /// Decided otherwise than expected, or more than once.
    wrong: Vec<String>,
    undecided: Vec<String>,
    /// From the event until every CSR was decided.
    pub recovery: Option<Duration>,
}

/// The Approved and Denied conditions of every CSR in the cluster, by name.
pub async fn decisions(admin: &Client) -> BTreeMap<String, Vec<String>> {
    // Read as the approver reads CSRs, so a CSR with times of a five-digit year lists too.
    let csrs = Api::<Csr>::all(admin.clone()).list(&ListParams::default()).await.unwrap();
    let decision = |condition: &Condition| {
        matches!(condition.type_.as_str(), "Approved" | "Denied").then(|| condition.type_.clone())
    };
    csrs.items
        .into_iter()
        .map(|csr| {
            let conditions = csr.status.conditions.unwrap_or_default();
            (csr.metadata.0.name.unwrap_or_default(), conditions.iter().filter_map(decision).collect())
        })
        .collect()
}

/// Waits until every CSR of `created` is decided, at most `bound` plus a grace period after
/// `since` (the end of the fault, `event`), then a moment more for decisions that should not come,
/// and reports (also on stdout).
pub async fn decided(
    admin: &Client,
    scenario: &str,
    created: &[Created],
    since: Instant,
    event: &str,
    bound: Duration,
) -> Report {
    let deadline = since + bound + GRACE;
    let mut recovery = None;
    loop {
        let found = decisions(admin).await;
        if created.iter().all(|csr| found.get(&csr.name).is_some_and(|d| !d.is_empty())) {
            recovery = Some(since.elapsed());
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    tokio::time::sleep(SETTLE).await;
    let found = decisions(admin).await;
    let mut report = Report {
        scenario: scenario.to_owned(),
        event: event.to_owned(),
        created: created.len(),
        forged: created.iter().filter(|csr| csr.expect == Expect::Denied).count(),
        approved: 0,
        denied: 0,
        wrong: Vec::new(),
        undecided: Vec::new(),
        recovery,
    };
    for csr in created {
        let got = found.get(&csr.name).cloned().unwrap_or_default();
        match got.as_slice() {
            [] => report.undecided.push(printable(&csr.name)),
            [only] if only == csr.expect.condition() => match csr.expect {
                Expect::Approved => report.approved += 1,
                Expect::Denied => report.denied += 1,
            },
            _ => {
                report.wrong.push(format!("{}: expected {}, got {got:?}", printable(&csr.name), csr.expect.condition()))
            }
        }
    }
    println!("{report}");
    report
}

/// A CSR name (or a request target) as the report shows it: escaped, and cut when long.
pub fn printable(name: &str) -> String {
    let escaped = name.escape_debug().to_string();
    if escaped.len() > 80 {
        format!("{}…({} bytes)", escaped.chars().take(60).collect::<String>(), name.len())
    } else {
        escaped
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: created {} ({} forged); approved {}, denied {}, decided wrongly or more than once {}, never decided {}; ",
            self.scenario,
            self.created,
            self.forged,
            self.approved,
            self.denied,
            self.wrong.len(),
            self.undecided.len(),
        )?;
        match self.recovery {
            Some(recovery) => write!(f, "all decided {:.1} s after {}", recovery.as_secs_f64(), self.event)?,
            None => {
                write!(f, "not all decided {} s after {}", (GRACE + crate::harness::RECOVERY).as_secs(), self.event)?
            }
        }
        if !self.wrong.is_empty() {
            write!(f, "\n  wrong: {:?}", &self.wrong[..self.wrong.len().min(10)])?;
        }
        if !self.undecided.is_empty() {
            write!(f, "\n  never decided: {:?}", &self.undecided[..self.undecided.len().min(20)])?;
        }
        Ok(())
    }
}

impl Report {
    /// Asserts that every CSR was decided exactly once as expected, all
    /// within `bound` of the event; `logs` is shown on failure.
    pub fn assert_within(&self, bound: Duration, logs: impl FnOnce() -> String) {
        if !(self.wrong.is_empty() && self.undecided.is_empty() && self.recovery.is_some_and(|r| r <= bound)) {
            panic!("{self}\n(bound: {bound:?})\n{}", logs());
        }
    }

    /// How many CSRs ended with a decision.
    pub fn decided(&self) -> usize {
        self.created - self.undecided.len()
    }
}

/// Approval writes through the replicas' proxies, and what was wrong with them.
#[derive(Debug, Default)]
pub struct Writes {
    /// Answered 2xx by the apiserver.
    pub succeeded: usize,
    /// Reached the apiserver, whatever it answered.
    pub reached: usize,
    /// Answered by a fault of the proxy.
    pub injected: usize,
    /// Writes made without the Lease, and CSR writes other than through `/approval`.
    violations: Vec<String>,
}

/// Counts (and prints) the writes through `replicas`' proxies, noting every approval write that
/// arrived while the Lease did not name its replica and every CSR write other than through the
/// approval subresource.
pub fn writes(replicas: &[Replica], lease: &LeaseLog) -> Writes {
    let mut writes = Writes::default();
    for replica in replicas {
        for write in replica.proxy.writes() {
            let target = printable(&write.target);
            if write.target.contains("/certificatesigningrequests") && !write.approval {
                writes.violations.push(format!(
                    "{} wrote a CSR other than through /approval: {} {target}",
                    replica.name, write.method
                ));
            }
            if !write.approval {
                continue;
            }
            if let Err(lease) = lease.held_by(&replica.name, write.at) {
                writes.violations.push(format!("{} wrote {target} without the Lease: {lease}", replica.name));
            }
            writes.injected += usize::from(write.injected);
            writes.reached += usize::from(!write.injected && write.status.is_some());
            writes.succeeded += usize::from(write.status.is_some_and(|status| (200..300).contains(&status)));
        }
    }
    println!(
        "approval writes: {} succeeded, {} reached the apiserver, {} failed by the proxy; {} violations",
        writes.succeeded,
        writes.reached,
        writes.injected,
        writes.violations.len()
    );
    for violation in writes.violations.iter().take(5) {
        println!("  {violation}");
    }
    writes
}

impl Writes {
    /// Asserts no violation, exactly `decided` successful approval writes (one per decision), and
    /// at most `decided` + 10 more reaching the apiserver (conflicts).
    pub fn assert(&self, decided: usize) {
        assert!(self.violations.is_empty(), "{:#?}", &self.violations[..self.violations.len().min(20)]);
        assert_eq!(self.succeeded, decided, "successful approval writes: one per decided CSR");
        assert!(
            self.reached <= 2 * decided + 10,
            "approval writes reaching the apiserver: {self:?} for {decided} CSRs"
        );
    }
}

/// Whether the Lease stayed `replica`'s (`<replica>_<suffix>`) from `from` to `to`: every renewal
/// seen names it, and none expired before the next one, or before `to`. `Err` tells the other
/// holder or the lapse.
pub fn lease_kept(lease: &LeaseLog, replica: &str, from: SystemTime, to: SystemTime) -> Result<(), String> {
    let (from, to) = (Timestamp::try_from(from).unwrap(), Timestamp::try_from(to).unwrap());
    let renewals = lease.renewals();
    let named = |holder: &str| holder.strip_prefix(replica).is_some_and(|rest| rest.starts_with('_'));
    if let Some(other) = renewals.iter().find(|renewal| !named(&renewal.holder)) {
        return Err(format!("{} renewed the Lease at {}: {renewals:?}", other.holder, other.renewed));
    }
    let Some(first) = renewals.iter().rposition(|renewal| renewal.renewed <= from) else {
        return Err(format!("nobody had renewed the Lease at {from}: {renewals:?}"));
    };
    for pair in renewals[first..].windows(2) {
        let expired = pair[0].renewed + pair[0].duration;
        if pair[1].renewed > expired {
            return Err(format!("the Lease expired at {expired}, renewed only at {}", pair[1].renewed));
        }
    }
    let last = &renewals[renewals.len() - 1];
    let expires = last.renewed + last.duration;
    if expires < to {
        return Err(format!("the Lease expired at {expires}, last renewed at {}, before {to}", last.renewed));
    }
    Ok(())
}
