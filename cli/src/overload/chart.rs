//! The scorecard's chart of one arm: successes and p99 by tier, refusals by who made them,
//! and the controller's amount beside adaptive_concurrency's limit, phases marked.

use super::load::Phase;
use super::report;
use crate::chart::{self, Panel, Series, TIER_COLORS};
use brownout::limiter::LimiterName;
use brownout::tier::Tier;
use plotters::style::{BLACK, BLUE, RED};
use std::path::Path;

/// Which of brownout's two overload loops run in an arm: the controller (worker_utilization)
/// and the fast guard (adaptive_concurrency). A loop that is off is not drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loops {
    pub(super) controller: bool,
    pub(super) guard: bool,
}

impl Loops {
    /// Those that run under `c`.
    pub(super) fn of(c: &brownout_cli::config::CliConfig) -> Self {
        let l = &c.brownout.limiters;
        Self {
            controller: l.worker_utilization.mode != brownout::Mode::Off,
            guard: l.adaptive_concurrency.mode != brownout::Mode::Off,
        }
    }
}

/// Per arm: successes per second and p99 latency by tier, refusals per second by who made
/// them, and the controller's amount beside adaptive_concurrency's limit (those of them that
/// run in the arm); phases marked.
pub(super) fn arm(
    path: &Path,
    (arm, loops): (&str, Loops),
    per_second: &[[report::SecondTier; 4]],
    polled: &[report::Polled],
    phases: &[Phase],
) -> Result<(), String> {
    let mut marks = Vec::new();
    let mut at = 0.0;
    for p in phases {
        marks.push((at, p.name.to_owned()));
        at += p.seconds;
    }
    let line = |t: usize, f: fn(&report::SecondTier) -> f64| -> Vec<(f64, f64)> {
        per_second
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64, f(&s[t])))
            .collect()
    };
    let peak = |f: fn(&report::SecondTier) -> f64| {
        per_second
            .iter()
            .flat_map(|s| s.iter().map(f))
            .filter(|v| v.is_finite())
            .fold(1.0, f64::max)
            * 1.05
    };
    let ok = |s: &report::SecondTier| f64::from(s.ok);
    // A second without a success has no latency to draw (not 0 ms).
    let p99 = |s: &report::SecondTier| if s.ok == 0 { f64::NAN } else { s.p99 };
    let series = |f: fn(&report::SecondTier) -> f64| {
        Tier::ALL
            .iter()
            .map(|t| Series::new(t.as_str(), TIER_COLORS[t.index()], line(t.index(), f)))
            .collect()
    };
    chart::draw(
        path,
        per_second.len() as f64,
        &marks,
        vec![
            Panel {
                title: format!("{arm}: successes per second by tier"),
                y: 0.0..peak(ok),
                series: series(ok),
            },
            Panel {
                title: format!("{arm}: p99 latency of successes by tier (s)"),
                y: 0.0..peak(p99).min(2.0),
                series: series(p99),
            },
            refusals_panel(arm, per_second, loops),
        ]
        .into_iter()
        .chain(controller_panel(arm, polled, loops))
        .collect(),
    )
}

/// Refusals per second by the limiter each refusal's body named (brownout's two overload
/// loops only where they run).
fn refusals_panel(arm: &str, per_second: &[[report::SecondTier; 4]], loops: Loops) -> Panel {
    let (fast, slow) = (
        LimiterName::AdaptiveConcurrency as usize,
        LimiterName::WorkerUtilization as usize,
    );
    let who = [
        ("adaptive_concurrency", Some(fast), BLUE, loops.guard),
        ("worker_utilization", Some(slow), RED, loops.controller),
        ("every other", None, BLACK, true),
    ];
    let count = |s: &[report::SecondTier; 4], slot: Option<usize>| -> f64 {
        let of = |t: &report::SecondTier| match slot {
            Some(i) => t.refused[i],
            None => t.refused.iter().sum::<u32>() - t.refused[fast] - t.refused[slow],
        };
        s.iter().map(of).map(f64::from).sum()
    };
    let series: Vec<Series> = who
        .iter()
        .filter(|w| w.3)
        .map(|&(name, slot, color, _)| {
            let points = per_second
                .iter()
                .enumerate()
                .map(|(i, s)| (i as f64, count(s, slot)))
                .collect();
            Series::new(name, color, points)
        })
        .collect();
    let peak = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    Panel {
        title: format!("{arm}: refusals per second, by who refused"),
        y: 0.0..peak * 1.05,
        series,
    }
}

/// The controller's amount (−0.23 at rest, 1 sheds every tier it may) beside
/// adaptive_concurrency's limit as a share of the largest it reached, each only where it runs
/// (no panel where neither does).
fn controller_panel(arm: &str, polled: &[report::Polled], loops: Loops) -> Option<Panel> {
    let known = |f: fn(&report::Polled) -> f64| -> Vec<(f64, f64)> {
        let points = polled.iter().enumerate().map(|(i, p)| (i as f64, f(p)));
        points.filter(|p| p.1.is_finite()).collect()
    };
    let top = polled
        .iter()
        .map(|p| p.limit)
        .filter(|l| l.is_finite())
        .fold(1.0, f64::max);
    let limit = known(|p| p.limit)
        .into_iter()
        .map(|(t, l)| (t, l / top))
        .collect();
    let mut series = Vec::new();
    let mut said = Vec::new();
    if loops.controller {
        series.push(Series::new("amount", RED, known(|p| p.amount)));
        said.push("controller's amount (sheds above 0, all it may at 1)".to_owned());
    }
    if loops.guard {
        series.push(Series::new("limit ÷ peak", BLUE, limit));
        said.push(format!(
            "fast guard's limit as a share of its peak ({top:.0} requests in flight)"
        ));
    }
    (!said.is_empty()).then(|| Panel {
        title: format!("{arm}: {}", said.join("; ")),
        y: -0.3..1.05,
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_without_brownout_draws_nothing_of_brownout() {
        let dir = std::env::temp_dir().join(format!("brownout-arm-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vegas.svg");
        let second = [report::SecondTier::default(); 4];
        let polled = report::Polled {
            amount: 0.5,
            limit: 30.0,
            demand: 1.0,
            capacity: 8.0,
            service: 0.05,
        };
        let phases = [Phase {
            name: "2C",
            seconds: 3.0,
            load: 2.0,
            load_end: 2.0,
            slow: false,
            mix: crate::overload::load::MIX,
        }];
        let off = Loops {
            controller: false,
            guard: false,
        };
        arm(&path, ("vegas", off), &[second; 3], &[polled; 3], &phases).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for absent in [
            "amount",
            "limit",
            "adaptive_concurrency",
            "worker_utilization",
        ] {
            assert!(
                !svg.contains(absent),
                "{absent} drawn in an arm without brownout"
            );
        }
        assert!(svg.contains("every other") && svg.contains("2C"));
        let on = Loops {
            controller: true,
            guard: true,
        };
        arm(&path, ("config", on), &[second; 3], &[polled; 3], &phases).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.contains("requests in flight"),
            "the limit's scale is named"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
