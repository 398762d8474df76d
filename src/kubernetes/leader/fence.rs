//! The write fence: whether this replica may write, and for how long a write sent now may run.
//!
//! A replica may write while it holds the Lease and the last renewal it saw is younger than the
//! renew deadline. The deadline is shorter than the Lease by a margin (for clocks that run at
//! different rates, and for the renewal's own way through the apiserver), so the fence closes
//! before the Lease can expire and another replica can take over. A write is bound by the same
//! fence: it may run only until the fence would close ([`Leadership::write_timeout`]), so a write
//! sent just before the apiserver or etcd stalled cannot land after the Lease it was sent under
//! can have expired.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{Notify, watch};

/// Whether this replica may write. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Leadership {
    fence: Option<Arc<WriteFence>>,
}

/// What the election and the Lease watch tell the fence.
#[derive(Debug)]
pub(super) struct WriteFence {
    pub(super) identity: String,
    renew_deadline: Duration,
    /// The manager's view: it believes it holds the Lease.
    pub(super) holding: AtomicBool,
    /// Publishes every change of `holding`.
    pub(super) changes: watch::Sender<bool>,
    /// The `renewTime` of the last Lease seen that names this replica as holder.
    renewed: Mutex<Option<SystemTime>>,
    /// Signalled when the Lease is seen without a holder.
    pub(super) released: Notify,
    /// Set when work was left alone because this replica could not write.
    skipped: AtomicBool,
}

/// How often [`Leadership::writable`] looks at the fence: the fence reopens on a renewal the
/// Lease watch reports, so a quarter of a second adds little to the time a renewal takes.
const FENCE_POLL: Duration = Duration::from_millis(250);

impl WriteFence {
    /// A fence for the holder `identity` that closes `renew_deadline` after the last renewal seen;
    /// closed until the Lease is held and a renewal seen.
    pub(super) fn new(identity: String, renew_deadline: Duration) -> WriteFence {
        WriteFence {
            identity,
            renew_deadline,
            holding: AtomicBool::new(false),
            changes: watch::Sender::new(false),
            renewed: Mutex::new(None),
            released: Notify::new(),
            skipped: AtomicBool::new(false),
        }
    }

    /// The last renewal seen, also after a panic while it was held: the value is replaced whole,
    /// never left half-written.
    pub(super) fn renewed(&self) -> MutexGuard<'_, Option<SystemTime>> {
        self.renewed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the fence stays open from `now`; `None` when it is closed.
    fn open_for(&self, now: SystemTime) -> Option<Duration> {
        if !self.holding.load(Ordering::Acquire) {
            return None;
        }
        time_left(*self.renewed(), now, self.renew_deadline)
    }
}

/// The time left at `now` until `renew_deadline` after the renewal `renewed`; `None` when there is
/// none: no renewal seen, the deadline reached, or a renewal time later than `now` (the clock went
/// back, so the age of the renewal is unknown).
fn time_left(renewed: Option<SystemTime>, now: SystemTime, renew_deadline: Duration) -> Option<Duration> {
    let age = now.duration_since(renewed?).ok()?;
    renew_deadline.checked_sub(age).filter(|left| !left.is_zero())
}

impl Leadership {
    /// Leadership without election: this replica always writes.
    pub fn always() -> Leadership {
        Leadership { fence: None }
    }

    /// Leadership behind `fence`.
    pub(super) fn fenced(fence: Arc<WriteFence>) -> Leadership {
        Leadership { fence: Some(fence) }
    }

    /// True when this replica holds a Lease renewed within the renew deadline.
    pub fn is_leader(&self) -> bool {
        self.write_timeout(Duration::MAX).is_some()
    }

    /// How long a write sent now may take: `limit`, cut to the time left before the fence closes
    /// (the last renewal seen plus the renew deadline), so the write is given up before the Lease
    /// it is sent under can have expired. `None` when the fence is closed: send nothing. Without
    /// election, `limit`.
    pub fn write_timeout(&self, limit: Duration) -> Option<Duration> {
        match &self.fence {
            None => Some(limit),
            Some(fence) => fence.open_for(SystemTime::now()).map(|left| left.min(limit)),
        }
    }

    /// Records that work was left alone because this replica could not write, so the next time it
    /// can, [`Leadership::writable`] says so even if the fence never looked closed to it.
    pub fn skipped(&self) {
        if let Some(fence) = &self.fence {
            fence.skipped.store(true, Ordering::Release);
        }
    }

    /// Yields each time this replica becomes able to write: it took the Lease, its fence reopened,
    /// or it can write again after [`Leadership::skipped`]. Never yields without election (such a
    /// replica can always write).
    pub fn writable(&self) -> BoxStream<'static, ()> {
        if self.fence.is_none() {
            return futures::stream::pending().boxed();
        }
        futures::stream::unfold((self.clone(), false), |(leadership, mut could)| async move {
            loop {
                tokio::time::sleep(FENCE_POLL).await;
                let can = leadership.is_leader();
                let skipped = can && leadership.take_skipped();
                let became = can && (!could || skipped);
                could = can;
                if became {
                    return Some(((), (leadership, could)));
                }
            }
        })
        .boxed()
    }

    /// Whether work was skipped since the last call (and clears it).
    fn take_skipped(&self) -> bool {
        self.fence.as_ref().is_some_and(|fence| fence.skipped.swap(false, Ordering::AcqRel))
    }

    /// A receiver that changes whenever the Lease manager gains or loses the Lease.
    pub fn changes(&self) -> Option<watch::Receiver<bool>> {
        self.fence.as_ref().map(|fence| fence.changes.subscribe())
    }
}

