//! `bench overload --app`: the app shapes the scorecard runs on (workers × service time,
//! sleeping or burning CPU, one time for every route or a time per route, with or without
//! cheap requests beside them), and the matrix table of the zero-tuning targets, one row per
//! app.

use super::load::Phase;
use super::load::{Traffic, RAMP};
use super::report::{PhaseReport, Polled, SecondTier};
use brownout::config::HumanDuration;
use brownout::limiter::LimiterName;
use brownout::tier::Tier;
use brownout_cli::config::{CapacityDrop, CliConfig, DemoWork, RouteTimes, COLD_SLOWDOWN};
use std::fmt::Write;
use std::time::Duration;

/// One app of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSpec {
    /// As written (`8x50ms`, `2x20ms:cpu`, `8xmixed+cheap`).
    pub name: String,
    /// Worker slots.
    pub workers: u32,
    /// What its routes take.
    pub times: Times,
    /// Sleep or burn CPU.
    pub work: DemoWork,
    /// The share of the arrivals that go to a path answered at once (`+cheap`:
    /// [`CHEAP_SHARE`], `+cheap30`: 30%; 0 without).
    pub cheap: f64,
    /// σ of the log-normal each request's time is drawn from (`~0.5`; 0 without:
    /// `demo.spread`).
    pub spread: f64,
    /// Health checks at [`HEALTH_RATE`] a second beside the load (`+health`).
    pub health: bool,
    /// A cold start (`+cold`): its first phase [`COLD_SLOWDOWN`] times slower, so an
    /// overload (`demo.cold_start`).
    pub cold: bool,
}

/// What an app's routes take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Times {
    /// One time for every route.
    One(Duration),
    /// [`MIXED`]: a time per route of the standard mix.
    Mixed,
    /// [`REAL`]: GETs split over a cache hit, a read and a report ([`REAL_GETS`]).
    Real,
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

/// The real app's route times ([`brownout_cli::config::Route::ALL`] order): 20 ms reads, writes and charges, 1 ms
/// cache hits and 300 ms reports. Critical load alone is 23% of the capacity at 4C.
pub const REAL: [Duration; 5] = [
    Duration::from_millis(20),
    Duration::from_millis(20),
    Duration::from_millis(20),
    Duration::from_millis(1),
    Duration::from_millis(300),
];

/// How the real app's GETs split: half reads, 40% cache hits, 10% reports (which are then
/// 87% of the GETs' work).
pub const REAL_GETS: [f64; 3] = [0.5, 0.4, 0.1];

/// The share of all arrivals on the cheap path, for an app with `+cheap` (`+cheapNN`: NN%).
pub const CHEAP_SHARE: f64 = 0.1;

/// Health checks a second for an app with `+health` (a few load balancers, each probing every
/// second or so).
pub const HEALTH_RATE: f64 = 5.0;

/// The apps of `--matrix`: a few fast workers, the demo's, many slow ones, very many very
/// slow ones (each about 160–200 requests a second, so this machine can drive their 10C
/// spikes), a CPU-bound app, the mixed routes, their times spread log-normally, with 10% and
/// 30% cheap requests beside them, and the real app's three GET routes beside health checks,
/// warm and from a cold start.
pub const MATRIX: &str = "2x10ms,8x50ms,32x200ms,100x500ms,2x10ms:cpu,5xmixed+cheap~0.5,5xmixed+cheap30~0.5,6xreal+health~0.5,6xreal+health+cold~0.5";

