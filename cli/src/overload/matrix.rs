//! `bench overload`'s matrix table of the zero-tuning targets, one row per app (the apps:
//! [`super::app`]).

use super::load::{Phase, RAMP};
use super::report::{PhaseReport, Polled, SecondTier};
use brownout::limiter::LimiterName;
use brownout::simulate::kept_workers;
use brownout::tier::Tier;
use brownout_cli::config::COLD_SLOWDOWN;
use std::fmt::Write;

/// What one app's run measured, for its matrix row.
pub struct AppRun<'a> {
    /// The app.
    pub app: &'a str,
    /// Its capacity, requests a second, and what its capacity in requests at once is (its
    /// workers; its cores when CPU-bound).
    pub capacity: f64,
    /// See `capacity`.
    pub at_once: f64,
    /// The phases and their reports.
    pub phases: &'a [Phase],
    /// See `phases`.
    pub reports: &'a [PhaseReport],
    /// Every second, per tier.
    pub per_second: &'a [[SecondTier; 4]],
    /// The mean time of a request of the mix (seconds): goodput is work served (each success
    /// weighted by its route's mean time) over the work the app can serve.
    pub mean: f64,
    /// What `/v1/state` said every second.
    pub polled: &'a [Polled],
    /// Health checks answered 2xx, and sent (none: the app had none).
    pub health: Option<(u64, u64)>,
    /// Whether its first phase was a cold start ([`COLD_SLOWDOWN`] times slower).
    pub cold: bool,
}

