//! `brownout bench overload`: the overload scorecard. For each arm a fresh demo process (this
//! binary, `run`) on loopback gets the same seeded open-loop schedule; every request's outcome
//! and the controller's amount each second become a Markdown table, a CSV and a chart per arm.

mod chart;
mod load;
mod probe;
mod report;

use brownout::Mode;
use brownout_cli::config::{AlternativeLimiter, CliConfig, DemoWork};
use clap::Args;
use load::Phase;
use report::PhaseReport;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

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
}

/// The config of one arm: the demo on free loopback ports, no overrides file, and no per-IP
/// ceiling (the whole load comes from one address, 127.0.0.1, standing for a thousand clients).
fn arm_config(base: &CliConfig, arm: &str, cap: u32) -> Option<CliConfig> {
    let mut c = base.clone();
    c.demo.bind = "127.0.0.1:0".into();
    c.brownout.admin.bind = "127.0.0.1:0".into();
    c.brownout.admin.overrides_file = None;
    c.brownout.limiters.request_rate.per_ip = None;
    let l = &mut c.brownout.limiters;
    let all_off = |l: &mut brownout::config::LimitersConfig| {
        l.request_rate.mode = Mode::Off;
        l.concurrent_requests.mode = Mode::Off;
        l.fleet_usage.mode = Mode::Off;
        l.adaptive_concurrency.mode = Mode::Off;
        l.worker_utilization.mode = Mode::Off;
    };
    c.demo.alternative_limiter = AlternativeLimiter::Off;
    match arm {
        "off" => all_off(l),
        "vegas" | "gradient" => {
            all_off(l);
            c.demo.alternative_limiter = if arm == "vegas" {
                AlternativeLimiter::Vegas
            } else {
                AlternativeLimiter::Gradient
            };
        }
        "static_cap" => {
            all_off(l);
            l.fleet_usage.mode = Mode::Enforce;
            l.fleet_usage.capacity = cap;
        }
        "config" => {}
        "adaptive" => l.adaptive_concurrency.mode = Mode::Enforce,
        "stripe" => l.adaptive_concurrency.mode = Mode::Off,
        _ => return None,
    }
    Some(c)
}

/// A demo process of this binary, stopped when dropped.
struct DemoProcess {
    child: Child,
    app: String,
    admin: String,
    token: String,
}

impl Drop for DemoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DemoProcess {
    /// Starts `config` (on `cpus`, if given) and waits (at most 30 s) for it to say where it
    /// listens; its log goes to `log`.
    fn start(
        config: &CliConfig,
        file: &Path,
        log: &Path,
        cpus: Option<&str>,
    ) -> Result<Self, String> {
        let json = serde_json::to_string_pretty(config).map_err(|e| e.to_string())?;
        // JSON is YAML: the demo reads it like config.yaml.
        std::fs::write(file, json).map_err(|e| format!("{}: {e}", file.display()))?;
        let token = format!(
            "{:016x}{:016x}",
            brownout::rng::os_seed(),
            brownout::rng::os_seed()
        );
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut command = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .arg("--config")
            .arg(file)
            .arg("run")
            .env(&config.brownout.admin.token_env, &token)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the demo: {e}"))?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            let mut log = std::io::BufWriter::new(log);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                for (what, marker) in [
                    ("app", "demo app listening on "),
                    ("admin", "admin API listening on "),
                ] {
                    if let Some(i) = line.find(marker) {
                        let url: String = line[i + marker.len()..]
                            .split_whitespace()
                            .take(1)
                            .collect();
                        let _ = tx.send((what, url));
                    }
                }
                let _ = std::io::Write::write_all(&mut log, format!("{line}\n").as_bytes());
            }
        });
        let (mut app, mut admin) = (None, None);
        while app.is_none() || admin.is_none() {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(("app", url)) => app = Some(url),
                Ok((_, url)) => admin = Some(url),
                Err(_) => return Err("the demo did not start within 30 s (see its log)".into()),
            }
        }
        let strip = |s: String| s.trim_end_matches(|c: char| !c.is_ascii_digit()).to_owned();
        Ok(Self {
            child,
            app: strip(app.expect("set")),
            admin: strip(admin.expect("set")),
            token,
        })
    }

    /// Sends SIGUSR1 (capacity drop) or SIGUSR2 (restored) to the demo.
    fn signal(&self, slow: bool) {
        let sig = if slow { "-USR1" } else { "-USR2" };
        let _ = Command::new("kill")
            .arg(sig)
            .arg(self.child.id().to_string())
            .status();
    }
}

/// What one arm measured: the phase reports, every second by tier, and what `/v1/state` said
/// each second.
struct ArmResult {
    reports: Vec<PhaseReport>,
    per_second: Vec<[report::SecondTier; 4]>,
    polled: Vec<report::Polled>,
}

