//! What one phase of a run collected, and its report: latencies by tier in a histogram, the
//! controller's samples and amounts, and the per-phase figures made of its seconds.

use super::profile::Phase;
use super::{PhaseReport, Scenario, Second};

/// Latencies weighted by amount, in 2% buckets from 1 ms to 1000 s.
#[derive(Debug, Clone)]
pub(super) struct Histogram([f64; 700]);

impl Histogram {
    const GROWTH: f64 = 1.02;

    pub(super) fn add(&mut self, seconds: f64, amount: f64) {
        let i = ((seconds / 0.001).max(1.0).ln() / Self::GROWTH.ln()) as usize;
        self.0[i.min(self.0.len() - 1)] += amount;
    }

    /// The upper edge of the bucket holding quantile `q`; `None` when empty.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total: f64 = self.0.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let mut seen = 0.0;
        let i = self.0.iter().position(|&a| {
            seen += a;
            seen >= q * total
        })?;
        Some(0.001 * Self::GROWTH.powi(i as i32 + 1))
    }
}

/// What the current phase collected besides its seconds.
pub(super) struct PhaseLog {
    pub(super) latencies: Vec<Histogram>,
    /// (utilization, demand) of each sample.
    pub(super) samples: Vec<(f64, f64)>,
    /// The amount when the phase began, then after each sample.
    pub(super) amounts: Vec<f64>,
}

impl PhaseLog {
    pub(super) fn new(amount: f64) -> Self {
        Self {
            latencies: vec![Histogram([0.0; 700]); 4],
            samples: Vec::new(),
            amounts: vec![amount],
        }
    }
}

/// The report of the phase that began at `start`.
pub(super) fn close(
    phase: &Phase,
    start: f64,
    seconds: &[Second],
    log: &PhaseLog,
    scenario: &Scenario,
) -> PhaseReport {
    let PhaseLog {
        latencies,
        samples,
        amounts,
    } = log;
    let mine: Vec<&Second> = seconds
        .iter()
        .filter(|s| s.t >= start - 1e-9 && s.t < start + phase.seconds - 1e-9)
        .collect();
    let sum = |f: fn(&Second) -> [f64; 4]| -> [f64; 4] {
        mine.iter()
            .fold([0.0; 4], |acc, s| std::array::from_fn(|t| acc[t] + f(s)[t]))
    };
    let (offered, shed, refused) = (sum(|s| s.offered), sum(|s| s.shed), sum(|s| s.refused));
    let succeeded = sum(|s| s.succeeded);
    // Requests that arrived in the phase before may start in it: a share is at most 1.
    let share = |part: [f64; 4]| {
        std::array::from_fn(|t| {
            if offered[t] > 0.0 {
                (part[t] / offered[t]).min(1.0)
            } else {
                0.0
            }
        })
    };
    let shedding = |s: &Second| s.probability.iter().any(|&p| p > 0.0);
    let first_shed =
        std::array::from_fn(|t| mine.iter().find(|s| s.shed[t] > 0.0).map(|s| s.t - start));
    let back_to_zero = mine
        .first()
        .filter(|s| shedding(s))
        .and_then(|_| mine.iter().find(|s| !shedding(s)))
        .map(|s| s.t - start);
    let deltas: Vec<f64> = amounts
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| d.abs() > 1e-12)
        .collect();
    let reversals = deltas
        .windows(2)
        .filter(|w| w[0].signum() != w[1].signum())
        .count() as u32;
    // At least half a request turned away (shed or refused) beside half a request of a lower
    // tier served.
    let inversions = mine
        .iter()
        .filter(|s| {
            (0..4).any(|hi| {
                s.shed[hi] + s.refused[hi] >= 0.5 && (hi + 1..4).any(|lo| s.succeeded[lo] >= 0.5)
            })
        })
        .count() as u32;
    let n = samples.len().max(1) as f64;
    PhaseReport {
        name: phase.name.clone(),
        start,
        seconds: phase.seconds,
        offered: offered.map(|o| o / phase.seconds),
        shed: share(shed),
        refused: share(refused),
        success: share(succeeded),
        p50: std::array::from_fn(|t| latencies[t].quantile(0.5)),
        p99: std::array::from_fn(|t| latencies[t].quantile(0.99)),
        // Work served (each success its tier's mean time) over the work the app can serve.
        goodput: succeeded
            .iter()
            .zip(scenario.tier_times())
            .map(|(n, t)| n * t)
            .sum::<f64>()
            / phase.seconds
            / (scenario.capacity() * scenario.mean_service()),
        samples: samples.len(),
        // (An empty sum of floats is -0.0: a phase without a sample reads 0.)
        mean_utilization: samples.iter().map(|s| s.0).fold(0.0, |a, u| a + u) / n,
        max_demand: samples.iter().map(|s| s.1).fold(0.0, f64::max),
        amount_end: *amounts.last().unwrap_or(&0.0),
        first_shed,
        back_to_zero,
        reversals,
        inversions,
    }
}
