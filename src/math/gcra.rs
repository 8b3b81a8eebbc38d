//! Token-bucket arithmetic in the GCRA form: one number per key, the "theoretical arrival
//! time" (TAT). A bucket of `burst` credits regenerating `rate` per second is full when
//! `tat <= now`; a request of cost `c` moves the TAT by `c / rate` and passes if the TAT stays
//! within `burst / rate` of now. Balances are computed lazily from (tat, now): no timers, no
//! per-tick work, and a full bucket is the same as no state at all. Times are microseconds.

use std::sync::atomic::{AtomicU64, Ordering};

/// The result of charging a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// The request fits; the bucket's new TAT.
    Allowed {
        /// New TAT.
        tat: u64,
    },
    /// It does not; `wait` µs from now it would.
    Denied {
        /// The TAT, unchanged.
        tat: u64,
        /// Time until enough credits exist.
        wait: u64,
    },
}

/// A bucket's parameters in µs.
///
/// The state moves in whole steps: one credit is `step` µs of TAT, `1e6 / rate` rounded
/// *down* to a whole µs, and both a request's increment and the tolerance are whole multiples
/// of it (`cost × step`, `burst × step`). Rounding the two separately would let the rounding
/// of each step add up: five steps of 666,667 µs overshoot a tolerance of 3,333,333 µs, so
/// `burst: 5` at 1.5/s would admit 4 at once. With one rounded step the count is exact:
/// `floor(burst / cost)` requests of one cost pass at one instant, for every rate and burst.
///
/// Rounding the step down makes the bucket regenerate at most one µs per credit faster
/// than configured (under 0.1% at 1,000 credits per second or less; a per-key rate near the
/// µs clock's limit of 1,000,000 per second is coarse), never slower, so a client told to
/// wait [`retry_after`](Self::retry_after) (computed from the exact rate) always passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// µs of TAT per credit: `1e6 / rate` rounded down, at least 1.
    step: u64,
    /// µs the configured rate takes per credit (`1e6 / rate`, unrounded): what a wait is told in.
    per_credit: f64,
    /// Credits the bucket holds when full.
    pub burst: f64,
    /// Extra share of `burst` that may be used before the key is limited (soft throttling).
    pub overage: f64,
    tolerance: u64,
    /// µs past the tolerance a TAT may run while requests are held for their turn
    /// (`excess: delay`'s `max_delay`; 0: a request over the bucket is refused).
    queue: u64,
    /// [`stamp`] of the step and the tolerance with the queue.
    stamp: u16,
}

impl Bucket {
    /// A bucket of `burst` credits regenerating `rate` per second.
    pub fn new(rate: f64, burst: f64, overage: f64) -> Self {
        let per_credit = 1e6 / rate;
        // Rounded down, but not below a whole µs that the division missed by its last bits
        // (1e6 / (1e6 / 3) reads 2.9999999999999996).
        let step = ((per_credit * (1.0 + 4.0 * f64::EPSILON)) as u64).max(1);
        Self {
            step,
            per_credit,
            burst,
            overage,
            tolerance: round(burst * (1.0 + overage) * step as f64),
            queue: 0,
            stamp: 0,
        }
        .remembered()
    }

    /// Itself, its TAT let run `queue` µs past the tolerance: a request charged there waits
    /// until it is back within it (the leaky bucket as a queue).
    pub fn paced(mut self, queue: u64) -> Self {
        self.queue = queue;
        self.remembered()
    }

    /// µs past the tolerance a request may be held ([`paced`](Self::paced)).
    pub fn queue(&self) -> u64 {
        self.queue
    }

    /// Itself, stamped, its step remembered under its stamp ([`step_of`]).
    fn remembered(mut self) -> Self {
        self.stamp = stamp(self.step, self.tolerance + self.queue);
        STEPS[usize::from(self.stamp)].store(self.step, Ordering::Relaxed);
        self
    }

    /// How far a request of `cost` credits moves the TAT.
    pub fn increment(&self, cost: u32) -> u64 {
        u64::from(cost) * self.step
    }

    /// How far ahead of now the TAT may run: the burst plus the overage, in µs.
    pub fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// How long a refused request waits at the configured rate, in µs (rounded up), when
    /// the state says it is `wait` µs of TAT short ([`Charge::Denied`]).
    pub fn retry_after(&self, wait: u64) -> u64 {
        let exact = wait as f64 / self.step as f64 * self.per_credit;
        // Never shorter than the state's own wait: after it the request passes.
        ceil(exact).max(wait)
    }

    /// µs of TAT per credit (the state's unit: a TAT is read with the step it was written at).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// A TAT written by a bucket of `from` µs per credit, as this bucket reads it at `now`
    /// ([`carry`]).
    pub fn carry(&self, tat: u64, now: u64, from: u64) -> u64 {
        carry(tat, now, from, self.step, self.tolerance + self.queue)
    }

    /// What charging a request of `cost` credits asks of the store.
    #[inline]
    pub fn charging(&self, cost: u32) -> BucketCharge {
        BucketCharge {
            increment: self.increment(cost),
            tolerance: self.tolerance + self.queue,
            step: self.step,
            stamp: self.stamp,
        }
    }

    /// Credits available at `now`, overage included, never negative.
    pub fn balance(&self, tat: u64, now: u64) -> f64 {
        let debt = tat.saturating_sub(now) as f64;
        // Clamped: the tolerance is rounded to whole µs.
        ((self.tolerance() as f64 - debt) / self.step as f64)
            .clamp(0.0, self.burst * (1.0 + self.overage))
    }

