//! Stripe's derivative controller for the worker-utilization shedder (docs/how-it-decides.md, "How a request
//! is decided", step 8). Pure math.
//!
//! The controller integrates a derivative of utilization into a shedding *amount*: it grows
//! while the server is bad, stays put in a dead zone, and shrinks while it is good. The amount
//! rests below zero, so a bad server waits `seconds_before_shedding` before shedding anything.

use std::time::Duration;

/// The controller's thresholds and time constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerParams {
    /// Below this utilization, shedding recovers.
    pub end_of_good: f64,
    /// At or above this utilization, shedding grows.
    pub start_of_bad: f64,
    /// Time a fully bad server waits before shedding starts.
    pub seconds_before_shedding: f64,
    /// Time a fully bad server takes to shed everything once started.
    pub seconds_to_shed_all: f64,
}

/// Stripe's, and the defaults of `limiters.worker_utilization`.
impl Default for ControllerParams {
    fn default() -> Self {
        Self {
            end_of_good: 0.7,
            start_of_bad: 0.8,
            seconds_before_shedding: 28.0,
            seconds_to_shed_all: 120.0,
        }
    }
}

impl ControllerParams {
    /// The amount at rest: `-seconds_before_shedding / seconds_to_shed_all`, in floating point
    /// (integer division would make it 0 and shed at the first bad sample).
    pub fn resting(&self) -> f64 {
        -self.seconds_before_shedding / self.seconds_to_shed_all
    }

    /// The rate of change of the amount per second at utilization `u`.
    pub fn derivative(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        let raw = if u < self.end_of_good {
            u / self.end_of_good - 1.0
        } else if u < self.start_of_bad {
            0.0
        } else {
            (u - self.start_of_bad) / (1.0 - self.start_of_bad)
        };
        raw.clamp(-1.0, 1.0) / self.seconds_to_shed_all
    }
}

/// The controller's state: the amount and when it last moved.
#[derive(Debug, Clone)]
pub struct Controller {
    params: ControllerParams,
    amount: f64,
    last: Duration,
    /// The last update was given a non-finite reading or worked out a non-finite amount, and
    /// went back to rest instead.
    faulted: bool,
}

impl Controller {
    /// A controller at rest, as of `now`.
    pub fn new(params: ControllerParams, now: Duration) -> Self {
        let mut controller = Self {
            amount: 0.0,
            params,
            last: now,
            faulted: false,
        };
        controller.amount = controller.rest();
        controller
    }

    /// The amount at rest, finite whatever the parameters (validated ones always give a
    /// finite one; 0 stands in otherwise).
    pub fn rest(&self) -> f64 {
        let resting = self.params.resting();
        if resting.is_finite() {
            resting.min(0.0)
        } else {
            0.0
        }
    }

    /// Whether the last update went back to rest because its reading or the amount it worked
    /// out was not a finite number (NaN or infinite): the caller logs it.
    pub fn faulted(&self) -> bool {
        self.faulted
    }

    /// The current amount, in `[resting, 1]`.
    #[cfg(any(test, feature = "simulate"))]
    pub fn amount(&self) -> f64 {
        self.amount
    }

    /// The parameters in force.
    pub fn params(&self) -> ControllerParams {
        self.params
    }

    /// Changes the parameters (a live config update), keeping the amount within the new range.
    pub fn set_params(&mut self, params: ControllerParams) {
        self.params = params;
        self.amount = self.settle(self.amount);
    }

    /// `next` within `[rest, 1]`, or the rest if it is not a finite number.
    fn settle(&mut self, next: f64) -> f64 {
        let rest = self.rest();
        self.faulted = !next.is_finite();
        if self.faulted {
            rest
        } else {
            next.clamp(rest, 1.0)
        }
    }

    /// Feeds one utilization sample taken at `now`; returns the new amount.
    ///
    /// The elapsed time is clamped to `[0, seconds_before_shedding]`, so a long gap between
    /// samples (or a clock that went backwards) cannot jump the amount. A reading that is not
    /// a finite number, or an amount that would not be one, puts the controller back at rest
    /// (and [`faulted`](Self::faulted) says so).
    pub fn update(&mut self, utilization: f64, now: Duration) -> f64 {
        let dt = now
            .saturating_sub(self.last)
            .as_secs_f64()
            .min(self.params.seconds_before_shedding);
        self.last = now;
        let next = if utilization.is_finite() {
            self.amount + dt * self.params.derivative(utilization)
        } else {
            f64::NAN
        };
        self.amount = self.settle(next);
        self.amount
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
