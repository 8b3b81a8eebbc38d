//! `bench overload --app` (and `simulate --app`): the app shapes the scorecard runs on
//! (workers × service time, sleeping or burning CPU, one time for every route, a time per
//! route, or GETs split over a cache hit, a read and a report; with or without cheap requests
//! and health checks beside them; warm or from a cold start).

use super::load::Traffic;
use brownout::config::HumanDuration;
use brownout_cli::config::{CapacityDrop, CliConfig, DemoWork, RouteTimes};
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
    /// A cold start (`+cold`): its first phase [`brownout_cli::config::COLD_SLOWDOWN`] times slower, so an
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

/// The real app's route times ([`brownout_cli::config::Route::ALL`] order): 20 ms reads,
/// writes and charges, 1 ms cache hits and 300 ms reports. Critical load alone is 23% of the
/// capacity at 4C.
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
