//! `bench overload --app`: the app shapes the scorecard runs on (workers × service time,
//! sleeping or burning CPU, one time for every route or a time per route, with or without
//! cheap requests beside them), and the matrix table of the zero-tuning targets, one row per
//! app.

use super::load::Phase;
use super::report::{PhaseReport, Polled, SecondTier};
use brownout::config::HumanDuration;
use brownout::limiter::LimiterName;
use brownout::tier::Tier;
use brownout_cli::config::{CapacityDrop, CliConfig, DemoWork, RouteTimes};
use std::fmt::Write;
use std::time::Duration;

/// One app of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec {
    /// As written (`8x50ms`, `2x20ms:cpu`, `8xmixed+cheap`).
    pub name: String,
    /// Worker slots.
    pub workers: u32,
    /// One service time for every route, or `None`: the mixed routes ([`MIXED`]).
    pub time: Option<Duration>,
    /// Sleep or burn CPU.
    pub work: DemoWork,
    /// The share of the arrivals that go to a path answered at once (`+cheap`:
    /// [`CHEAP_SHARE`], `+cheap30`: 30%; 0 without).
    pub cheap: f64,
    /// σ of the log-normal each request's time is drawn from (`~0.5`; 0 without:
    /// `demo.spread`).
    pub spread: f64,
}

/// The mixed app's route times: `GET /v1/items`, `POST /v1/items`, `POST /v1/charges`.
/// Charges stay cheaper than the mean: critical requests alone must fit in the capacity at
/// 4C and at 10C (10% of the arrivals), or no shedder could serve them all (with 200 ms
/// charges, critical demand alone would be 1.7 times the capacity at 4C).
pub const MIXED: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_millis(20),
];

/// The share of all arrivals on the cheap path, for an app with `+cheap` (`+cheapNN`: NN%).
pub const CHEAP_SHARE: f64 = 0.1;

/// The apps of `--matrix`: a few fast workers, the demo's, many slow ones, very many very
/// slow ones (each about 160–200 requests a second, so this machine can drive their 10C
/// spikes), a CPU-bound app, and the mixed routes, their times spread log-normally, with 10%
/// and 30% cheap requests beside them.
pub const MATRIX: &str =
    "2x10ms,8x50ms,32x200ms,100x500ms,2x10ms:cpu,5xmixed+cheap~0.5,5xmixed+cheap30~0.5";

impl std::str::FromStr for AppSpec {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--app {text:?}: expected WORKERSxTIME[:sleep|:cpu][+cheap[PERCENT]][~SPREAD], e.g. 8x50ms, 2x10ms:cpu, 8xmixed+cheap or 5xmixed+cheap30~0.5 (TIME a duration, or mixed: {} per route; SPREAD the σ of log-normal times, 0 to 2)",
                MIXED.map(|d| format!("{d:?}")).join("/")
            )
        };
        let (rest, spread) = match text.split_once('~') {
            Some((r, s)) => (
                r,
                s.parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=2.0).contains(s))
                    .ok_or_else(bad)?,
            ),
            None => (text, 0.0),
        };
        let (rest, cheap) = match rest.split_once("+cheap") {
            Some((r, "")) => (r, CHEAP_SHARE),
            Some((r, pct)) => (
                r,
                pct.parse::<u8>()
                    .ok()
                    .filter(|p| (1..=90).contains(p))
                    .map(|p| f64::from(p) / 100.0)
                    .ok_or_else(bad)?,
            ),
            None => (rest, 0.0),
        };
        let (rest, work) = match rest.split_once(':') {
            Some((r, "cpu")) => (r, DemoWork::Cpu),
            Some((r, "sleep")) => (r, DemoWork::Sleep),
            Some(_) => return Err(bad()),
            None => (rest, DemoWork::Sleep),
        };
        let (workers, time) = rest.split_once('x').ok_or_else(bad)?;
        let workers: u32 = workers.parse().ok().filter(|&w| w >= 1).ok_or_else(bad)?;
        let time = match time {
            "mixed" => None,
            t => {
                let d: HumanDuration = t.parse().map_err(|_| bad())?;
                Some(d.get())
                    .filter(|d| !d.is_zero())
                    .map(Some)
                    .ok_or_else(bad)?
            }
        };
        Ok(Self {
            name: text.to_owned(),
            workers,
            time,
            work,
            cheap,
            spread,
        })
    }
}

