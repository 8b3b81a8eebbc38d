//! Reading a client's per-client limits without spending them (`Brownout::peek`, and the admin
//! API's `GET /v1/clients/{key}`).

use super::Brownout;
use crate::classify::RequestFacts;
use crate::config::Mode;
use crate::limiter::request_rate::{Quota, QuotaKey};
use crate::math::window::WindowCheck;
use crate::store::{ClientReading, Op, StoreError, Table};
use serde::Serialize;

/// A client's per-client limits as they stand, read without spending any of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ClientState {
    /// request_rate's bucket (`None` while request_rate is off).
    pub request_rate: Option<BucketState>,
    /// concurrent_requests (`None` while it is off).
    pub concurrent_requests: Option<InFlightState>,
    /// request_rate's quotas counted per client (`key: client`), in config order (none while
    /// request_rate is off).
    pub quotas: Vec<QuotaState>,
}

/// A quota of the client's, as the `RateLimit` field would report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QuotaState {
    /// The quota's name.
    pub name: String,
    /// Most requests per window.
    pub limit: u32,
    /// Requests left now.
    pub remaining: u32,
    /// Seconds until the count goes down: a counter's window ends (even with nothing counted),
    /// a sliding log's oldest event leaves (0 with none).
    pub reset_seconds: u32,
}

impl QuotaState {
    fn of(quota: &Quota, check: WindowCheck) -> Self {
        Self {
            name: quota.name.clone(),
            limit: quota.rule.limit,
            remaining: check.remaining,
            reset_seconds: u32::try_from(check.reset.div_ceil(1_000_000)).unwrap_or(u32::MAX),
        }
    }
}

/// request_rate's quotas counted per client, with their tables.
fn client_quotas(settings: &crate::engine::Settings) -> impl Iterator<Item = (&Quota, Table)> {
    let on = settings.limiters.request_rate.mode != Mode::Off;
    let quotas = settings.rules.quotas.iter().enumerate();
    quotas
        .filter(move |(_, q)| on && q.key == QuotaKey::Client)
        .map(|(i, q)| (q, crate::limiter::request_rate::quota_table(i)))
}

/// A request_rate bucket, as the `RateLimit` field would report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BucketState {
    /// The plan the bucket is under.
    pub plan: String,
    /// Credits the bucket holds when full.
    pub burst: u32,
    /// Credits left now.
    pub remaining: u32,
    /// Seconds until the bucket is full again (0: it is).
    pub full_in_seconds: u32,
}

/// A client's requests in flight against concurrent_requests' limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct InFlightState {
    /// Requests of this client in flight now.
    pub in_flight: u64,
    /// The most it may have.
    pub max_in_flight: u32,
}

impl Brownout {
    /// The per-client limits of the client `facts` name (its API key, the app's client key, or
    /// its IP), under `plan`, read without spending a credit or taking a slot: what a
    /// dashboard, a support tool or a "how much do I have left" endpoint shows.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read without spending: in fleet mode with
    /// `store.sync: per_request` the state lives in Redis, which only the async
    /// [`read_client`](Self::read_client) reads (with `local_first` this reads this instance's
    /// reconciled view).
    ///
    /// # Examples
    /// ```
    /// use brownout::classify::RequestFacts;
    /// use brownout::{Brownout, Config};
    ///
    /// let brownout = Brownout::builder(Config::builder().rate_limit(0.001, 10).build()?).build()?;
    /// let facts = RequestFacts::new("GET", "/v1/items").with_authorization(b"Bearer sk_live_42");
    /// let _held = brownout.check(&facts, None);
    /// let state = brownout.peek(&facts, None)?;
    /// assert_eq!(state.request_rate.unwrap().remaining, 9);
    /// assert_eq!(brownout.peek(&facts, None)?, brownout.peek(&facts, None)?, "a peek spends nothing");
    /// # Ok::<(), brownout::Report>(())
    /// ```
    pub fn peek(
        &self,
        facts: &RequestFacts<'_>,
        plan: Option<&str>,
    ) -> Result<ClientState, StoreError> {
        let engine = &self.inner.engine;
        if engine.keyed().reads_shared() {
            return Err(StoreError::Failed(
                "in fleet mode with store.sync: per_request a client's limits live in Redis: \
                 read them with Brownout::read_client"
                    .into(),
            ));
        }
        let settings = engine.settings().load();
        let key = settings.classifier.classify(facts).key;
        let store = engine.keyed().local();
        let bucket = store.peek(crate::limiter::request_rate::BUCKETS, key)?;
        let (tat, stamp) = bucket.map_or((0, 0), crate::math::gcra::unpack);
        let reading = ClientReading {
            tat: (tat != 0).then_some(tat),
            step: crate::math::gcra::step_of(stamp).filter(|_| stamp != 0),
            in_flight: (store.peek(crate::limiter::concurrent_requests::PERMITS, key)?)
                .unwrap_or(0),
        };
        let at = engine.check_time(engine.clock().now());
        let mut quotas = Vec::new();
        for (quota, table) in client_quotas(&settings) {
            let check = store.window(table, key, at.unix, &quota.rule, false)?;
            quotas.push(QuotaState::of(quota, check));
        }
        let elastic = crate::engine::elastic(&settings, &engine.plan().load());
        Ok(state(&settings, (plan, elastic), reading, at.mono, quotas))
    }