impl std::str::FromStr for AppSpec {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--app {text:?}: expected WORKERSxTIME[:sleep|:cpu][+cheap[PERCENT]][+health][+cold][~SPREAD], e.g. 8x50ms, 2x10ms:cpu, 8xmixed+cheap or 6xreal+health+cold~0.5 (TIME a duration; mixed: {} per route; real: GETs {} over {} (read, cache hit, report), POSTs {}; SPREAD the σ of log-normal times, 0 to 2)",
                MIXED.map(|d| format!("{d:?}")).join("/"),
                REAL_GETS.map(|s| format!("{:.0}%", s * 100.0)).join("/"),
                [REAL[0], REAL[3], REAL[4]].map(|d| format!("{d:?}")).join("/"),
                format_args!("{:?}", REAL[1]),
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
        let mut parts = rest.split('+');
        let rest = parts.next().unwrap_or_default();
        let (mut cheap, mut health, mut cold) = (0.0, false, false);
        for part in parts {
            match part {
                "health" if !health => health = true,
                "cold" if !cold => cold = true,
                "cheap" if cheap == 0.0 => cheap = CHEAP_SHARE,
                _ => {
                    cheap = part
                        .strip_prefix("cheap")
                        .filter(|_| cheap == 0.0)
                        .and_then(|pct| pct.parse::<u8>().ok())
                        .filter(|p| (1..=90).contains(p))
                        .map(|p| f64::from(p) / 100.0)
                        .ok_or_else(bad)?;
                }
            }
        }
        let (rest, work) = match rest.split_once(':') {
            Some((r, "cpu")) => (r, DemoWork::Cpu),
            Some((r, "sleep")) => (r, DemoWork::Sleep),
            Some(_) => return Err(bad()),
            None => (rest, DemoWork::Sleep),
        };
        let (workers, time) = rest.split_once('x').ok_or_else(bad)?;
        let workers: u32 = workers.parse().ok().filter(|&w| w >= 1).ok_or_else(bad)?;
        let times = match time {
            "mixed" => Times::Mixed,
            "real" => Times::Real,
            t => {
                let d: HumanDuration = t.parse().map_err(|_| bad())?;
                Some(d.get())
                    .filter(|d| !d.is_zero())
                    .map(Times::One)
                    .ok_or_else(bad)?
            }
        };
        Ok(Self {
            name: text.to_owned(),
            workers,
            times,
            work,
            cheap,
            spread,
            health,
            cold,
        })
    }
}

impl AppSpec {
    /// The demo section of `base` running this app, its cold start (if any) lasting `cold`.
    pub fn apply(&self, base: &CliConfig, cold: Duration) -> CliConfig {
        let mut c = base.clone();
        c.demo.workers = self.workers;
        // Half the workers, not twice the time: a 500 ms request made 1 s would miss every
        // client's 1 s deadline whatever the shedder did.
        c.demo.capacity_drop = CapacityDrop::Fewer;
        c.demo.work = self.work;
        c.demo.spread = self.spread;
        c.demo.cold_start = HumanDuration(if self.cold { cold } else { Duration::ZERO });
        let h = HumanDuration;
        match self.times {
            Times::One(t) => {
                c.demo.service_time = h(t);
                c.demo.route_times = None;
            }
            Times::Mixed => {
                let [get_items, post_items, charges] = MIXED.map(h);
                c.demo.route_times = Some(RouteTimes {
                    get_items,
                    post_items,
                    charges,
                    get_item: None,
                    reports: None,
                });
            }
            Times::Real => {
                let [get_items, post_items, charges, get_item, reports] = REAL.map(h);
                c.demo.route_times = Some(RouteTimes {
                    get_items,
                    post_items,
                    charges,
                    get_item: Some(get_item),
                    reports: Some(reports),
                });
            }
        }
        c
    }

    /// The load's view of this app on `config` (the app applied).
    pub fn traffic(&self, config: &CliConfig) -> Traffic {
        Traffic {
            cheap: self.cheap,
            gets: match self.times {
                Times::Real => REAL_GETS,
                Times::One(_) | Times::Mixed => [1.0, 0.0, 0.0],
            },
            health: if self.health { HEALTH_RATE } else { 0.0 },
            ..Traffic::plain(config.demo.times())
        }
    }

