//! Demand and the `in_flight` source that reads it: the work offered to this server over a
//! sample interval, in requests in flight.
//!
//! Counting only the requests let into the app cannot see overload once the fast guard
//! (adaptive_concurrency) holds what it lets in below capacity: the app then looks busy but
//! fine while half of its traffic is refused. The controller's input counts every request
//! that came past the controller itself — let in, refused or kept waiting by the fast guard —
//! each for one service time (Little's law: arrivals × time each holds a worker = work in
//! flight). What the controller shed itself is left out of its input: that is its feedback,
//! as in Stripe's design the worker utilization falls as the shedder drops work. Operators
//! see it added back ([`with_shed`]): the whole demand, 2 at twice the capacity.

use super::average::TimeAverage;
use super::source::{InFlight, SourceError, UtilizationSource};
use std::sync::Arc;
use std::time::Duration;

/// Request counts since start, per tier (`Tier::index` order), as the engine's metrics keep
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Requests that reached the load limiters (past request_rate and concurrent_requests,
    /// which refuse a client's excess, not the server's).
    pub reached: [u64; 4],
    /// Requests worker_utilization refused (enforced).
    pub shed: [u64; 4],
    /// Requests let into the app.
    pub admitted: u64,
}

impl Traffic {
    /// The counts between `earlier` and `self`.
    pub fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            reached: std::array::from_fn(|t| self.reached[t].saturating_sub(earlier.reached[t])),
            shed: std::array::from_fn(|t| self.shed[t].saturating_sub(earlier.shed[t])),
            admitted: self.admitted.saturating_sub(earlier.admitted),
        }
    }

    /// Requests of each tier that came past the controller's shedding.
    pub fn passed_by_tier(self) -> [u64; 4] {
        std::array::from_fn(|t| self.reached[t].saturating_sub(self.shed[t]))
    }

    /// Requests that came past the controller's shedding.
    pub fn passed(self) -> u64 {
        self.passed_by_tier().iter().sum()
    }
}

/// The work that came past the controller over `seconds`, in requests in flight: each
/// request that passed it counted for its tier's service time (`service`, seconds, see
/// [`ServiceFloor`](crate::math::service::ServiceFloor)). Without any, the mean time in the
/// app of the requests let in: `in_flight` (averaged) × `seconds` ÷ admitted. `None` when
/// neither is known.
pub fn offered_work(
    interval: Traffic,
    seconds: f64,
    in_flight: f64,
    service: [Option<f64>; 4],
) -> Option<f64> {
    if seconds <= 0.0 {
        return None;
    }
    let passed = interval.passed_by_tier();
    let Some(weights) = tier_times(service) else {
        if interval.admitted == 0 {
            return None;
        }
        let mean = in_flight * seconds / interval.admitted as f64;
        return Some(interval.passed() as f64 * mean / seconds);
    };
    Some(weighed(passed, weights) / seconds)
}

/// Each tier's service time, an unknown one at the others' mean; `None` if none is known.
fn tier_times(service: [Option<f64>; 4]) -> Option<[f64; 4]> {
    let known = |s: &Option<f64>| s.filter(|s| *s > 0.0);
    let (n, sum) =
        (service.iter().filter_map(known)).fold((0.0, 0.0), |(n, sum), s| (n + 1.0, sum + s));
    (n > 0.0).then(|| service.map(|s| known(&s).unwrap_or(sum / n)))
}

fn weighed(requests: [u64; 4], weights: [f64; 4]) -> f64 {
    (0..4).map(|t| requests[t] as f64 * weights[t]).sum()
}

/// The demand with what the controller shed added back: `input` (uncapped) times the work
/// that reached it over the work that passed it (requests while no service time is known).
pub fn with_shed(input: f64, interval: Traffic, service: [Option<f64>; 4]) -> f64 {
    let weights = tier_times(service).unwrap_or([1.0; 4]);
    let passed = weighed(interval.passed_by_tier(), weights);
    if passed <= 0.0 {
        return input;
    }
    input * weighed(interval.reached, weights) / passed
}

