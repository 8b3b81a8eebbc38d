//! The scorecard's arithmetic: per phase and tier, and per second, from every request's
//! outcome; the Markdown tables and the CSV.

use super::load::Phase;
use super::send::{Outcome, Result};
use brownout::limiter::LimiterName;
use brownout::tier::Tier;
use std::fmt::Write;

/// One tier in one phase.
#[derive(Debug, Clone, Default)]
pub struct TierPhase {
    /// Requests offered, and how they ended.
    pub offered: u64,
    /// See `offered`.
    pub ok: u64,
    /// See `offered`.
    pub limited: u64,
    /// See `offered`.
    pub shed: u64,
    /// See `offered`.
    pub timeouts: u64,
    /// See `offered`.
    pub errors: u64,
    /// Retries sent (attempts after each request's first).
    pub retries: u64,
    /// Latency quantiles of the successes (seconds): p50, p99, p99.9.
    pub quantiles: Option<[f64; 3]>,
    /// Seconds from the phase's start to the first 503.
    pub first_shed: Option<f64>,
}

impl TierPhase {
    /// Successes as a share of the offered requests.
    pub fn success(&self) -> f64 {
        self.ok as f64 / self.offered.max(1) as f64
    }
}

/// One arm in one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    /// Per tier, in `Tier::ALL` order.
    pub tiers: [TierPhase; 4],
    /// Work served per second (each success its route's mean time) as a share of the work
    /// the app can serve at its original capacity (with one time for every route: successes
    /// per second over C).
    pub goodput: f64,
    /// Seconds in which a tier had a 503 while a lower tier had a success.
    pub inversions: u32,
    /// Of those, the seconds in which the lower tier's success was sent after the higher
    /// tier's 503 was: a lower tier let in while (or after) a higher one was refused, not
    /// only before anything could tell the load had changed.
    pub inversions_after: u32,
    /// Seconds from the phase's start to the last second with a 503 (when any).
    pub last_shed: Option<f64>,
    /// Turns of the controller's amount (from rising to falling or back), polled each second.
    pub reversals: u32,
    /// Refusals (429 and 503) by the limiter that made them ([`refuser`] order), over the
    /// phase and over its second half.
    pub refused: [u64; REFUSERS],
    /// See `refused`.
    pub refused_late: [u64; REFUSERS],
    /// The lowest goodput (× C) of the phase's whole 5 s windows (from its start).
    pub worst_5s: Option<f64>,
    /// Seconds from the phase's start to its last refused critical request's planned time.
    pub last_critical_refusal: Option<f64>,
}

/// Who refused a request: each limiter, then "other" (a body that named none).
pub const REFUSERS: usize = LimiterName::COUNT + 1;

/// The names of [`REFUSERS`], in order.
pub(super) fn refuser_name(i: usize) -> &'static str {
    LimiterName::ALL.get(i).map_or("other", |l| l.as_str())
}

/// The [`REFUSERS`] slot of a refused request.
fn refuser(o: &Outcome) -> usize {
    o.limiter.map_or(REFUSERS - 1, |l| l as usize)
}

impl PhaseReport {
    /// Timeouts as a share of the requests offered.
    pub fn timeout_share(&self) -> f64 {
        let offered: u64 = self.tiers.iter().map(|t| t.offered).sum();
        let timeouts: u64 = self.tiers.iter().map(|t| t.timeouts).sum();
        timeouts as f64 / offered.max(1) as f64
    }

    /// Requests sent (first attempts and retries) over requests offered: the retries'
    /// amplification.
    pub fn amplification(&self) -> f64 {
        let offered: u64 = self.tiers.iter().map(|t| t.offered).sum();
        let retries: u64 = self.tiers.iter().map(|t| t.retries).sum();
        (offered + retries) as f64 / offered.max(1) as f64
    }

    /// worker_utilization's share of the refusals in the phase's second half.
    pub fn late_share_of_controller(&self) -> Option<f64> {
        let all: u64 = self.refused_late.iter().sum();
        let controller = self.refused_late[LimiterName::WorkerUtilization as usize];
        (all > 0).then(|| controller as f64 / all as f64)
    }
}

/// Per-second counts of one tier: successes, 503s, timeouts, and the p99 of the successes;
/// and when the first 503 and the last success of the second were sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecondTier {
    /// See the type.
    pub ok: u32,
    /// The work the successes were worth: each its route's mean time, seconds.
    pub work: f64,
    /// See the type.
    pub shed: u32,
    /// See the type.
    pub timeouts: u32,
    /// See the type.
    pub p99: f64,
    /// When (seconds into the run) the first request of this second that got a 503 was sent.
    pub first_shed_at: Option<f64>,
    /// When the last request of this second that succeeded was sent.
    pub last_ok_at: Option<f64>,
    /// Refusals (429 and 503) by who refused them ([`REFUSERS`] order).
    pub refused: [u32; REFUSERS],
}

