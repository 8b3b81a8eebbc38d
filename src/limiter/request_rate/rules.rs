//! The request-rate settings compiled for the request path: plans, route costs, quotas and
//! the `RateLimit-Policy` field of each plan.

use crate::schema::RoutePattern;
use super::{Excess, PerIp, QuotaCount, QuotaKey, RequestRateConfig};
use crate::math::gcra::Bucket;
use crate::math::window::WindowRule;
use std::collections::BTreeMap;

/// Route costs, most specific pattern first.
#[derive(Debug, Clone, Default)]
pub struct CostTable {
    routes: Vec<(RoutePattern, u32)>,
}

impl CostTable {
    fn compile(costs: &BTreeMap<String, u32>) -> Result<Self, String> {
        let mut routes = costs
            .iter()
            .map(|(r, &c)| Ok((RoutePattern::parse(r)?, c)))
            .collect::<Result<Vec<_>, String>>()?;
        routes.sort_by_key(|(r, _)| std::cmp::Reverse(r.specificity()));
        Ok(Self { routes })
    }

    /// The cost of the most specific matching pattern.
    #[inline]
    pub fn lookup(&self, method: &str, path: &str) -> Option<u32> {
        self.routes
            .iter()
            .find(|(r, _)| r.matches(method, path))
            .map(|&(_, c)| c)
    }
}

/// A compiled plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Its name (`default` for the top-level settings).
    pub name: String,
    default_cost: u32,
    /// The bucket, and the bucket widened by `elastic_factor`, computed once.
    buckets: [Bucket; 2],
    costs: CostTable,
    /// (burst, rate) of the bucket, normal and while elastic: what `RateLimit-Policy` says.
    pub limits: [(f64, f64); 2],
}

/// A compiled quota.
#[derive(Debug, Clone)]
pub struct Quota {
    /// Its name.
    pub name: String,
    /// Its window rule.
    pub rule: WindowRule,
    routes: Vec<RoutePattern>,
    /// What the quota counts against.
    pub key: QuotaKey,
    pub(super) count: QuotaCount,
}

impl Quota {
    pub(super) fn applies(&self, method: &str, path: &str) -> bool {
        self.routes.is_empty() || self.routes.iter().any(|r| r.matches(method, path))
    }
}

/// `limiters.request_rate` compiled for the request path.
#[derive(Debug, Clone)]
pub struct RateRules {
    plans: Vec<Plan>,
    costs: CostTable,
    /// Whether to send the RateLimit fields.
    pub headers: bool,
    /// The quotas, in config order.
    pub quotas: Vec<Quota>,
    /// The per-IP ceiling, if any.
    pub per_ip: Option<Bucket>,
    /// (burst, rate) of the per-IP ceiling when the config sets it, which the RateLimit
    /// fields advertise. The automatic ceiling (`per_ip: auto`) is a backstop sized never to
    /// meet a normal client: it is not advertised (an item whose remaining changes with every
    /// request of an address would also make the field new on every response), and only a
    /// refusal of it names it.
    pub per_ip_limits: Option<(f64, f64)>,
}

impl RateRules {
    /// Compiles a validated config block.
    pub fn compile(c: &RequestRateConfig) -> Result<Self, String> {
        let quotas = c
            .quotas
            .iter()
            .map(|q| {
                Ok(Quota {
                    name: q.name.clone(),
                    rule: WindowRule {
                        algorithm: q.algorithm,
                        limit: q.limit,
                        window: q.window.get().as_micros() as u64,
                    },
                    routes: q
                        .routes
                        .iter()
                        .map(|r| RoutePattern::parse(r))
                        .collect::<Result<_, _>>()?,
                    key: q.key,
                    count: q.count,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let ceiling = c.ceiling();
        let per_ip = ceiling.map(|p| Bucket::new(p.rate, f64::from(p.burst), 0.0));
        let per_ip_limits = match c.per_ip {
            PerIp::Limit(p) => Some((f64::from(p.burst), p.rate)),
            PerIp::Auto | PerIp::Off => None,
        };
        let plan = |name: &str,
                    rate: f64,
                    burst: u32,
                    default_cost: u32,
                    costs: &BTreeMap<String, u32>|
         -> Result<Plan, String> {
            let elastic = c.elastic_factor;
            // With `excess: delay` a request over the bucket is held up to `max_delay`.
            let queue = match c.excess {
                Excess::Refuse => 0,
                Excess::Delay => c.max_delay.get().as_micros() as u64,
            };
            Ok(Plan {
                name: name.to_owned(),
                buckets: [
                    Bucket::new(rate, f64::from(burst), c.soft_overage).paced(queue),
                    Bucket::new(rate * elastic, f64::from(burst) * elastic, c.soft_overage)
                        .paced(queue),
                ],
                default_cost,
                costs: CostTable::compile(costs)?,
                limits: [
                    (f64::from(burst), rate),
                    (f64::from(burst) * elastic, rate * elastic),
                ],
            })
        };
        let none = BTreeMap::new();
        let mut plans = vec![plan("default", c.rate, c.burst, c.default_cost, &none)?];
        for (name, p) in &c.plans {
            plans.push(plan(
                name,
                p.rate,
                p.burst,
                p.default_cost.unwrap_or(c.default_cost),
                &p.costs,
            )?);
        }
        Ok(Self {
            plans,
            costs: CostTable::compile(&c.costs)?,
            headers: c.headers,
            quotas,
            per_ip,
            per_ip_limits,
        })
    }

    /// The plan called `name`; the default plan for `None` or an unknown name.
    #[inline]
    pub fn plan(&self, name: Option<&str>) -> usize {
        name.and_then(|n| self.plans.iter().position(|p| p.name == n))
            .unwrap_or(0)
    }

    /// How many plans there are (the default one first).
    pub fn plan_count(&self) -> usize {
        self.plans.len()
    }

    /// The plan at `index`.
    #[inline]
    pub fn plan_at(&self, index: usize) -> &Plan {
        &self.plans[index.min(self.plans.len() - 1)]
    }

    /// The cost of a request under plan `index`: the plan's table, then the shared one, then
    /// the plan's default cost.
    #[inline]
    pub fn cost(&self, index: usize, method: &str, path: &str) -> u32 {
        let plan = self.plan_at(index);
        plan.costs
            .lookup(method, path)
            .or_else(|| self.costs.lookup(method, path))
            .unwrap_or(plan.default_cost)
    }

    /// The bucket of plan `index`, widened by `elastic_factor` while the server is idle.
    #[inline]
    pub fn bucket(&self, index: usize, elastic: bool) -> &Bucket {
        &self.plan_at(index).buckets[usize::from(elastic)]
    }
}
