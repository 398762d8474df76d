//! The leader-election Lease as the apiserver stores it: who holds it, waiting for a holder, and a
//! record of every renewal to check writes against.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

/// The holder of Lease `lease` in `default`, if any.
pub async fn holder(admin: &Client, lease: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), "default").get_opt(lease).await.unwrap()?;
    lease.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty())
}

/// Waits until some replica other than `not` holds the Lease; returns the index of its
/// replica-<i> name.
pub async fn wait_holder(admin: &Client, lease: &str, not: Option<usize>, deadline: Instant) -> Option<usize> {
    while Instant::now() < deadline {
        let index =
            holder(admin, lease).await.and_then(|h| h.strip_prefix("replica-")?.split('_').next()?.parse().ok());
        if index.is_some() && index != not {
            return index;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// One state of the Lease: `holder` renewed it at `renewed` for `duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The holder identity, `<POD_NAME>_<suffix>` for the approver.
    pub holder: String,
    /// Its `renewTime`.
    pub renewed: Timestamp,
    /// Its `leaseDurationSeconds`.
    pub duration: Duration,
}

/// Every state of a Lease read from the apiserver (not through any proxy) every
/// [`LEASE_POLL`], from when it is started until it is dropped. A watch would miss the renewals
/// made while it backs off after an outage; a renewal stays at least a retry period (1 s here).
pub struct LeaseLog {
    seen: Arc<Mutex<Vec<Renewal>>>,
    task: tokio::task::JoinHandle<()>,
}

/// How often [`LeaseLog`] reads the Lease.
pub const LEASE_POLL: Duration = Duration::from_millis(100);

impl LeaseLog {
    /// Starts reading Lease `lease` in `default`.
    pub fn start(admin: &Client, lease: &str) -> LeaseLog {
        let api = Api::<Lease>::namespaced(admin.clone(), "default");
        let (seen, lease) = (Arc::new(Mutex::new(Vec::new())), lease.to_owned());
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let spec = api.get_opt(&lease).await.ok().flatten().and_then(|found| found.spec);
                if let Some(spec) = spec
                    && let (Some(holder), Some(renewed)) = (spec.holder_identity, spec.renew_time)
                {
                    let seconds = spec.lease_duration_seconds.unwrap_or_default().unsigned_abs();
                    let renewal = Renewal { holder, renewed: renewed.0, duration: Duration::from_secs(seconds.into()) };
                    let mut seen = record.lock().unwrap();
                    if !seen.contains(&renewal) {
                        seen.push(renewal);
                    }
                }
                tokio::time::sleep(LEASE_POLL).await;
            }
        });
        LeaseLog { seen, task }
    }

    /// The states seen so far, ordered by renewal time.
    pub fn renewals(&self) -> Vec<Renewal> {
        let mut seen = self.seen.lock().unwrap().clone();
        seen.sort_by_key(|renewal| renewal.renewed);
        seen
    }

    /// Whether the Lease, as last renewed before `at`, named `replica` (`<replica>_<suffix>`) as
    /// holder and had not expired at `at`: the one condition under which `replica` may write.
    /// `Err` tells what the Lease said instead.
    pub fn held_by(&self, replica: &str, at: SystemTime) -> Result<(), String> {
        let at = Timestamp::try_from(at).unwrap();
        let renewals = self.renewals();
        let Some(last) = renewals.iter().rev().find(|renewal| renewal.renewed <= at) else {
            return Err(format!("at {at} nobody had renewed the Lease yet"));
        };
        let expires = last.renewed + last.duration;
        let named = last.holder.strip_prefix(replica).is_some_and(|rest| rest.starts_with('_'));
        if named && at <= expires {
            Ok(())
        } else {
            Err(format!("at {at} the Lease was last renewed by {} at {} until {expires}", last.holder, last.renewed))
        }
    }
}

impl Drop for LeaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
