//! `brownout bench redis`: what fleet mode costs. One process decides against a loopback
//! Redis (its own redis-server, or `--url`) at several concurrency levels: decisions per second
//! and the latency each adds (p50/p99), beside a plain pipelined `INCR`+`EXPIRE` rate counter
//! in the same run (the cheapest shared counter there is, with none of the script's logic);
//! then the same decisions while Redis is down and the breaker is open, beside the in-memory
//! store's decision.

use brownout::classify::RequestFacts;
use brownout::clock::{Clock, SystemClock};
use brownout::config::{HumanDuration, StoreConfig, StoreKind, StoreSync};
use brownout::limiter::gcra::Bucket;
use brownout::limiter::LimiterName::RequestRate as BUCKETS;
use brownout::limiter::LimiterName::{ConcurrentRequests as PERMITS, FleetUsage as FLEET};
use brownout::store::redis::{RedisStore, SlotSet, Undo};
use brownout::store::{Ask, MemoryStore, Op, Store};
use brownout::{Brownout, Config, Mode};
use clap::Args;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct RedisArgs {
    /// A Redis to measure against (default: start redis-server on a free loopback port).
    #[arg(long, conflicts_with = "nodes")]
    url: Option<String>,
    /// A Redis Cluster's seed nodes to measure against instead (comma-separated URLs).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    /// Concurrent requests, one run each.
    #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Decisions per run.
    #[arg(long, default_value_t = 100_000)]
    decisions: usize,
}

/// The bench's clock (real time).
static CLOCK: std::sync::LazyLock<SystemClock> = std::sync::LazyLock::new(SystemClock::new);

/// Latencies of one run, in µs, and its throughput.
struct Run {
    per_second: f64,
    p50: f64,
    p99: f64,
}

impl Run {
    fn from(mut latencies: Vec<f64>, elapsed: Duration) -> Self {
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        Self {
            per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
        }
    }
}

/// One request's ask, every group enforced: a client's bucket, its permit and a fleet slot.
fn ask(client: u64) -> Ask {
    let bucket = Bucket::new(1_000.0, 1_000.0, 0.0);
    let mut ask = Ask::default();
    ask.begin(BUCKETS as u8, true, 0);
    ask.push(Op::Gcra {
        table: BUCKETS.table(0),
        key: client,
        tag: client,
        charge: bucket.charging(1),
    });
    ask.begin(PERMITS as u8, true, 0);
    ask.push(Op::Slot {
        table: PERMITS.table(0),
        key: client,
        max: 100,
    });
    ask.begin(FLEET as u8, true, 0);
    ask.push(Op::Slot {
        table: FLEET.table(0),
        key: 0,
        max: 1_000_000,
    });
    ask
}

/// `decisions` decisions from `concurrency` tasks; each gives its slots back, as requests do.
async fn scripted(store: &Arc<RedisStore>, concurrency: usize, decisions: usize) -> Run {
    timed(
        concurrency,
        decisions,
        store.clone(),
        |store, n| async move {
            let client = n % 10_000;
            let ask = ask(client);
            if let Ok(answer) = store.answer(&ask).await {
                for op in ask.ops() {
                    if let Op::Slot { table, key, .. } = *op {
                        let member = answer.member;
                        store.undo(Undo::Release {
                            set: SlotSet { table, key },
                            member,
                        });
                    }
                }
            }
            store
        },
    )
    .await
}

