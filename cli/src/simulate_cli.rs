//! `brownout simulate`: runs the worker-utilization controller against a model of the server
//! in virtual time, prints a summary, and writes a CSV of every second and an SVG chart.

use crate::chart::{self, Panel, Series, TIER_COLORS};
use crate::overload::AppSpec;
use brownout::clock::{Clock, SystemClock};
use brownout::config::HumanDuration;
use brownout::simulate::profile::{self, BUILT_IN};
use brownout::simulate::queue::ClientDeadline;
use brownout::simulate::{self, Load, RunReport, Scenario};
use brownout::tier::Tier;
use brownout::Config;
use brownout_cli::config::{CapacityDrop, CliConfig, Route};
use clap::Args;
use plotters::style::colors::{BLACK, GREEN, MAGENTA, RED};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct SimulateArgs {
    /// A built-in load profile: step, ramp, spike, scorecard or capacity_drop.
    #[arg(long, default_value = "scorecard")]
    profile: String,
    /// A CSV trace instead: one line per second, critical,post,get,test requests per second.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// One of bench overload's apps (`--app` there: e.g. 5xmixed+cheap~0.5, 6xreal+cold~0.5):
    /// its workers, route times, spread, cheap path and cold start (its first phase 3 times
    /// slower); health checks are not modelled. Unset: the config file's demo section.
    #[arg(long, conflicts_with_all = ["workers", "service_time"])]
    app: Option<AppSpec>,
    /// Worker slots of the modelled server (default: demo.workers).
    #[arg(long)]
    workers: Option<u32>,
    /// Mean time a request holds a worker (default: demo.service_time).
    #[arg(long)]
    service_time: Option<HumanDuration>,
    /// Share of the load per tier, critical,post,get,test.
    #[arg(long, default_value = "0.1,0.2,0.5,0.2")]
    mix: String,
    /// How long clients wait for an answer; after that they give up.
    #[arg(long, default_value = "1s")]
    deadline: HumanDuration,
    /// Time a request spends in the app outside a worker (framework, network): in the
    /// latency the fast guard measures, not in the capacity. The demo's floor reads about
    /// 52 ms for its 50 ms of work on loopback: 2ms.
    #[arg(long, default_value = "0s")]
    overhead: HumanDuration,
    /// Seed of the random (Poisson) arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Offer exactly the rate every 10 ms instead of random arrivals (a pure flow).
    #[arg(long)]
    fluid: bool,
    /// The app keeps running requests whose client gave up (as actix-web does).
    #[arg(long)]
    keep_abandoned: bool,
    /// A setting as an operator would PATCH it, e.g.
    /// limiters.worker_utilization.start_of_bad=0.85 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Every phase 20 times shorter (for a quick look, or CI).
    #[arg(long)]
    quick: bool,
    /// Every phase this many times shorter as `bench overload --compress` shortens them (a
    /// spike, the 30 s after it and the rest before the ramp keep their length), to set a
    /// run beside a compressed bench run.
    #[arg(long, conflicts_with = "quick")]
    compress: Option<f64>,
    /// Where to write simulate.csv and simulate.svg.
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

pub fn run(config: CliConfig, args: SimulateArgs) -> ExitCode {
    let (config, traffic) = match &args.app {
        Some(app) => {
            let c = app.apply(&config, std::time::Duration::ZERO);
            let t = app.traffic(&c);
            (c, Some(t))
        }
        None => (config, None),
    };
    let CliConfig {
        brownout: mut config,
        demo,
    } = config;
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let kill_switch = match simulate::settings::apply(&mut config, &args.sets) {
        Ok(k) => k,
        Err(e) => return fail(format!("--set {e}")),
    };
    let mix: Vec<f64> = args
        .mix
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mix: [f64; 4] = match mix[..] {
        [c, p, g, t] if mix.iter().all(|&s| s >= 0.0) && (c + p + g + t - 1.0).abs() < 1e-6 => {
            [c, p, g, t]
        }
        _ => {
            return fail(format!(
                "--mix must be four shares (critical,post,get,test) adding up to 1 (got {:?})",
                args.mix
            ))
        }
    };
    let load = match &args.trace {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| profile::parse_trace(&t))
        {
            Ok(rows) => Load::Trace(rows),
            Err(e) => return fail(format!("--trace {}: {e}", path.display())),
        },
        None => match profile::built_in(&args.profile) {
            Some(mut phases) => {
                if args.quick {
                    profile::compress(&mut phases, 20.0);
                }
                match args.compress {
                    Some(f) if f.is_finite() && f >= 1.0 => {
                        profile::compress_like_bench(&mut phases, f);
                    }
                    Some(f) => return fail(format!("--compress: must be at least 1 (got {f})")),
                    None => {}
                }
                if let (Some(app), Some(first)) = (&args.app, phases.first_mut()) {
                    if app.cold {
                        first.slowdown *= f64::from(brownout_cli::config::COLD_SLOWDOWN);
                    }
                }
                Load::Phases(phases)
            }
            None => {
                let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
                return fail(format!(
                    "--profile {:?} is not one of {}",
                    args.profile,
                    names.join(", ")
                ));
            }
        },
    };
    let service_time = args
        .service_time
        .unwrap_or(demo.service_time)
        .get()
        .as_secs_f64();
    let workers = args.workers.unwrap_or(demo.workers);
    if workers == 0 || service_time <= 0.0 {
        return fail("--workers and --service-time must be more than 0".into());
    }
    // Each route's time and the share of each tier's requests it takes: the demo's routes,
    // GETs (test mode's too) split as the app splits them.
    let gets = traffic.map_or([1.0, 0.0, 0.0], |t| t.gets);
    let times = demo.times();
    let routes = if demo.route_times.is_none() && gets[0] >= 1.0 {
        Vec::new()
    } else {
        Route::ALL
            .into_iter()
            .map(|r| simulate::Route {
                time: times[r as usize].as_secs_f64(),
                share: match r {
                    Route::Charges => [1.0, 0.0, 0.0, 0.0],
                    Route::PostItems => [0.0, 1.0, 0.0, 0.0],
                    Route::GetItems => [0.0, 0.0, gets[0], gets[0]],
                    Route::GetItem => [0.0, 0.0, gets[1], gets[1]],
                    Route::Reports => [0.0, 0.0, gets[2], gets[2]],
                },
            })
            .filter(|r| r.share.iter().any(|&s| s > 0.0))
            .collect()
    };
    let scenario = Scenario {
        workers,
        service_time,
        mix,
        routes,
        spread: demo.spread,
        cheap: traffic.map_or(0.0, |t| t.cheap),
        fewer_workers: demo.capacity_drop == CapacityDrop::Fewer,
        load,
        deadline: Some(ClientDeadline {
            seconds: args.deadline.get().as_secs_f64(),
            keep_abandoned: args.keep_abandoned,
        }),
        overhead: args.overhead.get().as_secs_f64(),
        poisson: (!args.fluid).then_some(args.seed),
    };
    let clock = SystemClock::new();
    let started = clock.now();
    let outcome = simulate::run(&config.limiters, kill_switch, &scenario);
    let took = clock.now().saturating_sub(started);
    let csv = args.out.join("simulate.csv");
    let svg = args.out.join("simulate.svg");
    let written = std::fs::create_dir_all(&args.out)
        .and_then(|()| std::fs::write(&csv, simulate::csv(&outcome)))
        .map_err(|e| e.to_string())
        .and_then(|()| chart(&outcome, &svg));
    if let Err(e) = written {
        return fail(format!("writing to {}: {e}", args.out.display()));
    }
    // The files are written first, and a reader that stops early (`| head`) ends the output,
    // not the run: println! would panic on the closed pipe.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "{}\n{}\n{} simulated seconds in {:.0} ms; wrote {} and {}",
        what_is_modelled(&config),
        simulate::summary(&outcome),
        outcome.seconds.len(),
        took.as_secs_f64() * 1000.0,
        csv.display(),
        svg.display()
    );
    ExitCode::SUCCESS
}

