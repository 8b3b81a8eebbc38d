//! The four priority tiers of Stripe's worker-utilization shedder, highest first.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A request's priority. Lower tiers are shed first: test, then get, then post; critical never
/// (unless configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Routes listed in `classifier.critical` (e.g. creating charges).
    Critical = 0,
    /// Other non-GET methods.
    Post = 1,
    /// GET, HEAD, OPTIONS.
    Get = 2,
    /// Test-mode traffic (test API keys or the `Brownout-Test-Mode` header).
    Test = 3,
}

impl Tier {
    /// Every tier, highest priority first; `Tier::ALL[t as usize] == t`.
    pub const ALL: [Tier; 4] = [Tier::Critical, Tier::Post, Tier::Get, Tier::Test];

    /// The label value used in metrics and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Critical => "critical",
            Tier::Post => "post",
            Tier::Get => "get",
            Tier::Test => "test",
        }
    }

    /// Position in [`Tier::ALL`], for per-tier arrays.
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per tier, indexed by [`Tier`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerTier<T> {
    /// Value for [`Tier::Critical`].
    pub critical: T,
    /// Value for [`Tier::Post`].
    pub post: T,
    /// Value for [`Tier::Get`].
    pub get: T,
    /// Value for [`Tier::Test`].
    pub test: T,
}

impl<T: Copy> PerTier<T> {
    /// The same value for every tier.
    pub const fn splat(v: T) -> Self {
        Self {
            critical: v,
            post: v,
            get: v,
            test: v,
        }
    }

    /// The value for `tier`.
    pub fn get(&self, tier: Tier) -> T {
        match tier {
            Tier::Critical => self.critical,
            Tier::Post => self.post,
            Tier::Get => self.get,
            Tier::Test => self.test,
        }
    }

    /// Builds the values from a function of the tier.
    pub fn from_fn(mut f: impl FnMut(Tier) -> T) -> Self {
        Self {
            critical: f(Tier::Critical),
            post: f(Tier::Post),
            get: f(Tier::Get),
            test: f(Tier::Test),
        }
    }
}

#[cfg(test)]
#[path = "tier_tests.rs"]
mod tests;
