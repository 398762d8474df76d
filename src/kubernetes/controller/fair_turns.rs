//! Turns at reconciling, shared round-robin between requesters.
//!
//! The controller hands every triggered CSR to a reconcile at once; each reconcile then waits here
//! for one of `--concurrency` turns. A freed turn goes to the next requester in a ring of those
//! waiting (a CSR's `spec.username`: the node, or the bootstrap token, that created it), first in,
//! first out within one requester, so a node that creates thousands of CSRs delays every other
//! node's CSR by at most one reconcile per turn, not by its whole backlog.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// A fixed number of turns, handed out fairly between requesters until [`FairTurns::close`].
#[derive(Debug, Clone)]
pub(crate) struct FairTurns {
    queues: Arc<Mutex<Queues>>,
}

/// The right to reconcile; handed to the next waiting requester when dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    queues: Option<Arc<Mutex<Queues>>>,
}

/// Free turns and who waits for one.
#[derive(Debug)]
struct Queues {
    free: usize,
    closed: bool,
    /// Each waiting requester's waiters, in arrival order.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
    /// The waiting requesters, in the order their next turn comes.
    ring: VecDeque<String>,
}

impl FairTurns {
    /// `turns` turns (at least one).
    pub(crate) fn new(turns: usize) -> FairTurns {
        let queues = Queues { free: turns.max(1), closed: false, waiting: HashMap::new(), ring: VecDeque::new() };
        FairTurns { queues: Arc::new(Mutex::new(queues)) }
    }

    /// Waits for a turn for `requester`; `None` once the turns are closed.
    pub(crate) async fn take(&self, requester: &str) -> Option<Turn> {
        let waiter = {
            let mut guard = lock(&self.queues);
            let queues = &mut *guard;
            if queues.closed {
                return None;
            }
            if queues.free > 0 {
                queues.free -= 1;
                return Some(Turn { queues: Some(self.queues.clone()) });
            }
            let (sender, waiter) = oneshot::channel();
            match queues.waiting.entry(requester.to_owned()) {
                Entry::Occupied(entry) => entry.into_mut().push_back(sender),
                Entry::Vacant(entry) => {
                    queues.ring.push_back(entry.key().clone());
                    entry.insert(VecDeque::from([sender]));
                }
            }
            waiter
        };
        waiter.await.ok()
    }

    /// Gives no more turns: every waiter, and every later [`FairTurns::take`], gets `None`. Turns
    /// already taken stay valid.
    pub(crate) fn close(&self) {
        let mut queues = lock(&self.queues);
        queues.closed = true;
        queues.ring.clear();
        queues.waiting.clear();
    }
}

impl Queues {
    /// Hands a freed turn to the first waiter of the next requester in the ring, or keeps it free.
    fn hand_on(&mut self, shared: &Arc<Mutex<Queues>>) {
        while let Some(requester) = self.ring.pop_front() {
            let Some(waiters) = self.waiting.get_mut(&requester) else { continue };
            let next = waiters.pop_front();
            if waiters.is_empty() {
                self.waiting.remove(&requester);
            } else {
                self.ring.push_back(requester);
            }
            let Some(sender) = next else { continue };
            match sender.send(Turn { queues: Some(shared.clone()) }) {
                Ok(()) => return,
                // The waiter is gone: this turn must not hand itself on while the lock is held.
                Err(mut turn) => turn.queues = None,
            }
        }
        self.free += 1;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(shared) = self.queues.take() {
            let mut queues = lock(&shared);
            if queues.closed {
                queues.free += 1;
            } else {
                queues.hand_on(&shared);
            }
        }
    }
}

/// The queues, also after a panic elsewhere left the lock poisoned (every update is complete
/// before it can panic).
fn lock(queues: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    queues.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// How many reconciles wait for a turn.
    fn waiting(turns: &FairTurns) -> usize {
        lock(&turns.queues).waiting.values().map(VecDeque::len).sum()
    }

    /// Takes a turn that must be free now.
    fn take_now(turns: &FairTurns, requester: &str) -> Turn {
        turns.take(requester).now_or_never().flatten().unwrap_or_else(|| panic!("no free turn for {requester}"))
    }

    #[tokio::test]
    async fn a_flooding_requester_gets_every_other_turn_while_another_waits() {
        let turns = FairTurns::new(1);
        let first = take_now(&turns, "flood");
        let mut flood: Vec<_> = (0..5).map(|_| Box::pin(turns.take("flood"))).collect();
        for waiter in &mut flood {
            assert!(waiter.as_mut().now_or_never().is_none());
        }
        let mut other = Box::pin(turns.take("other"));
        assert!(other.as_mut().now_or_never().is_none());
        assert_eq!(waiting(&turns), 6);
        drop(first);
        let second = flood[0].as_mut().await.expect("the flood's first waiter gets the freed turn");
        assert!(other.as_mut().now_or_never().is_none(), "one turn: the other waits for the next");
        drop(second);
        let third = other.as_mut().await;
        assert!(third.is_some(), "the next turn is the other requester's");
        assert!(flood[1].as_mut().now_or_never().is_none());
        drop(third);
        assert!(flood[1].as_mut().await.is_some(), "then the flood's again");
    }

    #[tokio::test]
    async fn turns_are_free_up_to_the_number_given_and_come_back_when_dropped() {
        let turns = FairTurns::new(2);
        let a = take_now(&turns, "a");
        let _b = take_now(&turns, "a");
        let mut third = Box::pin(turns.take("b"));
        assert!(third.as_mut().now_or_never().is_none());
        drop(a);
        assert!(third.await.is_some());
        assert_eq!(waiting(&turns), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_went_away_does_not_keep_the_turn() {
        let turns = FairTurns::new(1);
        let first = take_now(&turns, "a");
        let mut gone = Box::pin(turns.take("a"));
        assert!(gone.as_mut().now_or_never().is_none());
        drop(gone);
        drop(first);
        take_now(&turns, "b");
    }

    #[tokio::test]
    async fn closing_releases_every_waiter_without_a_turn() {
        let turns = FairTurns::new(1);
        let first = take_now(&turns, "a");
        let mut waiting = Box::pin(turns.take("b"));
        assert!(waiting.as_mut().now_or_never().is_none());
        turns.close();
        assert!(waiting.await.is_none());
        assert!(turns.take("c").await.is_none());
        drop(first);
        assert_eq!(lock(&turns.queues).free, 1);
    }
}
