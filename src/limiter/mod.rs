//! The limiters, checked in the order of docs/how-it-decides.md (the chain that applies their
//! modes and fails open on any error or panic is `engine/chain.rs`).

/// The arithmetic of a bucket and of a window, which a [`Store`](crate::store::Store) of one's
/// own answers with.
pub use crate::math::{gcra, window};

use crate::schema::{ConfigError, DeadlineConfig, Mode};
use crate::store::{AskSize, MemoryStore, Table, TableSpec};
use crate::tier::Tier;
use serde::Deserialize;
use serde::Serialize;
use std::time::Duration;

/// What makes a limiter one unit: its name and the words of its refusals, implemented in the
/// limiter's own module for its settings type (its section of `limiters:`, with a `mode`).
/// The one list of limiters (`limiter_list!`, below) names each with its settings
/// type; from it come [`LimitersConfig`], the limiters' modules here and [`LimiterName`] with
/// its methods, through which everything that goes over every limiter works (the operator's
/// mode changes, the metrics arrays, `/v1/state`, the settings' modes, the answers' text). How
/// to add one: docs/ARCHITECTURE.md, "How to add a limiter".
pub(crate) trait Limiter {
    /// Its name: the metrics' `limiter` label, the admin API's and the config's key.
    const NAME: LimiterName;
    /// The title and detail of its refusal `r` (`policy` names the request-rate policy other
    /// than the client's bucket; `wait` is when to retry, in words).
    fn problem(r: &Rejection, policy: Option<&str>, wait: &str) -> Problem;
    /// How many tables of per-key state it may keep in the store: their ids are reserved
    /// for it in the list's order ([`LimiterName::table`]); `brownout_tracked_keys{limiter}`
    /// counts their keys.
    const TABLES: u8;
    /// Whether its tables count client keys (`brownout_tracked_keys{limiter}`): a pool of
    /// slots counts none.
    const TRACKS_KEYS: bool = Self::TABLES > 0;
    /// The tables it keeps under these settings (at most `TABLES`), each with its kind and
    /// the keys it is sized for: the in-memory store allocates them once, at start.
    fn tables(&self) -> Vec<TableSpec>;
    /// The most it asks of the keyed store for one request under these settings, whatever
    /// its mode: the settings are refused when all the limiters' together are past what one
    /// ask holds.
    fn asks_at_most(&self) -> AskSize;
    /// The first of its settings read only at start (sizing memory, picking sources) that
    /// differs in `new`, by its dotted key: a live change refuses it.
    fn restart_only(&self, new: &Self) -> Option<&'static str>;
    /// Takes those settings from `own`, this instance's (a fleet's settings document may come
    /// from an instance sized otherwise).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fn keep_sized_at_start(&mut self, own: &Self);
}

