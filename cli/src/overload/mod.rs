//! `brownout bench overload`: the overload scorecard. For each arm a fresh demo process (this
//! binary, `run`) on loopback gets the same seeded open-loop schedule; every request's outcome
//! and the controller's amount each second become a Markdown table, a CSV and a chart per arm.

mod app;
mod arms;
mod chart;
mod csv;
mod load;
mod matrix;
mod probe;
mod process;
mod report;
mod send;

pub use app::AppSpec;

use arms::{arm_config, run_arm, ArmResult};
use brownout_cli::config::{CliConfig, DemoWork};
use clap::Args;
use load::Phase;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

#[derive(Args)]
pub struct OverloadArgs {
    /// The arms, in order: off (no shedding: every limiter off), static_cap (fleet_usage alone,
    /// capacity at the knee), vegas and gradient (every brownout limiter off, the
    /// congestion-limiter crate's algorithm in front of the demo), config (the config file as
    /// it is), adaptive (the config file with adaptive_concurrency enforcing), stripe (the
    /// config file with adaptive_concurrency off).
    #[arg(
        long,
        default_value = "off,static_cap,vegas,config",
        value_delimiter = ','
    )]
    arms: Vec<String>,
    /// The load profile: the scorecard, a 10C spike of the standard mix (critical alone 1C)
    /// after sustained overload, or a spike of test and GET traffic alone.
    #[arg(long, value_enum, default_value = "scorecard")]
    profile: load::Profile,
    /// Every phase 20 times shorter (for CI: the invariants, not the figures).
    #[arg(long)]
    quick: bool,
    /// Every phase this many times shorter (--quick is 20).
    #[arg(long, conflicts_with = "quick")]
    compress: Option<f64>,
    /// The static cap's capacity (fleet_usage.capacity of the static_cap arm).
    #[arg(long, default_value_t = 10)]
    cap: u32,
    /// How long clients wait for an answer.
    #[arg(long, default_value = "1s")]
    deadline: brownout::config::HumanDuration,
    /// Clients retry a refused request (429/503) up to this many times, with full-jitter
    /// exponential backoff, within its deadline (0: never).
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// Clients wait at least a refusal's Retry-After before they retry it (and so do not
    /// retry when that is past their deadline).
    #[arg(long)]
    honor_retry_after: bool,
    /// The first retry's backoff bound (doubling after each).
    #[arg(long, default_value = "50ms")]
    retry_backoff: brownout::config::HumanDuration,
    /// CPUs the demo server may run on (taskset's list, e.g. `0`); with `demo.work: cpu`, set
    /// `demo.workers` to how many these are.
    #[arg(long)]
    server_cpus: Option<String>,
    /// CPUs the load generator runs on (e.g. `1`), away from the server's.
    #[arg(long)]
    load_cpus: Option<String>,
    /// Seed of the arrival schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write scorecard.md and each arm's CSV and SVG.
    #[arg(long, default_value = "scorecard")]
    out: PathBuf,
    /// The apps to run it on, each in turn (`WORKERSxTIME[:cpu][+cheap[PERCENT]][~SPREAD]`,
    /// e.g. `8x50ms`, `2x10ms:cpu`, `8xmixed+cheap30~0.5`: mixed is 10 ms GETs, 100 ms POSTs
    /// and 20 ms charges, +cheap sends 10% of the arrivals (+cheap30: 30%) to a path answered
    /// at once, ~0.5 draws each request's time from a log-normal of σ 0.5 around its
    /// route's, its mean kept); each app's scorecard
    /// goes to its own folder under --out, and matrix.md gets one row of targets per app.
    /// Unset: the config file's demo section.
    #[arg(long, value_delimiter = ',')]
    app: Vec<app::AppSpec>,
    /// The app matrix (every shape of `--app` the zero-tuning targets are judged on) on the
    /// matrix profile.
    #[arg(long, conflicts_with = "app")]
    matrix: bool,
    /// Which brownout settings the demo runs: `file` (the config file's) or `defaults`
    /// (the library's defaults, what an embedder gets without a file; the file's demo
    /// section still says what the app is).
    /// (Named `--settings`: `--config` is the config file's path, which gives the app.)
    #[arg(long, value_enum, default_value = "file")]
    settings: Settings,
    /// Run nothing: draw each arm's chart again from its CSV in --out (under the phases of
    /// --profile and --compress, which must be the run's).
    #[arg(long)]
    replot: bool,
}

/// `bench overload --config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Settings {
    /// The config file's.
    File,
    /// The library's defaults.
    Defaults,
}