/// The capacity `in_flight` reads against: pinned by the operator
/// (`worker_utilization.capacity`), else learned from what the app was seen to serve
/// ([`CapacityEstimate`](crate::math::capacity::CapacityEstimate)), else not known yet.
pub type CapacityFn = Box<dyn Fn() -> Option<f64> + Send>;

/// `in_flight`: the work offered to the app divided by its capacity (the requests it serves
/// at once: pinned, or learned), over the sample interval.
///
/// On its own it reads the requests in progress (read every
/// [`OBSERVE_EVERY`](super::OBSERVE_EVERY) and averaged). Given the engine's request counts
/// ([`with_traffic`](Self::with_traffic)) it reads demand instead: every request that came
/// past the controller — let in, or refused or kept waiting by the fast guard — counted for
/// its tier's service time (see [`offered_work`]), so a fast guard that keeps what it lets in
/// below capacity does not hide the overload from the controller. While the capacity is not
/// known (the app was never seen saturated, and none is pinned) it reads 0: a reading against
/// a guess could shed an app that is only busy.
pub struct InFlightSource {
    in_flight: Arc<InFlight>,
    capacity: CapacityFn,
    average: TimeAverage,
    traffic: Option<TrafficProbe>,
}

/// Each tier's service time, when known.
type ServiceFn = Box<dyn Fn() -> [Option<Duration>; 4] + Send>;

/// The request counts and the service times an [`InFlightSource`] reads demand from.
struct TrafficProbe {
    counts: Box<dyn Fn() -> Traffic + Send>,
    service: ServiceFn,
    last: Option<(Traffic, Duration)>,
}

impl InFlightSource {
    /// Reads `in_flight` against a capacity that may change at run time (`None`: not known).
    pub fn new(
        in_flight: Arc<InFlight>,
        capacity: impl Fn() -> Option<f64> + Send + 'static,
    ) -> Self {
        Self {
            in_flight,
            capacity: Box::new(capacity),
            average: TimeAverage::default(),
            traffic: None,
        }
    }

    /// Reads demand from `counts` (request counts since start) and `service` (each tier's
    /// time per request without queueing, when known; otherwise the mean time in the app of
    /// the requests let in stands for it).
    pub fn with_traffic(
        mut self,
        counts: impl Fn() -> Traffic + Send + 'static,
        service: impl Fn() -> [Option<Duration>; 4] + Send + 'static,
    ) -> Self {
        self.traffic = Some(TrafficProbe {
            counts: Box::new(counts),
            service: Box::new(service),
            last: None,
        });
        self
    }

    fn capacity(&self) -> Option<f64> {
        (self.capacity)().filter(|c| c.is_finite() && *c > 0.0)
    }

    fn reading(&self) -> f64 {
        self.capacity()
            .map_or(0.0, |c| self.in_flight.total() as f64 / c)
    }
}

impl UtilizationSource for InFlightSource {
    fn name(&self) -> &str {
        "in_flight"
    }
    fn sample(&mut self, now: Duration) -> Result<f64, SourceError> {
        let average = self.average.take(now, self.reading());
        let capacity = self.capacity();
        let Some(probe) = self.traffic.as_mut() else {
            return Ok(average);
        };
        let counts = (probe.counts)();
        let last = probe.last.replace((counts, now));
        let Some(capacity) = capacity else {
            return Ok(0.0);
        };
        let Some((earlier, at)) = last else {
            return Ok(average);
        };
        let seconds = now.saturating_sub(at).as_secs_f64();
        let service = (probe.service)().map(|d| d.map(|d| d.as_secs_f64()));
        let work = offered_work(counts.since(earlier), seconds, average * capacity, service);
        Ok(work.map_or(average, |w| w / capacity))
    }
    fn observe(&mut self, now: Duration) {
        let reading = self.reading();
        self.average.observe(now, reading);
    }
}

#[cfg(test)]
#[path = "demand_tests.rs"]
mod tests;