impl SecondTier {
    /// Whether, in one second, a tier had a 503 while a lower tier had a success; with
    /// `after_refusal`, only a success sent after that 503's request.
    pub fn inverted(second: &[Self; 4], after_refusal: bool) -> bool {
        (0..4).any(|hi| {
            second[hi].first_shed_at.is_some_and(|shed| {
                second[hi + 1..]
                    .iter()
                    .any(|lo| lo.last_ok_at.is_some_and(|ok| !after_refusal || ok > shed))
            })
        })
    }
}

fn quantiles(mut latencies: Vec<f64>) -> Option<[f64; 3]> {
    if latencies.is_empty() {
        return None;
    }
    latencies.sort_by(f64::total_cmp);
    let q = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    Some([q(0.5), q(0.99), q(0.999)])
}

/// What `/v1/state` said in one second of the run (NaN where it did not answer).
#[derive(Debug, Clone, Copy)]
pub struct Polled {
    /// worker_utilization's amount.
    pub amount: f64,
    /// adaptive_concurrency's limit.
    pub limit: f64,
    /// The controller's demand (the whole demand over capacity).
    pub demand: f64,
    /// The capacity it reads demand against (requests at once: pinned or learned).
    pub capacity: f64,
    /// adaptive_concurrency's service time (the mean of the tiers' learned ones, seconds).
    pub service: f64,
}

/// Every second of the run, per tier.
pub fn seconds(outcomes: &[Outcome], total: f64) -> Vec<[SecondTier; 4]> {
    let n = total.ceil() as usize;
    let mut latencies = vec![[const { Vec::new() }; 4]; n];
    let mut out = vec![[SecondTier::default(); 4]; n];
    for o in outcomes {
        let s = (o.arrival.at as usize).min(n - 1);
        let t = o.arrival.tier.index();
        let (cell, at) = (&mut out[s][t], o.arrival.at);
        match o.result {
            Result::Ok => {
                cell.ok += 1;
                cell.work += o.arrival.work;
                cell.last_ok_at = Some(cell.last_ok_at.map_or(at, |l| l.max(at)));
                latencies[s][t].push(o.latency);
            }
            Result::Shed => {
                cell.shed += 1;
                cell.first_shed_at = Some(cell.first_shed_at.map_or(at, |f| f.min(at)));
            }
            Result::Timeout => cell.timeouts += 1,
            Result::Limited | Result::Error => {}
        }
        if matches!(o.result, Result::Limited | Result::Shed) {
            cell.refused[refuser(o)] += 1;
        }
    }
    for (second, lats) in out.iter_mut().zip(latencies) {
        for (tier, l) in second.iter_mut().zip(lats) {
            tier.p99 = quantiles(l).map_or(0.0, |q| q[1]);
        }
    }
    out
}

/// The report of phase `i` (which began at `start`), given the controller's amount polled
/// once a second during it, on an app that serves `work_capacity` seconds of work a second
/// (its capacity × the mix's mean time).
pub fn phase(
    outcomes: &[Outcome],
    per_second: &[[SecondTier; 4]],
    phases: &[Phase],
    i: usize,
    work_capacity: f64,
    amounts: &[f64],
) -> PhaseReport {
    let start: f64 = phases[..i].iter().map(|p| p.seconds).sum();
    let p = &phases[i];
    let mut report = PhaseReport::default();
    let mut latencies = [const { Vec::new() }; 4];
    let mut work = 0.0;
    for o in outcomes.iter().filter(|o| o.arrival.phase == i) {
        if matches!(o.result, Result::Limited | Result::Shed) {
            report.refused[refuser(o)] += 1;
            let at = o.arrival.at - start;
            if at >= p.seconds / 2.0 {
                report.refused_late[refuser(o)] += 1;
            }
            if o.arrival.tier == Tier::Critical {
                let last = &mut report.last_critical_refusal;
                *last = Some(last.map_or(at, |l: f64| l.max(at)));
            }
        }
        let t = &mut report.tiers[o.arrival.tier.index()];
        t.offered += 1;
        t.retries += u64::from(o.attempts.saturating_sub(1));
        match o.result {
            Result::Ok => {
                t.ok += 1;
                work += o.arrival.work;
                latencies[o.arrival.tier.index()].push(o.latency);
            }
            Result::Limited => t.limited += 1,
            Result::Shed => {
                t.shed += 1;
                let at = o.arrival.at - start;
                t.first_shed = Some(t.first_shed.map_or(at, |f: f64| f.min(at)));
                report.last_shed = Some(report.last_shed.map_or(at, |l: f64| l.max(at)));
            }
            Result::Timeout => t.timeouts += 1,
            Result::Error => t.errors += 1,
        }
    }
    for (t, l) in report.tiers.iter_mut().zip(latencies) {
        t.quantiles = quantiles(l);
    }
    report.goodput = work / p.seconds / work_capacity;
    let first = start as usize;
    let last = ((start + p.seconds) as usize).min(per_second.len());
    let seconds = &per_second[first.min(last)..last];
    let count = |after| {
        seconds
            .iter()
            .filter(|s| SecondTier::inverted(s, after))
            .count() as u32
    };
    report.worst_5s = seconds
        .chunks_exact(5)
        .map(|w| w.iter().flatten().map(|t| t.work).sum::<f64>() / 5.0 / work_capacity)
        .min_by(f64::total_cmp);
    report.inversions = count(false);
    report.inversions_after = count(true);
    let deltas: Vec<f64> = amounts
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| d.abs() > 1e-9)
        .collect();
    report.reversals = deltas
        .windows(2)
        .filter(|w| w[0].signum() != w[1].signum())
        .count() as u32;
    report
}