/// What one app measured on every arm, for the matrix.
struct AppResult {
    capacity: f64,
    traffic: load::Traffic,
    at_once: f64,
    arms: Vec<(String, ArmResult)>,
}

pub fn run(mut config: CliConfig, mut args: OverloadArgs) -> ExitCode {
    let fail = |m: String| {
        eprintln!("error: {m}");
        ExitCode::from(2)
    };
    if args.settings == Settings::Defaults {
        config.brownout = brownout::Config::default();
        // What the app is, not how brownout is tuned: the bench names its critical routes
        // and its clients' test-key prefix itself.
        let c = &mut config.brownout.classifier;
        c.critical = load::CRITICAL_ROUTES.map(String::from).to_vec();
        c.test_key_prefix = Some(load::TEST_KEY_PREFIX.into());
    }
    for arm in &args.arms {
        if arm_config(&config, arm, args.cap).is_none() {
            return fail(format!(
                "--arms: {arm:?} is not one of off, static_cap, vegas, gradient, config, adaptive, stripe"
            ));
        }
    }
    if args.matrix {
        args.app = app::MATRIX
            .split(',')
            .map(|a| a.parse().expect("the matrix's apps parse"))
            .collect();
        if args.profile == load::Profile::Scorecard {
            args.profile = load::Profile::Matrix;
        }
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        return fail(format!("{}: {e}", args.out.display()));
    }
    let compress = match (args.quick, args.compress) {
        (true, _) => 20.0,
        (false, Some(f)) if f.is_finite() && f >= 1.0 => f,
        (false, Some(f)) => return fail(format!("--compress: must be at least 1 (got {f})")),
        (false, None) => 1.0,
    };
    let phases = load::phases(args.profile, compress);
    if args.replot {
        let configs: Vec<(String, CliConfig)> = args
            .arms
            .iter()
            .filter_map(|arm| arm_config(&config, arm, args.cap).map(|c| (arm.clone(), c)))
            .collect();
        return match csv::replot(&configs, &args, &phases) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    }
    if let Some(cpus) = &args.load_cpus {
        // Every thread of this process, and those it starts later, on `cpus`.
        let pinned = Command::new("taskset")
            .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status();
        if !pinned.is_ok_and(|s| s.success()) {
            return fail(format!("--load-cpus {cpus}: taskset failed"));
        }
    }
    if args.app.is_empty() {
        return match run_app(&config, &args, &phases, compress, None) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        };
    }
    let mut table = matrix::head();
    let mut details = String::new();
    let root = args.out.clone();
    for app in args.app.clone() {
        eprintln!("app {}…", app.name);
        args.out = root.join(app.folder());
        if let Err(e) = std::fs::create_dir_all(&args.out) {
            return fail(format!("{}: {e}", args.out.display()));
        }
        // A cold start lasts the first phase (a minute, uncompressed).
        let cold = std::time::Duration::from_secs_f64(phases[0].seconds);
        let result = match run_app(
            &app.apply(&config, cold),
            &args,
            &phases,
            compress,
            Some(&app),
        ) {
            Ok(r) => r,
            Err(e) => return fail(format!("app {}: {e}", app.name)),
        };
        for (arm, r) in &result.arms {
            let name = format!("{} ({arm})", app.name);
            table.push_str(&matrix::row(&matrix::AppRun {
                app: &name,
                capacity: result.capacity,
                at_once: result.at_once,
                phases: &phases,
                reports: &r.reports,
                per_second: &r.per_second,
                mean: result.traffic.mean_service(),
                polled: &r.polled,
                health: (r.health.1 > 0).then_some(r.health),
                cold: app.cold,
            }));
            let _ = std::fmt::Write::write_fmt(
                &mut details,
                format_args!(
                    "\n### {name}: refusals by limiter\n\n{}",
                    matrix::refusals(&r.reports, &phases)
                ),
            );
        }
        println!("{table}");
        let doc = format!(
            "# App matrix\n\nbrownout's settings: {}; profile {:?}{}; deadline {}, seed {}\n\n{table}{details}",
            match args.settings {
                Settings::Defaults => "the library's defaults",
                Settings::File => "the config file's",
            },
            args.profile,
            if compress > 1.0 {
                format!(", phases {compress}× shorter")
            } else {
                String::new()
            },
            args.deadline,
            args.seed,
        );
        if let Err(e) = std::fs::write(root.join("matrix.md"), doc) {
            return fail(format!("writing matrix.md: {e}"));
        }
    }
    ExitCode::SUCCESS
}

