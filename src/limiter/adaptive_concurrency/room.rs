//! adaptive_concurrency's waiting room as data: the requests waiting, per tier, and the
//! state each of them is settled to. [`super::wait`] queues requests into it and
//! [`super::state`] gives freed slots to them; this file knows neither.

use super::AdaptiveConcurrencyConfig;
use crate::tier::Tier;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

pub(super) const WAITING: u8 = 0;
pub(super) const GRANTED: u8 = 1;
pub(super) const TURNED_AWAY: u8 = 2;

/// The requests waiting, per tier (critical's is unused), oldest first; and the settings the
/// last of them came under (their shares say which tier has room).
#[derive(Debug, Default)]
pub(crate) struct Room {
    pub(super) tiers: [VecDeque<Arc<Waiter>>; 4],
    pub(super) settings: AdaptiveConcurrencyConfig,
}

impl Room {
    pub(super) fn len(&self) -> usize {
        self.tiers.iter().map(VecDeque::len).sum()
    }
}

/// One waiting request. Its state leaves `WAITING` only under the room's lock.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) tier: Tier,
    pub(super) state: AtomicU8,
    /// When it was given its slot (µs of the clock).
    pub(super) granted_at: AtomicU64,
    pub(super) waker: Mutex<Option<Waker>>,
}

impl Waiter {
    pub(super) fn settle(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        let waker = self.waker.lock().map(|mut w| w.take()).unwrap_or(None);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
