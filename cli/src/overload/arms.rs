//! The arms of `bench overload`: the same demo under each way of handling overload it is
//! compared with.

use brownout::Mode;
use brownout_cli::config::{AlternativeLimiter, CliConfig};

/// The config of one arm: the demo on free loopback ports, no overrides file, and no per-IP
/// ceiling (the whole load comes from one address, 127.0.0.1, standing for a thousand clients).
pub(super) fn arm_config(base: &CliConfig, arm: &str, cap: u32) -> Option<CliConfig> {
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