impl AppSpec {
    /// The demo section of `base` running this app.
    pub fn apply(&self, base: &CliConfig) -> CliConfig {
        let mut c = base.clone();
        c.demo.workers = self.workers;
        // Half the workers, not twice the time: a 500 ms request made 1 s would miss every
        // client's 1 s deadline whatever the shedder did.
        c.demo.capacity_drop = CapacityDrop::Fewer;
        c.demo.work = self.work;
        c.demo.spread = self.spread;
        match self.time {
            Some(t) => {
                c.demo.service_time = HumanDuration(t);
                c.demo.route_times = None;
            }
            None => {
                let [get_items, post_items, charges] = MIXED.map(HumanDuration);
                c.demo.route_times = Some(RouteTimes {
                    get_items,
                    post_items,
                    charges,
                });
            }
        }
        c
    }

    /// Its name as a folder.
    pub fn folder(&self) -> String {
        self.name.replace([':', '+', '~'], "-")
    }
}

/// The mean service time of the standard mix on an app with `times` (GET, POST, charges):
/// 10% charges, 20% POSTs, 70% GETs (test traffic included).
pub fn mean_service(times: [Duration; 3]) -> f64 {
    let [get, post, charge] = times.map(|d| d.as_secs_f64());
    0.1 * charge + 0.2 * post + 0.7 * get
}

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
    /// What a request of each tier takes (seconds, `Tier::ALL` order): goodput is work
    /// served over the work the app can serve (with one time for every route, successes
    /// per second over C).
    pub tier_times: [f64; 4],
    /// What `/v1/state` said every second.
    pub polled: &'a [Polled],
}

/// The matrix table's head.
pub fn head() -> String {
    "| app | C | refused at 0.5C / 0.75C | demand at 0.5C (0.3C after) | 2C: critical ok, goodput, critical p99 ÷ 0.5C, worker_utilization's share of refusals (last 120 s), demand | 4C: critical ok, goodput, critical p99 ÷ 0.5C | 10C spike: worst 5 s goodput, critical ok, timeouts | halved: goodput × new C from 10 s | 0.3C after 4C: last 503 after | learned capacity ÷ workers |\n|---|---|---|---|---|---|---|---|---|---|\n".into()
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

/// The tiers' times of an app whose routes take `times` (GET, POST, charges).
pub fn tier_times(times: [Duration; 3]) -> [f64; 4] {
    let [get, post, charge] = times.map(|d| d.as_secs_f64());
    [charge, post, get, get]
}

impl AppRun<'_> {
    /// Work the app can serve per second (its capacity in requests at once).
    fn work_capacity(&self) -> f64 {
        let [charge, post, get, _] = self.tier_times;
        self.capacity * (0.1 * charge + 0.2 * post + 0.7 * get)
    }

    /// Work served by `ok` successes per tier.
    fn work(&self, ok: [f64; 4]) -> f64 {
        (0..4).map(|t| ok[t] * self.tier_times[t]).sum()
    }

    /// Goodput of phase `i`: work served per second over what the app can serve.
    fn goodput(&self, i: usize) -> f64 {
        let ok = self.reports[i].tiers.each_ref().map(|t| t.ok as f64);
        self.work(ok) / self.phases[i].seconds / self.work_capacity()
    }

    /// Goodput over seconds `from..to` of the run, `slowdown` times the work per request.
    fn goodput_between(&self, from: usize, to: usize, slowdown: f64) -> Option<f64> {
        let seconds = self.per_second.get(from..to.min(self.per_second.len()))?;
        if seconds.is_empty() {
            return None;
        }
        let work: f64 = seconds
            .iter()
            .map(|s| self.work(s.each_ref().map(|t| f64::from(t.ok))))
            .sum();
        Some(work * slowdown / seconds.len() as f64 / self.work_capacity())
    }
}

