//! A request's slot in the fast guard's limit, as the chain hands it to the request's hold.

use super::AdaptiveState;
use crate::tier::Tier;
use std::time::Duration;

/// A request's slot: given back when dropped, unless [`keep`](Self::keep) handed it to the
/// request's hold, which gives it back with the request's latency.
#[derive(Debug)]
pub struct AdaptivePermit<'a> {
    state: Option<&'a AdaptiveState>,
    tier: Tier,
    admitted_at: Duration,
}

impl<'a> AdaptivePermit<'a> {
    pub(super) fn new(state: &'a AdaptiveState, tier: Tier, admitted_at: Duration) -> Self {
        Self {
            state: Some(state),
            tier,
            admitted_at,
        }
    }

    /// Hands the slot over (the request's hold gives it back under the request's tier);
    /// returns when the request was admitted, to measure its latency.
    pub fn keep(mut self) -> Duration {
        self.state = None;
        self.admitted_at
    }
}

impl Drop for AdaptivePermit<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state {
            state.release(self.tier, None, self.admitted_at);
        }
    }
}
