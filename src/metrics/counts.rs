//! The engine's request counts read back: the controller's demand (per tier) and each
//! limiter's counts for `GET /v1/state`.

use super::Metrics;
use crate::control::Traffic;
use crate::limiter::LimiterName;
use serde::Serialize;
use std::sync::atomic::Ordering;

/// One limiter's counts since start, as shown by `GET /v1/state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct LimiterCounts {
    /// Enforced rejections.
    pub rejected: u64,
    /// Rejections in dark mode.
    pub dark_rejected: u64,
    /// Fail-opens.
    pub failed_open: u64,
}

impl Metrics {
    /// Requests since start as the controller's demand reads them: those that reached the
    /// load limiters, those worker_utilization shed, and those let into the app.
    pub fn traffic(&self) -> Traffic {
        let count = |t: usize| {
            (0..4)
                .map(|o| self.request_counts.sum(t * 4 + o).max(0) as u64)
                .sum::<u64>()
        };
        let refused =
            |l: LimiterName, t: usize| self.refused[l as usize][t].load(Ordering::Relaxed);
        let total: u64 = (0..4).map(count).sum();
        let all: u64 = (0..4)
            .flat_map(|t| LimiterName::ALL.iter().map(move |&l| (l, t)))
            .map(|(l, t)| refused(l, t))
            .sum();
        Traffic {
            reached: std::array::from_fn(|t| {
                count(t)
                    .saturating_sub(refused(LimiterName::RequestRate, t))
                    .saturating_sub(refused(LimiterName::ConcurrentRequests, t))
            }),
            shed: std::array::from_fn(|t| refused(LimiterName::WorkerUtilization, t)),
            admitted: total.saturating_sub(all),
        }
    }

    /// A limiter's counts since start.
    pub fn counts(&self, limiter: LimiterName) -> LimiterCounts {
        let [rejected, dark_rejected, failed_open] = self.totals[limiter as usize]
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed));
        LimiterCounts {
            rejected,
            dark_rejected,
            failed_open,
        }
    }
}