/// Every arm on one app (`config`'s demo section): the scorecard in `args.out`.
fn run_app(
    config: &CliConfig,
    args: &OverloadArgs,
    phases: &[Phase],
    compress: f64,
    app: Option<&app::AppSpec>,
) -> Result<AppResult, String> {
    let configs: Vec<(String, CliConfig)> = args
        .arms
        .iter()
        .filter_map(|arm| arm_config(config, arm, args.cap).map(|c| (arm.clone(), c)))
        .collect();
    let traffic = app.map_or_else(
        || load::Traffic::plain(config.demo.times()),
        |a| a.traffic(config),
    );
    let mean = traffic.mean_service();
    let (capacity, how, at_once) = match config.demo.work {
        DemoWork::Sleep => (
            f64::from(config.demo.workers) / mean,
            match config.demo.route_times {
                None => format!(
                    "{} workers × {}",
                    config.demo.workers, config.demo.service_time
                ),
                Some(_) => format!(
                    "{} workers × {:.1} ms (the mix's mean of its route times)",
                    config.demo.workers,
                    mean * 1000.0
                ),
            },
            f64::from(config.demo.workers),
        ),
        DemoWork::Cpu => {
            let c = probe::measure_capacity(config, args)
                .map_err(|e| format!("measuring the capacity: {e}"))?;
            let cores = args.server_cpus.as_ref().map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
                |c| c.split(',').count() as f64,
            );
            (
                c,
                format!(
                    "measured: {} of CPU per request, {} workers{}",
                    config.demo.service_time,
                    config.demo.workers,
                    args.server_cpus
                        .as_ref()
                        .map_or_else(String::new, |c| format!(" on CPUs {c}"))
                ),
                cores.min(f64::from(config.demo.workers)),
            )
        }
    };
    let arrivals = load::schedule(phases, capacity, args.seed, &traffic);
    let cheap = traffic.cheap;
    eprintln!(
        "{} requests per arm over {:.0} s",
        arrivals.len(),
        phases.iter().map(|p| p.seconds).sum::<f64>()
    );
    let mut results = Vec::new();
    let mut arms = Vec::new();
    let mut details = String::new();
    for (arm, c) in &configs {
        eprintln!("arm {arm}…");
        let result = run_arm(c, (arm, capacity, mean), args, phases, &arrivals)
            .map_err(|e| format!("arm {arm}: {e}"))?;
        std::fs::write(
            args.out.join(format!("{arm}.csv")),
            csv::csv(&result.per_second, &result.polled),
        )
        .map_err(|e| e.to_string())
        .and_then(|()| {
            chart::arm(
                &args.out.join(format!("{arm}.svg")),
                (arm, chart::Loops::of(c)),
                &result.per_second,
                &result.polled,
                phases,
            )
        })
        .map_err(|e| format!("writing arm {arm}: {e}"))?;
        details.push_str(&report::detail(arm, &result.reports, phases));
        results.push((arm.clone(), result.reports.clone()));
        arms.push((arm.clone(), result));
    }
    let summary = report::summary(&results, phases);
    println!("{summary}");
    let doc = format!(
        "# Overload scorecard\n\ncapacity C = {capacity:.0} req/s ({how}{}), deadline {}, {}, seed {}{}\n\n{summary}{details}",
        [
            (cheap > 0.0).then(|| {
                format!("; {:.0}% of arrivals more on a path answered at once", cheap * 100.0)
            }),
            (traffic.health > 0.0)
                .then(|| format!("; {} health checks a second", traffic.health)),
            (!config.demo.cold_start.get().is_zero()).then(|| {
                format!(
                    "; a cold start: the first {} {}× slower",
                    config.demo.cold_start,
                    brownout_cli::config::COLD_SLOWDOWN
                )
            }),
        ]
        .into_iter()
        .flatten()
        .collect::<String>(),
        args.deadline,
        match args.retries {
            0 => "no retries".to_owned(),
            n => format!(
                "up to {n} retries of a 429/503 (full jitter from {}{})",
                args.retry_backoff,
                if args.honor_retry_after { ", at least its Retry-After" } else { "" }
            ),
        },
        args.seed,
        if compress > 1.0 {
            format!(", phases {compress}× shorter")
        } else {
            String::new()
        },
    );
    std::fs::write(args.out.join("scorecard.md"), doc)
        .map_err(|e| format!("writing scorecard.md: {e}"))?;
    Ok(AppResult {
        capacity,
        traffic,
        at_once,
        arms,
    })
}