/// The matrix table's head.
pub fn head() -> String {
    "| app | C | refused at 0.5C / 0.75C | demand at 0.5C (0.3C after) | 2C: critical ok, goodput, critical p99 ÷ calm, worker_utilization's share of refusals (last 120 s), demand | 4C: critical ok, goodput, critical p99 ÷ calm | 10C spike: worst 5 s goodput, critical ok, timeouts | halved: goodput × new C from 10 s | 0.3C after 4C: last 503 after | ramp 0.3C to 3C: refused below 0.9C, load at the first 503 | health checks ok | learned capacity ÷ workers |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n".into()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The mean of the polled `field` over seconds `from..to` of the run (NaN left out).
fn mean_polled(polled: &[Polled], from: f64, to: f64, field: fn(&Polled) -> f64) -> Option<f64> {
    let v: Vec<f64> = polled
        .get(from as usize..(to as usize).min(polled.len()))
        .unwrap_or(&[])
        .iter()
        .map(field)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

impl AppRun<'_> {
    /// Seconds from the run's start to phase `i`'s.
    fn start(&self, i: usize) -> f64 {
        self.phases[..i].iter().map(|p| p.seconds).sum()
    }

    /// Goodput of phase `i`: work served per second over what the app can serve.
    fn goodput(&self, i: usize) -> Option<f64> {
        let s = self.start(i);
        self.goodput_between(s as usize, (s + self.phases[i].seconds) as usize, 1.0)
    }

    /// Goodput over seconds `from..to` of the run, `slowdown` times the work per request.
    fn goodput_between(&self, from: usize, to: usize, slowdown: f64) -> Option<f64> {
        let seconds = self.per_second.get(from..to.min(self.per_second.len()))?;
        if seconds.is_empty() {
            return None;
        }
        let work: f64 = seconds.iter().flatten().map(|t| t.work).sum();
        Some(work * slowdown / seconds.len() as f64 / (self.capacity * self.mean))
    }

    /// On the ramp: refusals sent in seconds wholly below 0.9C, and the load of the first
    /// second with a 503.
    fn ramp(&self) -> Option<(u32, Option<f64>)> {
        let i = self.phases.iter().position(|p| p.name == RAMP)?;
        let (p, start) = (&self.phases[i], self.start(i));
        let mut below = 0;
        let mut first = None;
        for s in start as usize..(start + p.seconds) as usize {
            let Some(second) = self.per_second.get(s) else {
                break;
            };
            let into = s as f64 - start;
            if p.load_at(into + 1.0) < 0.9 {
                below += second
                    .iter()
                    .map(|t| t.refused.iter().sum::<u32>())
                    .sum::<u32>();
            }
            if first.is_none() && second.iter().any(|t| t.shed > 0) {
                first = Some(p.load_at(into));
            }
        }
        Some((below, first))
    }
}

/// One app's row.
pub fn row(r: &AppRun<'_>) -> String {
    let find = |name: &str| r.phases.iter().position(|p| p.name == name);
    let refused = |i: Option<usize>| {
        i.map_or_else(
            || "–".into(),
            |i| r.reports[i].refused.iter().sum::<u64>().to_string(),
        )
    };
    let second_half = |i: usize, field: fn(&Polled) -> f64| {
        let s = r.start(i);
        mean_polled(
            r.polled,
            s + r.phases[i].seconds / 2.0,
            s + r.phases[i].seconds,
            field,
        )
    };
    let num = |x: Option<f64>| x.map_or_else(|| "–".into(), |x| format!("{x:.2}"));
    let pct_or = |x: Option<f64>| x.map_or_else(|| "–".into(), pct);
    // The calm reference of critical p99: 0.5C, or 0.75C after a cold start (whose 0.5C is
    // an overload).
    let calm = find(if r.cold { "0.75C" } else { "0.5C" })
        .and_then(|i| r.reports[i].tiers[Tier::Critical.index()].quantiles)
        .map(|q| q[1]);
    let overload = |i: Option<usize>, with_share: bool| {
        let Some(i) = i else { return "–".into() };
        let rep = &r.reports[i];
        let critical = &rep.tiers[Tier::Critical.index()];
        let ratio = match (critical.quantiles.map(|q| q[1]), calm) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
            _ => "–".into(),
        };
        let mut s = format!(
            "{}, {}, {ratio}",
            pct(critical.success()),
            pct_or(r.goodput(i))
        );
        if with_share {
            let share = rep
                .late_share_of_controller()
                .map_or_else(|| "–".into(), pct);
            let demand = num(second_half(i, |p| p.demand));
            let _ = write!(s, ", {share}, {demand}");
        }
        s
    };
    let spike = find("10C spike").map_or_else(
        || "–".into(),
        |i| {
            let rep = &r.reports[i];
            let s = r.start(i) as usize;
            let worst = (s..s + r.phases[i].seconds as usize)
                .step_by(5)
                .filter_map(|w| r.goodput_between(w, w + 5, 1.0))
                .min_by(f64::total_cmp);
            format!(
                "{}, {}, {}",
                pct_or(worst),
                pct(rep.tiers[Tier::Critical.index()].success()),
                pct(rep.timeout_share())
            )
        },
    );
    // The new capacity is what the workers left serve (3 of 5 when half are taken away, as
    // the demo takes whole workers): each request counted for as many times its work as the
    // old capacity is the new.
    let halved = find("halved 1.5C").map_or_else(
        || "–".into(),
        |i| {
            let (s, e) = (
                r.start(i) as usize + 10,
                (r.start(i) + r.phases[i].seconds) as usize,
            );
            pct_or(r.goodput_between(s, e, r.at_once / kept_workers(r.at_once, 2.0)))
        },
    );
    let recovery = find("0.3C").map_or_else(
        || "–".into(),
        |i| {
            r.reports[i]
                .last_shed
                .map_or_else(|| "none".into(), |s| format!("{s:.0} s"))
        },
    );
    // A cold start's first phase is an overload of a third of the capacity: its goodput is
    // judged against that.
    let calm_refused = match find("0.5C") {
        Some(i) if r.cold => {
            let s = r.start(i) as usize;
            let e = (r.start(i) + r.phases[i].seconds) as usize;
            format!(
                "cold ({} refused, goodput {} of C ÷ {COLD_SLOWDOWN})",
                refused(Some(i)),
                pct_or(r.goodput_between(s, e, f64::from(COLD_SLOWDOWN)))
            )
        }
        i => refused(i),
    };
    let ramp = r.ramp().map_or_else(
        || "–".into(),
        |(below, first)| {
            format!(
                "{below}, {}",
                first.map_or_else(|| "none".into(), |l| format!("{l:.2}C"))
            )
        },
    );
    let health = r.health.map_or_else(
        || "–".into(),
        |(ok, sent)| pct(ok as f64 / sent.max(1) as f64),
    );
    let learned = find("2C").and_then(|i| second_half(i, |p| p.capacity));
    let demand_calm = find("0.5C").and_then(|i| second_half(i, |p| p.demand));
    let demand_after = find("0.3C").and_then(|i| second_half(i, |p| p.demand));
    format!(
        "| {} | {:.0}/s | {calm_refused} / {} | {} ({}) | {} | {} | {spike} | {halved} | {recovery} | {ramp} | {health} | {} |\n",
        r.app,
        r.capacity,
        refused(find("0.75C")),
        num(demand_calm),
        num(demand_after),
        overload(find("2C"), true),
        overload(find("4C"), false),
        learned.map_or_else(|| "–".into(), |c| format!("{:.2}", c / r.at_once)),
    )
}

/// Which limiter refused how many in a phase, for the detail under the matrix.
pub fn refusals(reports: &[PhaseReport], phases: &[Phase]) -> String {
    let mut out = String::new();
    for (p, r) in phases.iter().zip(reports) {
        let by: Vec<String> = LimiterName::ALL
            .iter()
            .map(|&l| (l, r.refused[l as usize]))
            .filter(|&(_, n)| n > 0)
            .map(|(l, n)| format!("{} {n}", l.as_str()))
            .collect();
        if !by.is_empty() {
            let _ = writeln!(out, "- {}: {}", p.name, by.join(", "));
        }
    }
    out
}

#[cfg(test)]
#[path = "matrix_tests.rs"]
mod tests;