/// One app's row.
pub fn row(r: &AppRun<'_>) -> String {
    let find = |name: &str| r.phases.iter().position(|p| p.name == name);
    let start = |i: usize| r.phases[..i].iter().map(|p| p.seconds).sum::<f64>();
    let refused = |i: Option<usize>| {
        i.map_or_else(
            || "–".into(),
            |i| r.reports[i].refused.iter().sum::<u64>().to_string(),
        )
    };
    let second_half = |i: usize, field: fn(&Polled) -> f64| {
        let s = start(i);
        mean_polled(
            r.polled,
            s + r.phases[i].seconds / 2.0,
            s + r.phases[i].seconds,
            field,
        )
    };
    let num = |x: Option<f64>| x.map_or_else(|| "–".into(), |x| format!("{x:.2}"));
    let calm = r.reports[0].tiers[Tier::Critical.index()]
        .quantiles
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
            pct(r.goodput(i))
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
            let s = start(i) as usize;
            let worst = (s..s + r.phases[i].seconds as usize)
                .step_by(5)
                .filter_map(|w| r.goodput_between(w, w + 5, 1.0))
                .min_by(f64::total_cmp);
            format!(
                "{}, {}, {}",
                worst.map_or_else(|| "–".into(), pct),
                pct(rep.tiers[Tier::Critical.index()].success()),
                pct(rep.timeout_share())
            )
        },
    );
    // The new capacity is half the old: each request takes twice the work.
    let halved = find("halved 1.5C").map_or_else(
        || "–".into(),
        |i| {
            let (s, e) = (
                start(i) as usize + 10,
                (start(i) + r.phases[i].seconds) as usize,
            );
            r.goodput_between(s, e, 2.0).map_or_else(|| "–".into(), pct)
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
    let learned = find("2C").and_then(|i| second_half(i, |p| p.capacity));
    let demand_calm = find("0.5C").and_then(|i| second_half(i, |p| p.demand));
    let demand_after = find("0.3C").and_then(|i| second_half(i, |p| p.demand));
    format!(
        "| {} | {:.0}/s | {} / {} | {} ({}) | {} | {} | {spike} | {halved} | {recovery} | {} |\n",
        r.app,
        r.capacity,
        refused(find("0.5C")),
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
mod tests {
    use super::*;

    #[test]
    fn app_specs_read_workers_time_work_and_cheap() {
        let a: AppSpec = "8x50ms".parse().unwrap();
        assert_eq!(
            (a.workers, a.time, a.work, a.cheap, a.spread),
            (
                8,
                Some(Duration::from_millis(50)),
                DemoWork::Sleep,
                0.0,
                0.0
            )
        );
        let b: AppSpec = "2x10ms:cpu".parse().unwrap();
        assert_eq!((b.workers, b.work), (2, DemoWork::Cpu));
        let c: AppSpec = "8xmixed+cheap".parse().unwrap();
        assert_eq!((c.time, c.cheap), (None, CHEAP_SHARE));
        assert_eq!(c.folder(), "8xmixed-cheap");
        let d: AppSpec = "5xmixed+cheap30~0.5".parse().unwrap();
        assert_eq!((d.workers, d.cheap, d.spread), (5, 0.3, 0.5));
        assert_eq!(d.apply(&CliConfig::default()).demo.spread, 0.5);
        assert_eq!(d.folder(), "5xmixed-cheap30-0.5");
        for bad in [
            "8",
            "0x50ms",
            "8x0ms",
            "8x50ms:gpu",
            "x50ms",
            "8xfast",
            "8x50ms+cheap0",
            "8x50ms+cheap95",
            "8x50ms~3",
            "8x50ms~x",
        ] {
            assert!(bad.parse::<AppSpec>().is_err(), "{bad}");
        }
        let mixed = c.apply(&CliConfig::default());
        assert_eq!(mixed.demo.times(), MIXED);
        assert!((mean_service(MIXED) - 0.029).abs() < 1e-12);
    }
}
