//! The connection slots of one admin server, and room made when they are all taken: the slot of
//! the oldest connection with no request in service (one that is still sending its request head,
//! or idle between requests) is taken back, so a client holding every slot cannot keep a new
//! connection, such as the kubelet's probe, out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a new connection waits for the slot it made room for: the evicted connection's task
/// only has to notice and drop its socket, which takes microseconds unless the process stalls.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// The slots of one server: at most `capacity` connections at once.
pub(super) struct Slots {
    permits: Arc<Semaphore>,
    capacity: u32,
    held: Arc<Mutex<Held>>,
}

/// The connections holding a slot, by the order they were accepted in.
#[derive(Default)]
struct Held {
    next: u64,
    connections: BTreeMap<u64, Arc<Connection>>,
}

/// What a connection's holder shares with the slots.
#[derive(Default)]
struct Connection {
    /// Requests of this connection in service now (HTTP/1.1 serves one at a time).
    in_service: AtomicUsize,
    /// Wakes the connection when its slot is taken back.
    evicted: Notify,
}

/// A connection's slot, given back when dropped.
pub(super) struct Slot {
    id: u64,
    connection: Arc<Connection>,
    held: Arc<Mutex<Held>>,
    _permit: OwnedSemaphorePermit,
}

/// A request in service on a connection, which keeps the connection from being evicted while it
/// lasts.
pub(super) struct InService(Arc<Connection>);

/// How a connection got its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// A slot was free.
    Free,
    /// Every slot was taken: the oldest connection without a request in service (or, when every
    /// connection had one, the oldest) was closed to make room.
    Evicted,
}

impl Slots {
    /// `capacity` slots, all free.
    pub(super) fn new(capacity: usize) -> Slots {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        let permits = usize::try_from(capacity).unwrap_or(usize::MAX);
        Slots { permits: Arc::new(Semaphore::new(permits)), capacity, held: Arc::default() }
    }

    /// A slot for a new connection: a free one, or the one of the connection evicted for it.
    /// `None` only when the evicted connection did not give its slot back in time.
    pub(super) async fn take(&self) -> Option<(Slot, Taken)> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some((self.hold(permit), Taken::Free));
        }
        if let Some(victim) = self.victim() {
            victim.evicted.notify_one();
        }
        let permit = tokio::time::timeout(EVICTION_WAIT, self.permits.clone().acquire_owned()).await.ok()?.ok()?;
        Some((self.hold(permit), Taken::Evicted))
    }

    /// Waits until every connection has given its slot back.
    pub(super) async fn all_free(&self) {
        let _ = self.permits.acquire_many(self.capacity).await;
    }

    /// Removes and returns the connection to evict: the oldest with no request in service, else
    /// the oldest.
    fn victim(&self) -> Option<Arc<Connection>> {
        let mut held = lock(&self.held);
        let idle = held.connections.iter().find(|(_, c)| c.in_service.load(Ordering::Acquire) == 0);
        let id = idle.or_else(|| held.connections.iter().next()).map(|(id, _)| *id)?;
        held.connections.remove(&id)
    }

    fn hold(&self, permit: OwnedSemaphorePermit) -> Slot {
        let connection = Arc::new(Connection::default());
        let mut held = lock(&self.held);
        let id = held.next;
        held.next += 1;
        held.connections.insert(id, connection.clone());
        Slot { id, connection, held: self.held.clone(), _permit: permit }
    }
}

impl Slot {
    /// Completes when this connection's slot is taken back for a new connection.
    pub(super) async fn evicted(&self) {
        self.connection.evicted.notified().await;
    }

    /// Marks a request in service until the returned guard is dropped.
    pub(super) fn in_service(&self) -> InService {
        self.connection.in_service.fetch_add(1, Ordering::AcqRel);
        InService(self.connection.clone())
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        self.0.in_service.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.held).connections.remove(&self.id);
    }
}

/// The held connections, also after a panic while they were locked (each update is one insert or
/// remove).
fn lock(held: &Mutex<Held>) -> MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn when_full_the_oldest_connection_without_a_request_in_service_is_evicted() {
        let slots = Slots::new(3);
        let mut taken = Vec::new();
        for _ in 0..3 {
            let (slot, how) = slots.take().await.unwrap();
            assert_eq!(how, Taken::Free);
            taken.push(Some(slot));
        }
        let serving = taken[0].as_ref().unwrap().in_service();
        // The first is serving a request: the second, the oldest of the others, makes room.
        let evict_and_drop = |taken: &mut Vec<Option<Slot>>, expected: usize| {
            let slot = taken[expected].take().unwrap();
            async move {
                slot.evicted().await;
                drop(slot);
            }
        };
        let second = tokio::spawn(evict_and_drop(&mut taken, 1));
        let (fourth, how) = slots.take().await.unwrap();
        assert_eq!(how, Taken::Evicted);
        second.await.unwrap();
        taken.push(Some(fourth));
        // With the request finished, the first is the oldest without one.
        drop(serving);
        let first = tokio::spawn(evict_and_drop(&mut taken, 0));
        assert_eq!(slots.take().await.map(|(_, how)| how), Some(Taken::Evicted));
        first.await.unwrap();
    }

    #[tokio::test]
    async fn when_every_connection_serves_the_oldest_is_evicted_and_a_slot_not_given_back_is_not_taken() {
        let slots = Slots::new(2);
        let (first, _) = slots.take().await.unwrap();
        let (second, _) = slots.take().await.unwrap();
        let (_a, _b) = (first.in_service(), second.in_service());
        let evicted = tokio::spawn(async move {
            first.evicted().await;
            drop(first);
        });
        let (third, how) = slots.take().await.unwrap();
        assert_eq!(how, Taken::Evicted);
        evicted.await.unwrap();
        // `third`, idle, is told but keeps its slot: the new connection gets none.
        let started = tokio::time::Instant::now();
        assert!(slots.take().await.is_none());
        assert!(started.elapsed() >= EVICTION_WAIT);
        drop(third);
        drop(second);
    }
}