    /// Its name as a folder.
    pub fn folder(&self) -> String {
        self.name.replace([':', '+', '~'], "-")
    }
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
    // The new capacity is half the old: each request takes twice the work.
    let halved = find("halved 1.5C").map_or_else(
        || "–".into(),
        |i| {
            let (s, e) = (
                r.start(i) as usize + 10,
                (r.start(i) + r.phases[i].seconds) as usize,
            );
            pct_or(r.goodput_between(s, e, 2.0))
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
mod tests {
    use super::*;
    use brownout_cli::config::Route;

    #[test]
    fn app_specs_read_workers_times_work_and_what_is_beside_the_load() {
        let a: AppSpec = "8x50ms".parse().unwrap();
        assert_eq!(
            (a.workers, a.times, a.work, a.cheap, a.spread, a.health, a.cold),
            (
                8,
                Times::One(Duration::from_millis(50)),
                DemoWork::Sleep,
                0.0,
                0.0,
                false,
                false
            )
        );
        let b: AppSpec = "2x10ms:cpu".parse().unwrap();
        assert_eq!((b.workers, b.work), (2, DemoWork::Cpu));
        let c: AppSpec = "8xmixed+cheap".parse().unwrap();
        assert_eq!((c.times, c.cheap), (Times::Mixed, CHEAP_SHARE));
        assert_eq!(c.folder(), "8xmixed-cheap");
        let d: AppSpec = "5xmixed+cheap30~0.5".parse().unwrap();
        assert_eq!((d.workers, d.cheap, d.spread), (5, 0.3, 0.5));
        let cold = Duration::from_secs(60);
        assert_eq!(d.apply(&CliConfig::default(), cold).demo.spread, 0.5);
        assert_eq!(d.folder(), "5xmixed-cheap30-0.5");
        let e: AppSpec = "6xreal+health+cold~0.5".parse().unwrap();
        assert_eq!(
            (e.times, e.health, e.cold, e.cheap),
            (Times::Real, true, true, 0.0)
        );
        let real = e.apply(&CliConfig::default(), cold);
        assert_eq!(real.demo.times(), REAL);
        assert_eq!(real.demo.cold_start.get(), cold);
        assert!(d
            .apply(&CliConfig::default(), cold)
            .demo
            .cold_start
            .get()
            .is_zero());
        for bad in [
            "8",
            "0x50ms",
            "8x0ms",
            "8x50ms:gpu",
            "x50ms",
            "8xfast",
            "8x50ms+cheap0",
            "8x50ms+cheap95",
            "8x50ms+cheap+cheap30",
            "8x50ms+health+health",
            "8x50ms+warm",
            "8x50ms~3",
            "8x50ms~x",
        ] {
            assert!(bad.parse::<AppSpec>().is_err(), "{bad}");
        }
        for app in MATRIX.split(',') {
            assert!(app.parse::<AppSpec>().is_ok(), "{app}");
        }
        let mixed = c.apply(&CliConfig::default(), cold);
        let [get, post, charges] = MIXED;
        assert_eq!(mixed.demo.times(), [get, post, charges, get, get]);
        assert!((c.traffic(&mixed).mean_service() - 0.029).abs() < 1e-12);
        // The real app: 0.1 × 20 + 0.2 × 20 + 0.7 × (0.5 × 20 + 0.4 × 1 + 0.1 × 300) ms.
        let t = e.traffic(&real);
        assert!(
            (t.mean_service() - 0.03428).abs() < 1e-12,
            "{}",
            t.mean_service()
        );
        assert_eq!(
            (t.health, t.times[Route::Reports as usize]),
            (HEALTH_RATE, 0.3)
        );
    }

    #[test]
    fn the_ramp_counts_refusals_below_0_9c_and_a_cold_start_is_judged_on_its_own_capacity() {
        let phases = [
            Phase {
                name: "0.5C",
                seconds: 10.0,
                load: 0.5,
                load_end: 0.5,
                slow: false,
                mix: super::super::load::MIX,
            },
            Phase {
                name: RAMP,
                seconds: 27.0,
                load: 0.3,
                load_end: 3.0,
                slow: false,
                mix: super::super::load::MIX,
            },
        ];
        // 10 requests of 0.1 s served every second of the ramp: the whole capacity (1 s of
        // work a second, C = 10), and one refusal in seconds 13 (load 0.6C to 0.7C) and 30
        // (2.3C); a third of that before.
        let mut per_second = vec![[SecondTier::default(); 4]; 37];
        for (i, s) in per_second.iter_mut().enumerate() {
            s[2].ok = if i < 10 { 3 } else { 10 };
            s[2].work = f64::from(s[2].ok) / 10.0;
        }
        for s in [13, 30] {
            per_second[s][2].shed = 1;
            per_second[s][2].refused[LimiterName::AdaptiveConcurrency as usize] = 1;
        }
        let reports = vec![PhaseReport::default(); 2];
        let run = |cold| AppRun {
            app: "a",
            capacity: 10.0,
            at_once: 1.0,
            phases: &phases,
            reports: &reports,
            per_second: &per_second,
            mean: 0.1,
            polled: &[],
            health: Some((9, 10)),
            cold,
        };
        let warm = run(false);
        assert_eq!(warm.ramp(), Some((1, Some(0.6))));
        assert!((warm.goodput(0).unwrap() - 0.3).abs() < 1e-12);
        let row = row(&warm);
        assert!(row.contains("| 1, 0.60C | 90.0% |"), "{row}");
        assert!(row.contains("| 0 / – |"), "{row}");
        // A cold start's first phase is judged on the third of the capacity it had.
        let cold = super::row(&run(true));
        assert!(
            cold.contains("| cold (0 refused, goodput 90.0% of C ÷ 3) / – |"),
            "{cold}"
        );
    }
}