/// One arm: a fresh demo, the schedule, and the reports.
fn run_arm(
    config: &CliConfig,
    (arm, capacity): (&str, f64),
    args: &OverloadArgs,
    phases: &[Phase],
    arrivals: &[load::Arrival],
) -> Result<ArmResult, String> {
    let demo = DemoProcess::start(
        config,
        &args.out.join(format!("{arm}.config.json")),
        &args.out.join(format!("{arm}.log")),
        args.server_cpus.as_deref(),
    )?;
    let deadline = args.deadline.get();
    let (outcomes, polled) = actix_web::rt::System::new().block_on(async {
        let stop = std::rc::Rc::new(std::cell::Cell::new(false));
        let poller = actix_web::rt::spawn(probe::poll_state(
            demo.admin.clone(),
            demo.token.clone(),
            stop.clone(),
        ));
        let mut slow = false;
        let retries = load::Retries {
            max: args.retries,
            base: args.retry_backoff.get(),
            seed: args.seed,
            honor_retry_after: args.honor_retry_after,
        };
        let outcomes = load::run(&demo.app, arrivals, deadline, retries, |i| {
            if phases[i].slow != slow {
                slow = phases[i].slow;
                demo.signal(slow);
            }
        })
        .await;
        stop.set(true);
        (outcomes, poller.await.unwrap_or_default())
    });
    drop(demo);
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let per_second = report::seconds(&outcomes, total);
    let amounts: Vec<f64> = polled.iter().map(|p| p.amount).collect();
    let mut start = 0.0;
    let reports = (0..phases.len())
        .map(|i| {
            let (from, to) = (start as usize, (start + phases[i].seconds) as usize);
            start += phases[i].seconds;
            let amounts = &amounts[from.min(amounts.len())..to.min(amounts.len())];
            report::phase(&outcomes, &per_second, phases, i, capacity, amounts)
        })
        .collect();
    Ok(ArmResult {
        reports,
        per_second,
        polled,
    })
}

pub fn run(config: CliConfig, args: OverloadArgs) -> ExitCode {
    let fail = |m: String| {
        eprintln!("error: {m}");
        ExitCode::from(2)
    };
    let mut configs = Vec::new();
    for arm in &args.arms {
        match arm_config(&config, arm, args.cap) {
            Some(c) => configs.push((arm.clone(), c)),
            None => {
                return fail(format!(
                    "--arms: {arm:?} is not one of off, static_cap, vegas, gradient, config, adaptive, stripe"
                ))
            }
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
    let (capacity, how) = match config.demo.work {
        DemoWork::Sleep => (
            f64::from(config.demo.workers) / config.demo.service_time.get().as_secs_f64(),
            format!(
                "{} workers × {}",
                config.demo.workers, config.demo.service_time
            ),
        ),
        DemoWork::Cpu => match probe::measure_capacity(&config, &args) {
            Ok(c) => (
                c,
                format!(
                    "measured: {} of CPU per request, {} workers{}",
                    config.demo.service_time,
                    config.demo.workers,
                    args.server_cpus
                        .as_ref()
                        .map_or_else(String::new, |c| format!(" on CPUs {c}"))
                ),
            ),
            Err(e) => return fail(format!("measuring the capacity: {e}")),
        },
    };
    let arrivals = load::schedule(&phases, capacity, args.seed);
    eprintln!(
        "{} requests per arm over {:.0} s",
        arrivals.len(),
        phases.iter().map(|p| p.seconds).sum::<f64>()
    );
    let mut results = Vec::new();
    let mut details = String::new();
    for (arm, c) in &configs {
        eprintln!("arm {arm}…");
        let ArmResult {
            reports,
            per_second,
            polled,
        } = match run_arm(c, (arm, capacity), &args, &phases, &arrivals) {
            Ok(r) => r,
            Err(e) => return fail(format!("arm {arm}: {e}")),
        };
        let written = std::fs::write(
            args.out.join(format!("{arm}.csv")),
            report::csv(&per_second, &polled),
        )
        .map_err(|e| e.to_string())
        .and_then(|()| {
            chart::arm(
                &args.out.join(format!("{arm}.svg")),
                arm,
                &per_second,
                &polled,
                &phases,
            )
        });
        if let Err(e) = written {
            return fail(format!("writing arm {arm}: {e}"));
        }
        details.push_str(&report::detail(arm, &reports, &phases));
        results.push((arm.clone(), reports));
    }
    let summary = report::summary(&results, &phases);
    println!("{summary}");
    let doc = format!(
        "# Overload scorecard\n\ncapacity C = {capacity:.0} req/s ({how}), deadline {}, {}, seed {}{}\n\n{summary}{details}",
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
    if let Err(e) = std::fs::write(args.out.join("scorecard.md"), doc) {
        return fail(format!("writing scorecard.md: {e}"));
    }
    ExitCode::SUCCESS
}
