//! Validation of `limiters.request_rate:`: every refusal names its key.

use super::{PerIp, RequestRateConfig};
use crate::schema::validate::{duration, ensure, max_keys, Valid, Num, MIN_SHARE};
use std::time::Duration;
use crate::schema::{ConfigError, QuotaAlgorithm, RoutePattern};
use std::collections::BTreeMap;

const RR: &str = "limiters.request_rate";

/// Names that end up in headers and metrics-free JSON: short tokens only.
fn token(name: &str, key: &str) -> Valid {
    ensure(
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        key,
        format!("must be 1-64 letters, digits, '_' or '-' (got {name:?})"),
    )
}

fn costs(table: &BTreeMap<String, u32>, burst: u32, key: &str) -> Valid {
    for (route, &cost) in table {
        let k = format!("{key}.costs[{route:?}]");
        RoutePattern::parse(route).map_err(|m| ConfigError::invalid(&k, m))?;
        ensure(
            cost <= burst,
            &k,
            format!("is {cost}, more than the burst of {burst}: such a request could never pass"),
        )?;
    }
    Ok(())
}

/// Longest time to refill an empty bucket: state is kept in 48-bit microseconds.
const MAX_REFILL_SECS: f64 = 365.0 * 86_400.0;

fn rate_and_burst(rate: f64, burst: u32, key: &str) -> Valid {
    ensure(
        rate.is_finite() && rate > 0.0 && rate <= 1e6,
        &format!("{key}.rate"),
        format!("must be greater than 0 and at most 1000000 credits per second (got {rate})"),
    )?;
    ensure(burst >= 1, &format!("{key}.burst"), "must be at least 1")?;
    ensure(
        f64::from(burst) / rate <= MAX_REFILL_SECS,
        &format!("{key}.burst"),
        format!(
            "refills in {:.0} s at this rate; at most a year (365 days) is supported",
            f64::from(burst) / rate
        ),
    )
}

impl RequestRateConfig {
    pub(crate) fn validate(&self) -> Valid {
        rate_and_burst(self.rate, self.burst, RR)?;
        ensure(
            self.default_cost <= self.burst,
            &format!("{RR}.default_cost"),
            "must not exceed burst",
        )?;
        costs(&self.costs, self.burst, RR)?;
        for (name, plan) in &self.plans {
            let key = format!("{RR}.plans.{name}");
            token(name, &key)?;
            rate_and_burst(plan.rate, plan.burst, &key)?;
            let default_cost = plan.default_cost.unwrap_or(self.default_cost);
            ensure(
                default_cost <= plan.burst,
                &format!("{key}.default_cost"),
                format!(
                    "is {default_cost}, more than the plan's burst of {}",
                    plan.burst
                ),
            )?;
            // The plan's own costs and the default table both apply to it.
            costs(&plan.costs, plan.burst, &key)?;
            costs(&self.costs, plan.burst, &key)?;
        }
        ensure(
            self.soft_overage == 0.0
                || (self.soft_overage.is_finite()
                    && (MIN_SHARE..=10.0).contains(&self.soft_overage)),
            &format!("{RR}.soft_overage"),
            format!(
                "must be 0 or between {MIN_SHARE} and 10 (got {})",
                Num(self.soft_overage)
            ),
        )?;
        ensure(
            self.elastic_factor.is_finite() && (1.0..=100.0).contains(&self.elastic_factor),
            &format!("{RR}.elastic_factor"),
            format!("must be between 1 and 100 (got {})", self.elastic_factor),
        )?;
        match self.per_ip {
            PerIp::Limit(ceiling) => {
                rate_and_burst(ceiling.rate, ceiling.burst, &format!("{RR}.per_ip"))?;
            }
            PerIp::Auto | PerIp::Off => {}
        }
        max_keys(self.max_keys, &format!("{RR}.max_keys"))?;
        duration(
            self.max_delay.get(),
            &format!("{RR}.max_delay"),
            (Duration::from_millis(1), Duration::from_secs(60)),
        )?;
        duration(
            self.eviction_interval.get(),
            &format!("{RR}.eviction_interval"),
            (Duration::from_millis(1), Duration::from_secs(3600)),
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, q) in self.quotas.iter().enumerate() {
            let key = format!("{RR}.quotas[{i}]");
            token(&q.name, &format!("{key}.name"))?;
            ensure(
                seen.insert(q.name.as_str()),
                &format!("{key}.name"),
                format!("{:?} is used by another quota", q.name),
            )?;
            ensure(
                (1..=65_535).contains(&q.limit),
                &format!("{key}.limit"),
                format!("must be between 1 and 65535 (got {})", q.limit),
            )?;
            let most = crate::math::log::LOG_LIMIT_MAX;
            ensure(
                q.algorithm != QuotaAlgorithm::SlidingLog || q.limit <= most,
                &format!("{key}.limit"),
                format!(
                    "is {} for a sliding_log, which keeps 8 bytes per event and at most \
                     {most} events a key; use algorithm: sliding_window (8 bytes a key \
                     whatever the limit) for a higher limit",
                    q.limit
                ),
            )?;
            duration(
                q.window.get(),
                &format!("{key}.window"),
                (Duration::from_secs(1), Duration::from_secs(365 * 86_400)),
            )?;
            for (j, route) in q.routes.iter().enumerate() {
                RoutePattern::parse(route)
                    .map_err(|m| ConfigError::invalid(format!("{key}.routes[{j}]"), m))?;
            }
        }
        ensure(
            self.quotas.len() <= 16,
            &format!("{RR}.quotas"),
            "may list at most 16 quotas",
        )
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
