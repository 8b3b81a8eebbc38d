//! A run's results: every second and every phase, and as text, a Markdown summary per phase
//! and a CSV of every second.

use crate::tier::Tier;
use std::fmt::Write;

/// One simulated second.
#[derive(Debug, Clone, Default)]
pub struct Second {
    /// Its start.
    pub t: f64,
    /// Index of its phase.
    pub phase: usize,
    /// Requests offered, shed by the controller, refused by the fast guard, started in time
    /// and timed out, by tier.
    pub offered: [f64; 4],
    /// See `offered`.
    pub shed: [f64; 4],
    /// See `offered`.
    pub refused: [f64; 4],
    /// See `offered`.
    pub succeeded: [f64; 4],
    /// See `offered`.
    pub timed_out: [f64; 4],
    /// Requests inside the app at its end.
    pub in_flight: f64,
    /// The fast guard's limit at its end (0 without one).
    pub limit: f64,
    /// The controller's latest input, uncapped demand and amount, and the plan's drop
    /// probabilities.
    pub utilization: f64,
    /// See `utilization`.
    pub demand: f64,
    /// See `utilization`.
    pub amount: f64,
    /// See `utilization`.
    pub probability: [f64; 4],
    /// The capacity demand is read against (requests at once: pinned, or learned; 0 while
    /// unknown).
    pub capacity: f64,
}

/// What happened in one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    /// Its name.
    pub name: String,
    /// When it started and how long it lasted, in seconds.
    pub start: f64,
    /// See `start`.
    pub seconds: f64,
    /// Requests offered per second, by tier.
    pub offered: [f64; 4],
    /// Share of the offered requests shed by the controller, refused by the fast guard, and
    /// started within the deadline, by tier.
    pub shed: [f64; 4],
    /// See `shed`.
    pub refused: [f64; 4],
    /// See `shed`.
    pub success: [f64; 4],
    /// Median and 99th percentile latency of the requests started, by tier.
    pub p50: [Option<f64>; 4],
    /// See `p50`.
    pub p99: [Option<f64>; 4],
    /// Work served per second (each success weighted by its tier's mean time) as a share of
    /// the work the app can serve (with one service time: successes per second over C).
    pub goodput: f64,
    /// Controller samples taken in the phase (none in a phase shorter than
    /// `sample_interval`: then the two below read 0).
    pub samples: usize,
    /// Mean controller input, and the largest demand it saw.
    pub mean_utilization: f64,
    /// See `mean_utilization`.
    pub max_demand: f64,
    /// The amount at the phase's end.
    pub amount_end: f64,
    /// Seconds from the phase's start to each tier's first shed request.
    pub first_shed: [Option<f64>; 4],
    /// Seconds from the phase's start until nothing was shed, when it started shedding.
    pub back_to_zero: Option<f64>,
    /// Times the amount turned from rising to falling or back.
    pub reversals: u32,
    /// Seconds in which at least half a request of a tier was shed or refused while as much
    /// of a lower one succeeded.
    pub inversions: u32,
}

/// A run's results.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The server's capacity, requests per second.
    pub capacity: f64,
    /// The controller's thresholds, for charts.
    pub end_of_good: f64,
    /// See `end_of_good`.
    pub start_of_bad: f64,
    /// Every simulated second.
    pub seconds: Vec<Second>,
    /// Every phase.
    pub phases: Vec<PhaseReport>,
}

fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn seconds(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |s| format!("{s:.0} s"))
}

fn millis(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |s| format!("{:.0} ms", s * 1000.0))
}

/// The per-phase summary: one table of the controller and the server, one of the tiers.
pub fn summary(o: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "capacity {:.0} req/s; thresholds end_of_good {} start_of_bad {}\n",
        o.capacity, o.end_of_good, o.start_of_bad
    );
    out.push_str("| phase | from | seconds | goodput (× C) | mean utilization | max demand | amount at end | back to no shedding | reversals | inversion-s |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &o.phases {
        let (utilization, demand) = if p.samples == 0 {
            ("no sample".to_owned(), "no sample".to_owned())
        } else {
            (
                format!("{:.2}", p.mean_utilization),
                format!("{:.2}", p.max_demand),
            )
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} s | {:.0} | {} | {} | {} | {:.3} | {} | {} | {} |",
            p.name,
            p.start,
            p.seconds,
            percent(p.goodput),
            utilization,
            demand,
            p.amount_end,
            seconds(p.back_to_zero),
            p.reversals,
            p.inversions
        );
    }
    out.push_str(
        "\n| phase | tier | offered req/s | shed (worker_utilization) | refused (adaptive_concurrency) | success | p50 | p99 | first shed after |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for p in &o.phases {
        for t in Tier::ALL {
            let i = t.index();
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} |",
                p.name,
                t.as_str(),
                p.offered[i],
                percent(p.shed[i]),
                percent(p.refused[i]),
                percent(p.success[i]),
                millis(p.p50[i]),
                millis(p.p99[i]),
                seconds(p.first_shed[i])
            );
        }
    }
    out
}

/// Every simulated second: time, phase, in flight, the controller's state, and per tier the
/// requests offered, shed, succeeded and timed out and the drop probability; then the fast
/// guard's limit and its refusals per tier, and the capacity demand is read against.
pub fn csv(o: &RunReport) -> String {
    let mut out = String::from("t,phase,in_flight,utilization,demand,amount");
    let columns = ["offered", "shed", "succeeded", "timed_out", "probability"];
    for what in columns {
        for t in Tier::ALL {
            let _ = write!(out, ",{what}_{}", t.as_str());
        }
    }
    out.push_str(",adaptive_limit");
    for t in Tier::ALL {
        let _ = write!(out, ",refused_{}", t.as_str());
    }
    out.push_str(",capacity\n");
    for s in &o.seconds {
        let _ = write!(
            out,
            "{},{},{:.3},{:.4},{:.4},{:.4}",
            s.t, o.phases[s.phase].name, s.in_flight, s.utilization, s.demand, s.amount
        );
        for series in [s.offered, s.shed, s.succeeded, s.timed_out, s.probability] {
            for v in series {
                let _ = write!(out, ",{v:.4}");
            }
        }
        let _ = write!(out, ",{:.2}", s.limit);
        for v in s.refused {
            let _ = write!(out, ",{v:.4}");
        }
        let _ = writeln!(out, ",{:.2}", s.capacity);
    }
    out
}