    /// Like [`peek`](Self::peek), and in fleet mode with `store.sync: per_request` reads the
    /// client's state from Redis (one round trip, within `store.timeout`).
    ///
    /// # Errors
    /// [`StoreError`] when Redis does not answer in time or fails.
    pub async fn read_client(
        &self,
        facts: &RequestFacts<'_>,
        plan: Option<&str>,
    ) -> Result<ClientState, StoreError> {
        let engine = &self.inner.engine;
        if engine.keyed().reads_shared() {
            let settings = engine.settings().load_full();
            let key = settings.classifier.classify(facts).key;
            let (now, reading) = engine.keyed().read_shared(key).await?;
            let mut quotas = Vec::new();
            for (quota, table) in client_quotas(&settings) {
                let rule = quota.rule;
                let op = Op::Window {
                    table,
                    key,
                    rule,
                    count: false,
                };
                quotas.push(QuotaState::of(
                    quota,
                    engine.keyed().check_shared(op).await?,
                ));
            }
            let elastic = crate::engine::elastic(&settings, &engine.plan().load());
            return Ok(state(&settings, (plan, elastic), reading, now, quotas));
        }
        self.peek(facts, plan)
    }
}

/// What `reading` (taken at `now` µs, on the clock its TAT is in) means under `settings`,
/// for `plan`'s bucket as a request now would be charged in it (widened by `elastic_factor`
/// while the server has room to spare, as the `RateLimit` fields say).
fn state(
    settings: &crate::engine::Settings,
    (plan, elastic): (Option<&str>, bool),
    reading: ClientReading,
    now: u64,
    quotas: Vec<QuotaState>,
) -> ClientState {
    let l = &settings.limiters;
    let request_rate = (l.request_rate.mode != Mode::Off).then(|| {
        let index = settings.rules.plan(plan);
        let bucket = settings.rules.bucket(index, elastic);
        // As the next request would read it: carried if a bucket of another rate wrote it.
        let tat = reading.tat.map_or(0, |t| {
            bucket.carry(t, now, reading.step.unwrap_or(bucket.step()))
        });
        BucketState {
            plan: settings.rules.plan_at(index).name.clone(),
            burst: bucket.burst as u32,
            remaining: u32::try_from(bucket.remaining(tat, now)).unwrap_or(u32::MAX),
            full_in_seconds: u32::try_from(tat.saturating_sub(now).div_ceil(1_000_000))
                .unwrap_or(u32::MAX),
        }
    });
    let cr = &l.concurrent_requests;
    let concurrent_requests = (cr.mode != Mode::Off).then_some(InFlightState {
        in_flight: reading.in_flight,
        max_in_flight: cr.max_in_flight,
    });
    ClientState {
        request_rate,
        concurrent_requests,
        quotas,
    }
}