fn ms(s: Option<f64>) -> String {
    s.map_or_else(|| "–".into(), |s| format!("{:.0} ms", s * 1000.0))
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The comparison: one row per arm and overload phase.
pub fn summary(arms: &[(String, Vec<PhaseReport>)], phases: &[Phase]) -> String {
    let mut out = String::from(
        "| arm | phase | goodput (× C) | critical success | critical p99 | critical p99 ÷ at 0.5C | inversion-s | of them after a refusal | shed (503) | last 503 after | reversals | worker_utilization's share of refusals, 2nd half | worst 5 s goodput (× C) | timeouts | last critical refusal after | sent ÷ offered |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (arm, reports) in arms {
        let calm = reports[0].tiers[Tier::Critical.index()]
            .quantiles
            .map(|q| q[1]);
        for (p, r) in phases.iter().zip(reports) {
            let critical = &r.tiers[Tier::Critical.index()];
            let p99 = critical.quantiles.map(|q| q[1]);
            let ratio = match (p99, calm) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
                _ => "–".into(),
            };
            let shed: u64 = r.tiers.iter().map(|t| t.shed).sum();
            let _ = writeln!(
                out,
                "| {arm} | {} | {} | {} | {} | {ratio} | {} | {} | {shed} | {} | {} | {} | {} | {} | {} | {:.2} |",
                p.name,
                pct(r.goodput),
                pct(critical.success()),
                ms(p99),
                r.inversions,
                r.inversions_after,
                r.last_shed
                    .map_or_else(|| "–".into(), |s| format!("{s:.0} s")),
                r.reversals,
                r.late_share_of_controller().map_or_else(|| "–".into(), pct),
                r.worst_5s.map_or_else(|| "–".into(), pct),
                pct(r.timeout_share()),
                r.last_critical_refusal
                    .map_or_else(|| "–".into(), |s| format!("{s:.1} s")),
                r.amplification(),
            );
        }
    }
    out
}

/// One arm in detail: every phase and tier.
pub fn detail(arm: &str, reports: &[PhaseReport], phases: &[Phase]) -> String {
    let mut out = format!(
        "\n### {arm}\n\n| phase | tier | offered | success | 429 | 503 | timeouts | errors | retries | p50 | p99 | p99.9 | first 503 after |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for (p, r) in phases.iter().zip(reports) {
        for tier in Tier::ALL {
            let t = &r.tiers[tier.index()];
            let q = |i: usize| ms(t.quantiles.map(|q| q[i]));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.name,
                tier.as_str(),
                t.offered,
                pct(t.success()),
                t.limited,
                t.shed,
                t.timeouts,
                t.errors,
                t.retries,
                q(0),
                q(1),
                q(2),
                t.first_shed
                    .map_or_else(|| "–".into(), |s| format!("{s:.1} s")),
            );
        }
    }
    out.push_str("\nRefusals (429 and 503) by limiter, whole phase (second half):\n\n| phase |");
    for i in 0..REFUSERS {
        let _ = write!(out, " {} |", refuser_name(i));
    }
    out.push_str(&format!("\n|---|{}\n", "---|".repeat(REFUSERS)));
    for (p, r) in phases.iter().zip(reports) {
        let _ = write!(out, "| {} |", p.name);
        for (all, late) in r.refused.iter().zip(&r.refused_late) {
            let _ = write!(out, " {all} ({late}) |");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
