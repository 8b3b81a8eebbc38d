//! The published shed plan: per-tier drop probabilities derived from the controller's amount,
//! and the drop decision (random or by cohort).

use crate::rng::{mix, unit, SplitMix64};
use crate::schema::{Bands, MaxShed, Selection};
use crate::tier::{PerTier, Tier};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What the controller publishes for the middleware after every sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ShedPlan {
    /// The utilization the controller last saw, in `[0, 1]`: the sources' reading, capped.
    pub utilization: f64,
    /// The whole demand: the sources' reading before it was capped at 1, with the work the
    /// controller shed added back (its input leaves that out: it is its feedback). How far
    /// over capacity the server is asked to run, e.g. 2 for twice what `capacity` says.
    pub demand: f64,
    /// The controller's amount, in `[resting, 1]`.
    pub amount: f64,
    /// Drop probability per tier.
    pub probability: PerTier<f64>,
    /// When the plan was computed (clock time).
    #[serde(skip)]
    pub at: Duration,
    /// Samples taken so far.
    pub samples: u64,
}

impl ShedPlan {
    /// The plan before any sample: nothing is shed.
    pub fn idle(amount: f64, at: Duration) -> Self {
        Self {
            utilization: 0.0,
            demand: 0.0,
            amount,
            probability: PerTier::splat(0.0),
            at,
            samples: 0,
        }
    }
}

/// What a plan says of one tier's requests: the share of them to shed, and when it was
/// computed (its age is checked only where something is shed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TierShed {
    /// The drop probability of the tier.
    pub(crate) probability: f64,
    /// When the plan was computed, in clock nanoseconds.
    pub(crate) at_nanos: u64,
}

impl ShedPlan {
    /// What this plan says of `tier`.
    #[inline]
    pub(crate) fn tier(&self, tier: Tier) -> TierShed {
        TierShed {
            probability: self.probability.get(tier),
            at_nanos: crate::clock::nanos(self.at),
        }
    }
}

/// The current plan, published by the controller (one writer) for every request to read.
///
/// Each field is its own atomic, so reading is a handful of plain loads: no lock and no
/// read-modify-write on the request path. A reader racing with an update may see some fields
/// of the old plan and some of the new; every field is valid on its own, and the next request
/// sees the new plan.
#[derive(Debug)]
pub struct PublishedPlan {
    utilization: AtomicU64,
    demand: AtomicU64,
    amount: AtomicU64,
    probability: [AtomicU64; 4],
    at: AtomicU64,
    samples: AtomicU64,
    /// Set when worker_utilization was turned off: the controller starts again from rest.
    rest: AtomicBool,
}

impl PublishedPlan {
    /// Publishes `plan` from the start.
    pub fn new(plan: &ShedPlan) -> Self {
        let published = Self {
            utilization: AtomicU64::new(0),
            demand: AtomicU64::new(0),
            amount: AtomicU64::new(0),
            probability: Default::default(),
            at: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            rest: AtomicBool::new(false),
        };
        published.store(plan);
        published
    }

    /// Replaces the plan.
    pub fn store(&self, plan: &ShedPlan) {
        let put = |a: &AtomicU64, v: f64| a.store(v.to_bits(), Ordering::Release);
        put(&self.utilization, plan.utilization);
        put(&self.demand, plan.demand);
        put(&self.amount, plan.amount);
        for t in Tier::ALL {
            put(&self.probability[t.index()], plan.probability.get(t));
        }
        self.samples.store(plan.samples, Ordering::Release);
        self.at
            .store(crate::clock::nanos(plan.at), Ordering::Release);
    }

    /// Puts the controller at rest (`amount`) as of `at`: nothing is shed from now on, and
    /// the controller's next step starts again from rest ([`take_rest`](Self::take_rest))
    /// instead of carrying on from the amount it had. What turning worker_utilization off
    /// does, so that turning it back on does not bring back an old overload's shedding.
    pub fn rest(&self, amount: f64, at: Duration) {
        let samples = self.samples.load(Ordering::Acquire);
        self.store(&ShedPlan {
            samples,
            ..ShedPlan::idle(amount, at)
        });
        self.rest.store(true, Ordering::Release);
    }

    /// Whether the controller was put at rest since it last asked.
    pub fn take_rest(&self) -> bool {
        self.rest.swap(false, Ordering::AcqRel)
    }

    /// What the plan as it stands says of `tier`: the request path's read, two loads.
    #[inline]
    pub(crate) fn tier(&self, tier: Tier) -> TierShed {
        TierShed {
            probability: f64::from_bits(self.probability[tier.index()].load(Ordering::Acquire)),
            at_nanos: self.at.load(Ordering::Acquire),
        }
    }

    /// The plan as it stands.
    pub fn load(&self) -> ShedPlan {
        let get = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Acquire));
        ShedPlan {
            utilization: get(&self.utilization),
            demand: get(&self.demand),
            amount: get(&self.amount),
            probability: PerTier::from_fn(|t| get(&self.probability[t.index()])),
            at: Duration::from_nanos(self.at.load(Ordering::Acquire)),
            samples: self.samples.load(Ordering::Acquire),
        }
    }
}

/// How far `amount` is through `band`, in `[0, 1]` (0 for anything that is not a number).
fn through(amount: f64, [start, end]: [f64; 2]) -> f64 {
    finite_share((amount - start) / (end - start))
}

/// `p` within `[0, 1]`; 0 when it is not a number (nothing is shed on a value that means
/// nothing).
fn finite_share(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

/// Drop probability of each tier at `amount`: test over its band first, then get, then post;
/// critical only with `shed_critical`. Each is capped by `max_shed`.
pub fn probabilities(
    amount: f64,
    bands: &Bands,
    max_shed: &MaxShed,
    shed_critical: bool,
) -> PerTier<f64> {
    PerTier::from_fn(|tier| {
        let raw = match tier {
            Tier::Test => through(amount, bands.test),
            Tier::Get => through(amount, bands.get),
            Tier::Post => through(amount, bands.post),
            Tier::Critical => match (shed_critical, bands.critical) {
                (true, Some(band)) => through(amount, band),
                _ => 0.0,
            },
        };
        // `min` would pick the cap over a NaN: each side is made a share first.
        raw.min(finite_share(max_shed.get(tier)))
    })
}

/// A key's place in the cohort order of one rotation epoch, uniform in `[0, 1)`.
pub fn cohort_score(key: u64, epoch: u64) -> f64 {
    unit(mix(key ^ mix(epoch.wrapping_add(0x5851_F42D_4C95_7F2D))))
}

/// The cohort epoch at `now`.
pub fn cohort_epoch(now: Duration, rotation: Duration) -> u64 {
    (now.as_nanos() / rotation.as_nanos().max(1)) as u64
}

/// Whether to drop a request of a tier whose drop probability is `p`.
///
/// `random` draws afresh; `cohort` drops the keys whose score in the current epoch is below
/// `p`, so the same users are shed for a whole rotation (`rotation`) and retries do not help
/// them.
pub fn should_drop(
    p: f64,
    selection: Selection,
    rotation: Duration,
    key: u64,
    now: Duration,
    rng: &mut SplitMix64,
) -> bool {
    if p <= 0.0 {
        return false;
    }
    if p >= 1.0 {
        return true;
    }
    match selection {
        Selection::Random => rng.next_f64() < p,
        Selection::Cohort => cohort_score(key, cohort_epoch(now, rotation)) < p,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