    /// Credits of the nominal burst left at `now` (what `RateLimit: r=` advertises).
    pub fn remaining(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now) as f64 / self.step as f64;
        // Truncation is floor for the non-negative values here (and needs no libm call).
        (self.burst - debt).max(0.0) as u64
    }
}

/// Rounds a non-negative value to the nearest integer without a libm call (the baseline
/// x86-64 target has no rounding instruction).
fn round(x: f64) -> u64 {
    (x + 0.5) as u64
}

/// Rounds a non-negative value up to an integer, saturating (no libm call either).
fn ceil(x: f64) -> u64 {
    let t = x as u64;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

/// A TAT written by a bucket of `from` µs per credit (another rate or burst: a live change,
/// a plan the client moved from, the elastic bucket), as a bucket of `step` µs per credit and
/// `tolerance` µs reads it at `now`. The client keeps what it owes, in credits, capped at a
/// full bucket: a rate or burst that was raised never refuses what the old one would have
/// admitted at that instant (a raised burst is credited at once), and after any change the
/// next request waits at most the new bucket's full refill. A TAT in the past (a full bucket)
/// is full whatever the rate.
pub fn carry(tat: u64, now: u64, from: u64, step: u64, tolerance: u64) -> u64 {
    let owed = tat.saturating_sub(now);
    if owed == 0 {
        return tat;
    }
    let owed = if from == step {
        owed
    } else {
        // Rounded down: never more owed than the credits say.
        let scaled = u128::from(owed) * u128::from(step) / u128::from(from.max(1));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    };
    now.saturating_add(owed.min(tolerance))
}

/// A bucket's 16-bit stamp (never 0): a hash of its step and tolerance, stored beside its TAT
/// in this process ([`pack`]) so that a bucket of other settings knows to [`carry`] it. Two
/// settings share a stamp one time in 65,535: the state is then read as it is (what every
/// change did before stamps).
pub fn stamp(step: u64, tolerance: u64) -> u16 {
    let h = crate::rng::mix(step ^ tolerance.rotate_left(32));
    (h % 65_535) as u16 + 1
}

/// The step of each stamp seen in this process (0: none): written when a bucket is made, read
/// when a state of another stamp is carried.
static STEPS: [AtomicU64; 65_536] = [const { AtomicU64::new(0) }; 65_536];

/// The step a bucket of `stamp` was made with in this process, if one was.
pub fn step_of(stamp: u16) -> Option<u64> {
    match STEPS[usize::from(stamp)].load(Ordering::Relaxed) {
        0 => None,
        step => Some(step),
    }
}

/// Bits of a stored state that hold the TAT: µs on the process clock, 8.9 years from its
/// start.
const TAT_BITS: u32 = 48;
const TAT_MASK: u64 = (1 << TAT_BITS) - 1;

/// A bucket's state as this process stores it: its TAT and the stamp of the bucket that
/// wrote it.
#[inline]
pub fn pack(tat: u64, stamp: u16) -> u64 {
    (u64::from(stamp) << TAT_BITS) | tat.min(TAT_MASK)
}

/// A stored state's TAT and stamp (0: a state written with none).
#[inline]
pub fn unpack(v: u64) -> (u64, u16) {
    (v & TAT_MASK, (v >> TAT_BITS) as u16)
}

/// A stored state `v` as the bucket `b` charges read it at `now`: its TAT, carried if a
/// bucket of other settings wrote it ([`carry`]; a stamp this process never made reads as the
/// bucket's own), and whether it was. A carried state is written back at once, the request
/// admitted or not: from the first request after a change, what the client owes runs down at
/// the new rate.
#[inline]
pub fn read(v: u64, now: u64, b: &BucketCharge) -> (u64, bool) {
    let (tat, written) = unpack(v);
    if written == b.stamp || written == 0 || tat <= now {
        return (tat, false);
    }
    let from = step_of(written).unwrap_or(b.step);
    (carry(tat, now, from, b.step, b.tolerance), true)
}

/// What charging a request in a bucket asks of the store: [`charge`]'s increment and
/// tolerance, and the bucket's step and stamp, so that a state written at other settings is
/// carried first ([`read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketCharge {
    /// µs the request moves the TAT.
    pub increment: u64,
    /// µs the TAT may run ahead of now.
    pub tolerance: u64,
    /// µs of TAT per credit.
    pub step: u64,
    /// The bucket's [`stamp`].
    pub stamp: u16,
}

impl BucketCharge {
    /// A charge of `increment` µs against `tolerance` µs in no bucket in particular (no step,
    /// stamp 0): the state is read as it stands, whatever bucket wrote it.
    pub fn new(increment: u64, tolerance: u64) -> Self {
        Self {
            increment,
            tolerance,
            ..Self::default()
        }
    }
}

/// Charges `increment` µs against `tolerance` µs.
pub fn charge(tat: u64, now: u64, increment: u64, tolerance: u64) -> Charge {
    let next = tat.max(now).saturating_add(increment);
    let ahead = next - now;
    if ahead <= tolerance {
        Charge::Allowed { tat: next }
    } else {
        Charge::Denied {
            tat,
            wait: ahead - tolerance,
        }
    }
}

/// Gives back a charge of `increment` µs.
pub fn refund(tat: u64, increment: u64) -> u64 {
    tat.saturating_sub(increment)
}

#[cfg(test)]
#[path = "gcra_tests.rs"]
mod tests;
