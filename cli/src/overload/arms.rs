//! The arms of `bench overload`: the same demo under each way of handling overload it is
//! compared with, and one arm's run (a fresh demo, the schedule, the reports).

use super::load::{self, Phase};
use super::process::DemoProcess;
use super::report::{self, PhaseReport};
use super::send;
use super::{probe, OverloadArgs};
use brownout::Mode;
use brownout_cli::config::{AlternativeLimiter, CliConfig};

/// The config of one arm: the demo on free loopback ports, no overrides file, and no per-IP
/// ceiling (the whole load comes from one address, 127.0.0.1, standing for a thousand clients).
pub(super) fn arm_config(base: &CliConfig, arm: &str, cap: u32) -> Option<CliConfig> {
    let mut c = base.clone();
    c.demo.bind = "127.0.0.1:0".into();
    c.brownout.admin.bind = "127.0.0.1:0".into();
    c.brownout.admin.overrides_file = None;
    c.brownout.limiters.request_rate.per_ip = brownout::config::PerIp::Off;
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

/// What one arm measured: the phase reports, every second by tier, and what `/v1/state` said
/// each second.
pub(super) struct ArmResult {
    pub(super) reports: Vec<PhaseReport>,
    /// Health checks answered 2xx, and sent.
    pub(super) health: (u64, u64),
    pub(super) per_second: Vec<[report::SecondTier; 4]>,
    pub(super) polled: Vec<report::Polled>,
}

/// One arm: a fresh demo, the schedule, and the reports.
pub(super) fn run_arm(
    config: &CliConfig,
    (arm, capacity, mean): (&str, f64, f64),
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
        let retries = send::Retries {
            max: args.retries,
            base: args.retry_backoff.get(),
            seed: args.seed,
            honor_retry_after: args.honor_retry_after,
        };
        let outcomes = send::run(&demo.app, arrivals, deadline, retries, |i| {
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
    // The cheap path's answers are the app's 404s, and health checks come at a fixed rate:
    // not part of the mix the tables score.
    let health = outcomes
        .iter()
        .filter(|o| o.arrival.path == load::Path::Health)
        .fold((0, 0), |(ok, sent), o| {
            (ok + u64::from(o.result == send::Result::Ok), sent + 1)
        });
    let outcomes: Vec<send::Outcome> = outcomes
        .into_iter()
        .filter(|o| o.arrival.scored())
        .collect();
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let per_second = report::seconds(&outcomes, total);
    let amounts: Vec<f64> = polled.iter().map(|p| p.amount).collect();
    let mut start = 0.0;
    let reports = (0..phases.len())
        .map(|i| {
            let (from, to) = (start as usize, (start + phases[i].seconds) as usize);
            start += phases[i].seconds;
            let amounts = &amounts[from.min(amounts.len())..to.min(amounts.len())];
            report::phase(&outcomes, &per_second, phases, i, capacity * mean, amounts)
        })
        .collect();
    Ok(ArmResult {
        reports,
        health,
        per_second,
        polled,
    })
}
