//! How far the adaptive limit is cut on a queue that stood
//! [`SUSTAINED`](super::SUSTAINED) windows in a row.

use super::{summed, AdaptiveLimit};

impl AdaptiveLimit {
    /// The requests the app serves at once, once learned (`None` until then): a standing
    /// queue is then cut by no more than the share of what came beyond what the app serves
    /// in that time at its recent mix of routes.
    pub fn set_capacity(&mut self, capacity: Option<f64>) {
        self.capacity = capacity;
    }

    /// The factor a standing queue cuts the limit by. By the gradient of the whole run's last
    /// [`SUSTAINED`](super::SUSTAINED) windows, not of the last one alone: a window of a few requests whose
    /// times spread log-normally is often half again as slow as its mix by chance, and a cut
    /// on each such window holds the limit below what the app serves at once (its workers
    /// idle, and the capacity is learned as what they served).
    ///
    /// Unless held, by no more than the share of what came that the app did not finish: a
    /// moderate load's queue behind a few slow requests drains (fewer come than finish); cut
    /// on its lagging latencies, it refused for seconds. Nor, once the capacity is known, by
    /// more than the share of what came beyond what the app serves in that time at its recent
    /// mix of routes: while a few slow requests hold every worker nothing finishes, and all
    /// that comes looks unfinished at a load the app carries (300 ms reports among 1 ms cache
    /// hits at 0.75C: a queue standing two seconds, the limit halved under it).
    pub(super) fn standing_cut(&self) -> f64 {
        let (took, expected) = summed(&self.run_sums);
        let (came, finished) = summed(&self.run_flow);
        let mut excess = (came - finished).max(0.0) / came.max(1.0);
        if let (Some(capacity), Some(per)) = (self.capacity, self.service.mix_mean()) {
            let serves = capacity * self.run_span.iter().sum::<f64>() / per.max(1.0);
            excess = excess.min((came - serves).max(0.0) / came.max(1.0));
        }
        (self.params.tolerance * expected / took.max(1.0))
            .clamp(0.5, 1.0)
            .max(if self.hold { 0.0 } else { 1.0 - excess })
    }
}