/// What the run models and what it leaves out, said before its figures.
fn what_is_modelled(config: &Config) -> String {
    let ac = config.limiters.adaptive_concurrency.mode != brownout::Mode::Off;
    let mut out = String::from(
        "Models worker_utilization's controller (its demand reading, sampling, bands and ramp)",
    );
    if ac {
        out.push_str(
            " and adaptive_concurrency, the fast guard (its learned limit, tier shares, waiting \
             room, tier hold and critical ceiling),",
        );
    }
    out.push_str(
        " in front of a first-come-first-served queue of the workers, as flows of requests \
         rather than single ones; request_rate, concurrent_requests and fleet_usage are not \
         modelled.",
    );
    if !ac {
        out.push_str(" This config runs no fast guard (adaptive_concurrency is off).");
    }
    out.push_str(
        " `brownout bench overload` measures the real server (docs/overload.md compares the two on \
         the scorecard).\n",
    );
    out
}

/// Panels over time, phases marked: utilization (with the thresholds) and demand; the amount
/// and each tier's drop probability; admitted requests per second by tier; and with a fast
/// guard, its limit beside the requests inside the app.
fn chart(o: &RunReport, path: &Path) -> Result<(), String> {
    let end = o.seconds.len() as f64;
    let marks: Vec<(f64, String)> = o.phases.iter().map(|p| (p.start, p.name.clone())).collect();
    let line = |f: &dyn Fn(&simulate::Second) -> f64| -> Vec<(f64, f64)> {
        o.seconds.iter().map(|s| (s.t, f(s))).collect()
    };
    // Up to the largest demand of the run: clipping it would hide how far past capacity it was.
    let peak = o.seconds.iter().map(|s| s.demand).fold(1.2, f64::max) * 1.05;
    let admitted = |s: &simulate::Second, t: usize| s.offered[t] - s.shed[t] - s.refused[t];
    let admitted_peak = o
        .seconds
        .iter()
        .map(|s| (0..4).map(|t| admitted(s, t)).fold(0.0, f64::max))
        .fold(o.capacity, f64::max);
    let utilization = vec![
        Series::new("utilization", BLACK, line(&|s| s.utilization)),
        Series::new("demand", MAGENTA, line(&|s| s.demand)),
        Series::new("end_of_good", GREEN, line(&|_| o.end_of_good)),
        Series::new("start_of_bad", RED, line(&|_| o.start_of_bad)),
    ];
    let mut shed = vec![Series::new("amount", BLACK, line(&|s| s.amount))];
    let mut load = vec![Series::new("capacity", BLACK, line(&|_| o.capacity))];
    for t in Tier::ALL {
        let (i, color) = (t.index(), TIER_COLORS[t.index()]);
        shed.push(Series::new(
            format!("p({t})"),
            color,
            line(&|s| s.probability[i]),
        ));
        load.push(Series::new(
            format!("admitted {t}"),
            color,
            line(&|s| admitted(s, i)),
        ));
    }
    let panel = |title: &str, y, series| Panel {
        title: title.into(),
        y,
        series,
    };
    let mut panels = vec![
        panel(
            "utilization (controller input) and demand",
            0.0..peak,
            utilization,
        ),
        panel(
            "shedding amount and drop probability by tier",
            -0.3..1.05,
            shed,
        ),
        panel(
            "admitted requests per second by tier",
            0.0..admitted_peak * 1.05,
            load,
        ),
    ];
    if o.seconds.iter().any(|s| s.limit > 0.0) {
        let guard_peak = o
            .seconds
            .iter()
            .map(|s| s.limit.max(s.in_flight))
            .fold(1.0, f64::max);
        panels.push(panel(
            "adaptive_concurrency's limit and the requests inside the app",
            0.0..guard_peak * 1.05,
            vec![
                Series::new("limit", BLACK, line(&|s| s.limit)),
                Series::new("in the app", MAGENTA, line(&|s| s.in_flight)),
            ],
        ));
    }
    chart::draw(path, end, &marks, panels)
}