/// `decisions` calls from `concurrency` tasks, each call timed: `call(state, n)` makes call
/// `n` with its task's copy of `state` and gives it back.
async fn timed<S, F, Fut>(concurrency: usize, decisions: usize, state: S, call: F) -> Run
where
    S: Clone + Send + 'static,
    F: Fn(S, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = S> + Send,
{
    let per_task = decisions / concurrency;
    let started = CLOCK.now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|t| {
            let (mut state, call) = (state.clone(), call.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_task);
                for i in 0..per_task {
                    let begun = CLOCK.now();
                    state = call(state, (t * per_task + i) as u64).await;
                    latencies.push((CLOCK.now() - begun).as_secs_f64() * 1e6);
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::with_capacity(decisions);
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    Run::from(all, CLOCK.now() - started)
}

/// The same load as a pipelined `INCR`+`EXPIRE` per request (one round trip), and as the
/// smallest GCRA script there is (`MINIMAL_GCRA`).
async fn baseline(
    url: &str,
    concurrency: usize,
    decisions: usize,
) -> redis::RedisResult<(Run, Run)> {
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    Ok((
        counters(conn.clone(), concurrency, decisions).await,
        minimal_gcra(conn, concurrency, decisions).await,
    ))
}

/// One bucket on Redis's clock and nothing else: TIME, GET the bucket's theoretical arrival
/// time, SET the new one with its expiry (refused: nothing written). What a decision of
/// brownout's script is measured against: it keeps the same clock and TTLs and adds permits,
/// the fleet slot, quotas and modes.
const MINIMAL_GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local inc, tol = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0') or 0, now) + inc
if tat - now > tol then return 0 end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1)
return 1
";

async fn minimal_gcra<C>(conn: C, concurrency: usize, decisions: usize) -> Run
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let script = redis::Script::new(MINIMAL_GCRA);
    let bucket = Bucket::new(1_000.0, 1_000.0, 0.0);
    let (inc, tol) = (bucket.increment(1), bucket.tolerance());
    timed(
        concurrency,
        decisions,
        (conn, script),
        move |(mut conn, script), n| async move {
            let key = format!("gcra:{{{:016x}}}", n % 10_000);
            let _: redis::RedisResult<i64> = script
                .key(&key)
                .arg(inc)
                .arg(tol)
                .invoke_async(&mut conn)
                .await;
            (conn, script)
        },
    )
    .await
}

/// [`baseline`] on a Cluster (both commands of a request go to its key's node).
async fn baseline_cluster(
    nodes: &[String],
    concurrency: usize,
    decisions: usize,
) -> redis::RedisResult<(Run, Run)> {
    let conn = redis::cluster::ClusterClient::new(nodes.to_vec())?
        .get_async_connection()
        .await?;
    Ok((
        counters(conn.clone(), concurrency, decisions).await,
        minimal_gcra(conn, concurrency, decisions).await,
    ))
}

async fn counters<C>(conn: C, concurrency: usize, decisions: usize) -> Run
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    timed(concurrency, decisions, conn, |mut conn, n| async move {
        let key = format!("baseline:{{{:016x}}}", n % 10_000);
        let _: redis::RedisResult<(i64, i64)> = redis::pipe()
            .cmd("INCR")
            .arg(&key)
            .cmd("EXPIRE")
            .arg(&key)
            .arg(60)
            .query_async(&mut conn)
            .await;
        conn
    })
    .await
}

/// redis-server on a free loopback port, stopped when dropped.
struct Server(Child, u16);

