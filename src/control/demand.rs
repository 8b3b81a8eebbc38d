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

    /// Requests that reached the controller.
    pub fn reached_total(self) -> u64 {
        self.reached.iter().sum()
    }
}

/// The work that came past the controller over `seconds`, in requests in flight: each
/// request that passed it counted for its tier's service time (`service`, in seconds: what
/// the app takes per request of that tier without queueing, see
/// [`ServiceFloor`](crate::math::service::ServiceFloor); a tier not yet seen counts at the mean
/// of the others). Without any, the mean time in the app of the requests let in stands for
/// it: `in_flight` (the average in flight over the interval) × `seconds` ÷ admitted. `None`
/// when neither is known (nothing was let in and no service time is known): the in-flight
/// average is all there is.
pub fn offered_work(
    interval: Traffic,
    seconds: f64,
    in_flight: f64,
    service: [Option<f64>; 4],
) -> Option<f64> {
    if seconds <= 0.0 {
        return None;
    }
    let known: Vec<f64> = service
        .iter()
        .flatten()
        .copied()
        .filter(|s| *s > 0.0)
        .collect();
    let passed = interval.passed_by_tier();
    if known.is_empty() {
        if interval.admitted == 0 {
            return None;
        }
        let mean = in_flight * seconds / interval.admitted as f64;
        return Some(interval.passed() as f64 * mean / seconds);
    }
    let fallback = known.iter().sum::<f64>() / known.len() as f64;
    let work: f64 = (0..4)
        .map(|t| passed[t] as f64 * service[t].filter(|s| *s > 0.0).unwrap_or(fallback))
        .sum();
    Some(work / seconds)
}

/// The demand with what the controller shed added back: `input` (the controller's own,
/// uncapped) scaled by the requests that reached it over those that passed it.
pub fn with_shed(input: f64, interval: Traffic) -> f64 {
    match interval.passed() {
        0 => input,
        passed => input * interval.reached_total() as f64 / passed as f64,
    }
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
mod tests {
    use super::*;

    /// All in the GET tier.
    fn interval(reached: u64, shed: u64, admitted: u64) -> Traffic {
        Traffic {
            reached: [0, 0, reached, 0],
            shed: [0, 0, shed, 0],
            admitted,
        }
    }

    fn every_tier(s: f64) -> [Option<f64>; 4] {
        [Some(s); 4]
    }

    #[test]
    fn twice_the_capacity_reads_two_whatever_the_fast_guard_let_in() {
        // 8 workers, 50 ms a request: 160/s is capacity. At 320/s for 8 s the fast guard let
        // in 1,280 and refused as many: 2,560 requests × 50 ms over 8 s = 16 in flight.
        let work = offered_work(interval(2_560, 0, 1_280), 8.0, 10.0, every_tier(0.05)).unwrap();
        assert!((work / 8.0 - 2.0).abs() < 1e-9, "{work}");
        // At half the capacity nothing is refused: 4 in flight.
        let calm = offered_work(interval(640, 0, 640), 8.0, 4.0, every_tier(0.05)).unwrap();
        assert!((calm / 8.0 - 0.5).abs() < 1e-9, "{calm}");
    }

    #[test]
    fn what_the_controller_shed_is_its_feedback_and_is_shown_added_back() {
        // Of 2,560 that reached it the controller shed 1,280: its input is what is left (1),
        // the operator's reading the whole demand (2).
        let i = interval(2_560, 1_280, 1_280);
        let input = offered_work(i, 8.0, 8.0, every_tier(0.05)).unwrap() / 8.0;
        assert!((input - 1.0).abs() < 1e-9, "{input}");
        assert!((with_shed(input, i) - 2.0).abs() < 1e-9);
        // Nothing passed: nothing to scale by.
        assert_eq!(with_shed(0.3, interval(10, 10, 0)), 0.3);
    }

    #[test]
    fn without_a_service_time_the_mean_time_in_the_app_stands_for_it() {
        // 6 in flight on average over 8 s with 960 let in: 50 ms each (Little's law). 480
        // more were refused by the fast guard: they count for as long.
        let work = offered_work(interval(1_440, 0, 960), 8.0, 6.0, [None; 4]).unwrap();
        assert!((work - 9.0).abs() < 1e-9, "{work}");
        // Nothing let in and no service time: unknown.
        assert_eq!(offered_work(interval(5, 0, 0), 8.0, 0.0, [None; 4]), None);
        assert_eq!(offered_work(interval(5, 0, 5), 0.0, 1.0, [None; 4]), None);
    }

    #[test]
    fn each_tier_counts_for_its_own_service_time() {
        // Over 4 s: 40 charges of 200 ms, 400 GETs of 10 ms, and 100 POSTs of a tier not
        // yet seen (counted at the mean of the known ones, 105 ms).
        let i = Traffic {
            reached: [40, 100, 400, 0],
            shed: [0; 4],
            admitted: 540,
        };
        let work = offered_work(i, 4.0, 0.0, [Some(0.2), None, Some(0.01), None]).unwrap();
        assert!((work - (8.0 + 10.5 + 4.0) / 4.0).abs() < 1e-9, "{work}");
    }

    #[test]
    fn an_unknown_capacity_reads_zero_and_a_known_one_reads_demand() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let in_flight = Arc::new(InFlight::default());
        let learned = Arc::new(AtomicU64::new(0));
        let (cap, counts) = (learned.clone(), Arc::new(AtomicU64::new(0)));
        let c2 = counts.clone();
        let mut s = InFlightSource::new(in_flight, move || {
            let c = f64::from_bits(cap.load(Ordering::Relaxed));
            (c > 0.0).then_some(c)
        })
        .with_traffic(
            move || interval(c2.load(Ordering::Relaxed), 0, c2.load(Ordering::Relaxed)),
            || [Some(Duration::from_millis(50)); 4],
        );
        s.sample(Duration::ZERO).unwrap();
        counts.store(2_560, Ordering::Relaxed);
        assert_eq!(
            s.sample(Duration::from_secs(8)).unwrap(),
            0.0,
            "not known yet"
        );
        learned.store(8f64.to_bits(), Ordering::Relaxed);
        counts.store(5_120, Ordering::Relaxed);
        let u = s.sample(Duration::from_secs(16)).unwrap();
        assert!((u - 2.0).abs() < 1e-9, "{u}");
    }
}