/// A refusal's title and detail, in the words of the limiter that refused.
pub(crate) type Problem = (&'static str, String);

/// The words of a critical request refused by a limiter that protects the server (nothing is
/// said about critical requests being served).
pub(crate) fn critical_refused(wait: &str) -> Problem {
    (
        "Service overloaded",
        format!(
            "The server has more critical requests than it can answer in time and is serving some clients' first. Retry in {wait}."
        ),
    )
}

/// The one list of limiters, `Variant = index, name: Settings;` in the order of their tables,
/// metrics and `limiters:` blocks: `name` is the metrics' label, the admin API's name and the
/// key of its block, whose type `Settings` (with a `mode`) is also the limiter's unit (it
/// implements `crate::limiter::Limiter` in the limiter's own module). Everything that goes
/// over every limiter is generated from it, below: the limiters' modules, [`LimitersConfig`]
/// and its validation, [`LimiterName`] and its dispatch. How to add a limiter:
/// docs/ARCHITECTURE.md, "How to add a limiter".
macro_rules! limiter_list {
    ($then:ident) => {
        $then! {
            /// Per-key token bucket with weighted costs.
            RequestRate = 0, request_rate: $crate::limiter::request_rate::RequestRateConfig;
            /// Per-key in-flight cap.
            ConcurrentRequests = 1, concurrent_requests: $crate::limiter::concurrent_requests::ConcurrentRequestsConfig;
            /// Capacity reserved for critical traffic.
            FleetUsage = 2, fleet_usage: $crate::limiter::fleet_usage::FleetUsageConfig;
            /// The fast guard: a learned limit on non-critical requests in flight.
            AdaptiveConcurrency = 3, adaptive_concurrency: $crate::limiter::adaptive_concurrency::AdaptiveConcurrencyConfig;
            /// The derivative controller that sheds by tier.
            WorkerUtilization = 4, worker_utilization: $crate::limiter::worker_utilization::WorkerUtilizationConfig;
        }
    };
}
pub(crate) use limiter_list;

/// The limiters' modules, [`LimitersConfig`] and [`LimiterName`], from the one list (`limiter_list!`,
/// in the order of their tables and metrics; the chain checks worker_utilization's plan before
/// adaptive_concurrency).
macro_rules! limiters {
    ($($(#[$doc:meta])* $variant:ident = $index:literal, $name:ident: $unit:ty;)*) => {
        $(pub(crate) mod $name;)*

        /// `limiters:` — one block per limiter, checked in this order.
        ///
        /// # Examples
        /// ```
        /// use brownout::{Config, Mode};
        ///
        /// // Every limiter at its default: the per-client ones off, the overload protection on.
        /// let limiters = Config::default().limiters;
        /// assert_eq!(limiters.request_rate.mode, Mode::Off);
        /// assert_eq!(limiters.worker_utilization.mode, Mode::Enforce);
        /// limiters.validate()?;
        /// # Ok::<(), brownout::Report>(())
        /// ```
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        #[non_exhaustive]
        pub struct LimitersConfig {
            $($(#[$doc])* pub $name: $unit,)*
            /// When an admitted request that is still running stops counting.
            pub deadline: DeadlineConfig,
        }

        impl LimitersConfig {
            /// Checks every limiter block, in order, then the deadline (also used for live
            /// updates).
            pub fn validate(&self) -> Result<(), ConfigError> {
                $(self.$name.validate()?;)*
                let mut asked = AskSize::default();
                $(
                    asked = asked.plus(<$unit as Limiter>::asks_at_most(&self.$name));
                    if let Some(past) = asked.past_room() {
                        return Err(ConfigError::invalid(concat!("limiters.", stringify!($name)), past));
                    }
                )*
                self.deadline.validate()
            }

            /// Every table of per-key state the limiters keep under these settings, each
            /// with its kind and size (each limiter's own list of its tables).
            pub fn tables(&self) -> Vec<TableSpec> {
                let mut all = Vec::new();
                $(all.extend(<$unit as Limiter>::tables(&self.$name));)*
                all
            }

            /// The first setting read only at start that `new` changes, by its dotted key
            /// (each limiter's [`Limiter::restart_only`]).
            pub(crate) fn restart_only_change(&self, new: &Self) -> Option<&'static str> {
                $(
                    if let Some(key) = <$unit as Limiter>::restart_only(&self.$name, &new.$name) {
                        return Some(key);
                    }
                )*
                None
            }

            /// Takes from `own` every setting read only at start (each limiter's
            /// [`Limiter::keep_sized_at_start`]).
            #[cfg_attr(not(feature = "redis"), allow(dead_code))]
            pub(crate) fn keep_sized_at_start(&mut self, own: &Self) {
                $(<$unit as Limiter>::keep_sized_at_start(&mut self.$name, &own.$name);)*
            }
        }

        /// The limiters, in the order of their tables and metrics.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        #[non_exhaustive]
        pub enum LimiterName {
            $($(#[$doc])* $variant = $index,)*
        }

        impl LimiterName {
            /// How many limiters there are: the length of every per-limiter table.
            pub const COUNT: usize = [$($index),*].len();

            /// Every limiter, in the order of their tables and metrics.
            pub const ALL: [LimiterName; LimiterName::COUNT] = [$(LimiterName::$variant),*];

            /// The label value and admin API name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(LimiterName::$variant => stringify!($name),)*
                }
            }

            /// Its mode in `l`.
            #[inline]
            pub(crate) fn mode(self, l: &LimitersConfig) -> Mode {
                match self {
                    $(LimiterName::$variant => l.$name.mode,)*
                }
            }

            /// The most it asks of the keyed store for one request under `l`.
            #[cfg(test)]
            pub(crate) fn asks_at_most(self, l: &LimitersConfig) -> AskSize {
                match self {
                    $(LimiterName::$variant => <$unit as Limiter>::asks_at_most(&l.$name),)*
                }
            }

            /// Sets its mode in `l`.
            pub(crate) fn set_mode(self, l: &mut LimitersConfig, mode: Mode) {
                match self {
                    $(LimiterName::$variant => l.$name.mode = mode,)*
                }
            }

            /// Its `i`-th table of per-key state: ids are handed out in the list's order, so
            /// each limiter's are its own (request_rate: its buckets, then a window per
            /// quota; concurrent_requests: its permits; fleet_usage: its pool of slots).
            ///
            /// # Panics
            /// When it keeps fewer than `i + 1` tables.
            #[inline]
            pub const fn table(self, i: u8) -> Table {
                let counts = [$(<$unit as Limiter>::TABLES),*];
                assert!(i < counts[self as usize], "a limiter's table beyond its TABLES");
                let mut first = 0;
                let mut l = 0;
                while l < self as usize {
                    first += counts[l];
                    l += 1;
                }
                Table::new(first + i)
            }

            /// Whether its tables count client keys ([`Limiter::TRACKS_KEYS`]).
            pub(crate) const fn tracks_keys(self) -> bool {
                match self {
                    $(LimiterName::$variant => <$unit as Limiter>::TRACKS_KEYS,)*
                }
            }

            /// Its tables of per-key state (all it may keep, whether or not it keeps them
            /// under the settings).
            pub fn tables(self) -> impl Iterator<Item = Table> {
                let n = match self {
                    $(LimiterName::$variant => <$unit as Limiter>::TABLES,)*
                };
                (0..n).map(move |i| self.table(i))
            }

            /// The title and detail of its refusal `r`.
            pub(crate) fn problem(self, r: &Rejection, policy: Option<&str>, wait: &str) -> Problem {
                match self {
                    $(LimiterName::$variant => <$unit>::problem(r, policy, wait),)*
                }
            }
        }

        // Each unit names itself as the list does.
        $(
            const _: () = assert!(matches!(<$unit as Limiter>::NAME, LimiterName::$variant));
        )*
    };
}

limiter_list!(limiters);

// Every limiter in the list can open a group in a request's ask (`store::Ask` finds a
// limiter's group by its index).
const _: () = assert!(LimiterName::COUNT <= crate::store::MAX_OWNERS);

impl MemoryStore {
    /// The store `limiters` asks for: each keyed limiter's tables sized by its own settings
    /// (request_rate: `max_keys` buckets, and as many windows per quota; concurrent_requests:
    /// `max_keys` keys with requests in flight). Each table is allocated once, here.
    pub fn for_limiters(limiters: &LimitersConfig) -> Self {
        Self::with_tables(&limiters.tables())
    }
}

impl LimiterName {
    /// Looks a limiter up by its name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// Every limiter's name, comma-separated (for messages that list them).
    pub fn names() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }
}

/// The request as every limiter sees it: classified once, read by each of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// Its tier.
    pub tier: Tier,
    /// The hash of its client key.
    pub key: u64,
    /// The hash of its client IP (equal to `key` when nothing needs the IP apart).
    pub ip: u64,
    /// HTTP method.
    pub method: &'a str,
    /// The path the router matches on.
    pub path: &'a str,
    /// The request-rate plan named by the app, if any.
    pub plan: Option<&'a str>,
    /// A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`.
    pub preflight: bool,
    /// request_rate has charged it already: it waited for its turn (`excess: delay`), and
    /// the other limiters decide it now.
    pub paid: bool,
}

impl<'a> Request<'a> {
    /// The request classified as `c` from `facts` (their method, path and preflight, read
    /// once for both), under the app's `plan`.
    #[inline(always)]
    pub(crate) fn classified(
        c: &crate::classify::Classified,
        facts: &crate::classify::RequestFacts<'a>,
        plan: Option<&'a str>,
    ) -> Self {
        Request {
            tier: c.tier,
            key: c.key,
            ip: c.ip,
            method: facts.method,
            path: facts.path,
            plan,
            preflight: facts.preflight,
            paid: false,
        }
    }

    /// Whether the per-client limiters (request_rate, concurrent_requests) count it. A CORS
    /// preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`), which a
    /// browser sends on its own before the app's request, spends none of the client's quota
    /// and holds none of its slots unless `charge_preflights`
    /// (`classifier.charge_preflights`); any other `OPTIONS` is charged like any request. The
    /// limiters that protect the server (fleet_usage, worker_utilization,
    /// adaptive_concurrency) always see it.
    pub fn per_client(&self, charge_preflights: bool) -> bool {
        charge_preflights || !self.preflight
    }
}

/// Every limiter's answer: allowed, holding `H` until the request is done (a permit, what was
/// charged), or rejected, with `R` for the answer (the RateLimit fields' reading).
#[derive(Debug, PartialEq)]
pub(crate) enum Check<H = (), R = ()> {
    /// Go on; keep `H` while the request runs (dropping it gives back what it holds).
    Allowed(H),
    /// Stop here.
    Rejected(Rejection, R),
}

/// The status a rejection answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectStatus {
    /// 429: this client is over one of its limits.
    TooManyRequests,
    /// 503: the server is protecting itself.
    ServiceUnavailable,
}

impl RejectStatus {
    /// The HTTP status code.
    pub const fn as_u16(self) -> u16 {
        match self {
            RejectStatus::TooManyRequests => 429,
            RejectStatus::ServiceUnavailable => 503,
        }
    }
}

/// A limiter's "no": an ordinary value that says when to come back.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Rejection {
    /// Who said no.
    pub limiter: LimiterName,
    /// The request's tier.
    pub tier: Tier,
    /// 429 (this user is over a limit) or 503 (the server is protecting itself).
    pub status: RejectStatus,
    /// When a retry may succeed.
    pub retry_after: Duration,
    /// For a request-rate rejection by something other than the client's bucket: the per-IP
    /// ceiling or a quota.
    pub policy: Option<RatePolicy>,
}

/// A request-rate policy other than the client's own bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RatePolicy {
    /// The per-IP ceiling (`request_rate.per_ip`).
    PerIp,
    /// The quota at this index of `request_rate.quotas`.
    Quota(u8),
}

/// Why a limiter could not decide; the request is let through (fail open).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum LimiterError {
    /// The controller has not published a plan for too long (it died, or its source fails).
    #[error("the shed plan is {age:?} old")]
    StalePlan {
        /// How old the plan is.
        age: Duration,
    },
    /// The store could not answer.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl LimiterError {
    /// The `reason` label of `brownout_fail_open_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            LimiterError::StalePlan { .. } => "stale_plan",
            LimiterError::Store(e) => e.reason(),
        }
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
