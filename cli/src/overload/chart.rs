//! The scorecard's chart of one arm: successes and p99 by tier, refusals by who made them,
//! and the controller's amount beside adaptive_concurrency's limit, phases marked.

use super::load::Phase;
use super::report;
use crate::chart::{self, Panel, Series, TIER_COLORS};
use brownout::limiter::LimiterName;
use brownout::tier::Tier;
use plotters::style::{BLACK, BLUE, RED};
use std::path::Path;

/// Per arm: successes per second and p99 latency by tier, refusals per second by who made
/// them, and the controller's amount beside adaptive_concurrency's limit; phases marked.
pub(super) fn arm(
    path: &Path,
    arm: &str,
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
            refusals_panel(arm, per_second),
            controller_panel(arm, polled),
        ],
    )
}

/// Refusals per second by the limiter each refusal's body named.
fn refusals_panel(arm: &str, per_second: &[[report::SecondTier; 4]]) -> Panel {
    let (fast, slow) = (
        LimiterName::AdaptiveConcurrency as usize,
        LimiterName::WorkerUtilization as usize,
    );
    let who = [
        ("adaptive_concurrency", Some(fast), BLUE),
        ("worker_utilization", Some(slow), RED),
        ("any other", None, BLACK),
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
        .map(|&(name, slot, color)| {
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
/// adaptive_concurrency's limit as a share of the largest it reached.
fn controller_panel(arm: &str, polled: &[report::Polled]) -> Panel {
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
    Panel {
        title: format!("{arm}: controller's amount, and fast guard's limit ÷ {top:.0}"),
        y: -0.3..1.05,
        series: vec![
            Series::new("amount", RED, known(|p| p.amount)),
            Series::new("limit", BLUE, limit),
        ],
    }
}