impl Server {
    fn start() -> std::io::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()?;
        let deadline = CLOCK.now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if CLOCK.now() > deadline {
                return Err(std::io::Error::other("redis-server did not start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self(child, port))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn connected(config: &StoreConfig) -> Arc<RedisStore> {
    let store = Arc::new(
        RedisStore::new(
            config,
            &brownout::config::LimitersConfig::default().tables(),
            1,
            Arc::new(brownout::clock::SystemClock::new()),
        )
        .expect("a valid store config"),
    );
    store.start(Arc::new(|_| {}));
    let deadline = CLOCK.now() + Duration::from_secs(10);
    while !store.connected() && CLOCK.now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store
}

/// ns per call of `f`, over `n` calls.
fn ns_per_call(n: u32, mut f: impl FnMut(u64)) -> f64 {
    let begun = CLOCK.now();
    for i in 0..n {
        f(u64::from(i % 10_000));
    }
    (CLOCK.now() - begun).as_nanos() as f64 / f64::from(n)
}

async fn measure(args: RedisArgs) -> Result<(), String> {
    let mut own = match (&args.url, args.nodes.is_empty()) {
        (None, true) => Some(Server::start().map_err(|e| format!("starting redis-server: {e}"))?),
        _ => None,
    };
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| format!("redis://127.0.0.1:{}/", own.as_ref().map_or(6379, |s| s.1)));
    let cluster = !args.nodes.is_empty();
    let mut config = StoreConfig::default();
    config.kind = StoreKind::Redis;
    config.url = (!cluster).then(|| url.clone());
    config.nodes = args.nodes.clone();
    config.timeout = HumanDuration::from_millis(100);
    config.key_prefix = "brownout-bench:".into();
    let store = connected(&config).await;
    if !store.connected() {
        return Err(format!("cannot connect to {url}"));
    }
    let at = if cluster {
        format!("the Cluster at {}", args.nodes.join(","))
    } else {
        url.clone()
    };
    println!("Redis at {at}; {} decisions per run\n", args.decisions);
    println!(
        "| concurrency | brownout decisions/s | p50 | p99 | minimal GCRA script decisions/s | p50 | p99 | brownout ÷ GCRA | INCR+EXPIRE ops/s | p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for &c in &args.concurrency {
        let c = c.max(1);
        let s = scripted(&store, c, args.decisions).await;
        let (b, g) = if cluster {
            baseline_cluster(&args.nodes, c, args.decisions).await
        } else {
            baseline(&url, c, args.decisions).await
        }
        .map_err(|e| format!("baseline: {e}"))?;
        println!(
            "| {c} | {:.0} | {:.0} µs | {:.0} µs | {:.0} | {:.0} µs | {:.0} µs | {:.2} | {:.0} | {:.0} µs | {:.0} µs |",
            s.per_second,
            s.p50,
            s.p99,
            g.per_second,
            g.p50,
            g.p99,
            s.per_second / g.per_second,
            b.per_second,
            b.p50,
            b.p99
        );
    }
    let (hybrid, memory) = local_first(&config).await?;
    println!(
        "\nstore.sync local_first: {hybrid:.0} decisions/s on one thread (Brownout::check, \
         request_rate enforced, 1,000 clients; rounds with Redis every 100 ms running \
         meanwhile), beside {memory:.0} with the in-memory store ({:.2}×)",
        hybrid / memory
    );
    if let Some(server) = own.take() {
        // The outage: Redis gone; a few failed calls open the breaker.
        drop(server);
        for _ in 0..20 {
            let _ = store.answer(&ask(1)).await;
        }
        let open = store.breaker_state();
        let n = 1_000_000u32;
        let mut ready = 0u32;
        let skipped = ns_per_call(n, |_| {
            ready += u32::from(std::hint::black_box(store.ready()))
        });
        let mut sizes = brownout::config::LimitersConfig::default();
        sizes.request_rate.max_keys = 100_000;
        sizes.concurrent_requests.max_keys = 100_000;
        let memory = MemoryStore::for_limiters(&sizes);
        let bucket = Bucket::new(1_000.0, 1_000.0, 0.0);
        let local = ns_per_call(n, |key| {
            let (buckets, permits) = (BUCKETS.table(0), PERMITS.table(0));
            let _ = memory.gcra(buckets, key, 0, bucket.charging(1));
            if memory.slot_take(permits, key, 100) == Ok(true) {
                memory.slot_give(permits, key);
            }
        });
        println!(
            "\nRedis down, breaker {}: {skipped:.1} ns added per request (asking whether to call \
             Redis; {ready} of {n} said yes), beside {local:.0} ns for the in-memory store's \
             bucket and permit that then decide ({:.2}×)",
            open.as_str(),
            skipped / local
        );
    }
    Ok(())
}

/// Decisions per second on one thread with `store.sync: local_first` on `store`, and with
/// the in-memory store.
async fn local_first(store: &StoreConfig) -> Result<(f64, f64), String> {
    let config = |sync: Option<StoreSync>| {
        let mut c = Config::default();
        c.limiters.worker_utilization.mode = Mode::Off;
        let rr = &mut c.limiters.request_rate;
        rr.mode = Mode::Enforce;
        rr.rate = 1e6;
        rr.burst = 1_000_000;
        if let Some(sync) = sync {
            c.store = store.clone();
            c.store.sync = sync;
        }
        c
    };
    let mut rates = Vec::new();
    for sync in [Some(StoreSync::LocalFirst), None] {
        let brownout = Brownout::builder(config(sync))
            .admin_token("bench")
            .build()
            .map_err(|e| e.to_string())?;
        brownout.start().map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // On a blocking thread: the runtime's workers keep running the rounds meanwhile.
        let rate = tokio::task::spawn_blocking(move || {
            let keys: Vec<String> = (0..1_000).map(|i| format!("Bearer sk_live_{i}")).collect();
            let begun = CLOCK.now();
            let mut n = 0usize;
            while CLOCK.now() - begun < Duration::from_secs(1) {
                for key in keys.iter().cycle().skip(n % 1_000).take(10_000) {
                    let facts =
                        RequestFacts::new("GET", "/v1/items").with_authorization(key.as_bytes());
                    std::hint::black_box(brownout.check(&facts, None));
                }
                n += 10_000;
            }
            n as f64 / (CLOCK.now() - begun).as_secs_f64()
        })
        .await
        .map_err(|e| e.to_string())?;
        rates.push(rate);
    }
    Ok((rates[0], rates[1]))
}

pub fn run(args: RedisArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench redis: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(measure(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench redis: {e}");
            ExitCode::FAILURE
        }
    }
}
