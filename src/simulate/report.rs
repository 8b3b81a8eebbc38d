//! A run's results as text: a Markdown summary per phase, and a CSV of every second.

use super::RunReport;
use crate::tier::Tier;
use std::fmt::Write;

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
/// guard's limit and its refusals per tier.
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
    out.push('\n');
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
        out.push('\n');
    }
    out
}