/// Leadership as the controller's unit tests drive it.
#[cfg(test)]
impl Leadership {
    /// A replica that holds the Lease, renewed now: its fence stays open for `renew_deadline`.
    pub(crate) fn held(renew_deadline: Duration) -> Leadership {
        let fence = WriteFence::new("test".into(), renew_deadline);
        fence.holding.store(true, Ordering::Release);
        *fence.renewed() = Some(SystemTime::now());
        Leadership::fenced(Arc::new(fence))
    }

    /// The Lease is lost: another replica holds it.
    pub(crate) fn lose(&self) {
        if let Some(fence) = &self.fence {
            fence.holding.store(false, Ordering::Release);
        }
    }

    /// The fence closes while the Lease is still held: the last renewal seen is past the deadline.
    pub(crate) fn close_fence(&self) {
        if let Some(fence) = &self.fence {
            *fence.renewed() = Some(SystemTime::UNIX_EPOCH);
        }
    }

    /// Whether work was left alone since this was last asked ([`Leadership::skipped`]).
    pub(crate) fn took_skipped(&self) -> bool {
        self.take_skipped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fenced(renew_deadline: Duration) -> (Leadership, Arc<WriteFence>) {
        let fence = Arc::new(WriteFence::new("me".into(), renew_deadline));
        (Leadership::fenced(fence.clone()), fence)
    }

    /// Whether `writable` yields within a few polls.
    async fn yields(writable: &mut BoxStream<'static, ()>) -> bool {
        tokio::time::timeout(FENCE_POLL * 4, writable.next()).await.is_ok()
    }

    #[tokio::test]
    async fn writable_yields_on_taking_the_lease_on_a_reopened_fence_and_after_skipped_work() {
        let (leadership, fence) = fenced(Duration::from_secs(10));
        let mut writable = leadership.writable();
        assert!(!yields(&mut writable).await, "not holding");
        fence.holding.store(true, Ordering::Release);
        assert!(!yields(&mut writable).await, "holding, but no renewal seen");
        *fence.renewed() = Some(SystemTime::now());
        assert!(yields(&mut writable).await, "took the Lease");
        assert!(!yields(&mut writable).await, "nothing changed");
        *fence.renewed() = SystemTime::now().checked_sub(Duration::from_secs(11));
        assert!(!leadership.is_leader());
        assert!(!yields(&mut writable).await, "the fence closed");
        leadership.skipped();
        *fence.renewed() = Some(SystemTime::now());
        assert!(yields(&mut writable).await, "the fence reopened");
        assert!(!yields(&mut writable).await, "the skip was consumed with the reopening");
        leadership.skipped();
        assert!(yields(&mut writable).await, "work was skipped while the fence looked open");
    }

    #[tokio::test]
    async fn without_election_writable_never_yields_and_skips_are_ignored() {
        let leadership = Leadership::always();
        leadership.skipped();
        assert!(leadership.is_leader());
        assert!(!yields(&mut leadership.writable()).await);
    }

    #[test]
    fn the_time_left_runs_from_the_renewal_to_the_renew_deadline() {
        let renewed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let deadline = Duration::from_secs(10);
        let at = |millis| renewed + Duration::from_millis(millis);
        assert_eq!(time_left(Some(renewed), at(0), deadline), Some(deadline));
        assert_eq!(time_left(Some(renewed), at(2_500), deadline), Some(Duration::from_millis(7_500)));
        assert_eq!(time_left(Some(renewed), at(9_999), deadline), Some(Duration::from_millis(1)));
        assert_eq!(time_left(Some(renewed), at(10_000), deadline), None, "the fence closes at the deadline");
        assert_eq!(time_left(Some(renewed), at(10_500), deadline), None);
        assert_eq!(time_left(None, at(0), deadline), None, "no renewal seen");
        let earlier = renewed - Duration::from_millis(1);
        assert_eq!(time_left(Some(renewed), earlier, deadline), None, "a renewal from the future");
    }

    #[test]
    fn a_write_may_take_its_limit_cut_to_the_time_the_fence_stays_open() {
        let limit = Duration::from_secs(10);
        assert_eq!(Leadership::always().write_timeout(limit), Some(limit));
        let (leadership, fence) = fenced(Duration::from_secs(4));
        *fence.renewed() = Some(SystemTime::now());
        assert_eq!(leadership.write_timeout(limit), None, "not holding the Lease");
        fence.holding.store(true, Ordering::Release);
        let left = leadership.write_timeout(limit).unwrap();
        assert!(left <= Duration::from_secs(4) && left > Duration::from_secs(3), "{left:?}");
        assert_eq!(leadership.write_timeout(Duration::from_secs(1)), Some(Duration::from_secs(1)));
        *fence.renewed() = SystemTime::now().checked_sub(Duration::from_millis(3_500));
        let left = leadership.write_timeout(limit).unwrap();
        assert!(left <= Duration::from_millis(500) && left > Duration::ZERO, "{left:?}");
        *fence.renewed() = SystemTime::now().checked_sub(Duration::from_secs(4));
        assert_eq!(leadership.write_timeout(limit), None, "no time left: nothing is sent");
        assert!(!leadership.is_leader());
    }
}
