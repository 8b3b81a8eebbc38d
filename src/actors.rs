//! The actors that keep the engine up to date: a sampler that reads the sources every
//! `sample_interval`, a controller that turns samples into a published [`ShedPlan`], an evictor
//! that drops idle keyed state, the operator that applies admin changes, and the SIGHUP
//! listener. They own their state and talk through bounded mailboxes; the engine reads what
//! they publish through `ArcSwap` and atomics, without locks.

use crate::config::Mode;
use crate::control::{combine, with_shed, Controller, ShedPlan, UtilizationSource, OBSERVE_EVERY};
use crate::engine::Engine;
use crate::limiter::adaptive_concurrency::{self, micros};
use crate::limiter::LimiterName;
use crate::math::adaptive::AdaptiveLimit;
use crate::math::capacity::{lane_on, lane_waits, CapacityEstimate};
use crate::math::critical::CeilingBase;
use crate::ops::OperatorSetup;
use std::panic::{catch_unwind, AssertUnwindSafe};

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Messages to the sampler.
pub(crate) enum SamplerMsg {
    /// Sample now and reply with the plan that results.
    SampleNow(oneshot::Sender<ShedPlan>),
}

/// Messages to the controller.
struct Sample {
    /// The sources' reading (not capped at 1) and the demand with what the controller shed
    /// added back; `None` when no source could answer: the plan is left to go stale.
    reading: Option<(f64, f64)>,
    at: Duration,
    reply: Option<oneshot::Sender<ShedPlan>>,
}

/// The running actors; dropping the shutdown sender stops them.
pub(crate) struct Actors {
    pub(crate) sampler: mpsc::Sender<SamplerMsg>,
    pub(crate) operator: mpsc::Sender<crate::ops::OpsMsg>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Actors {
    /// Asks every actor to stop and waits until they have.
    pub(crate) async fn stop(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Spawns the sampler, the controller, the evictor, the operator and (with `reload`: the file
/// to read again) the SIGHUP listener on the current tokio runtime.
pub(crate) fn spawn(
    engine: Arc<Engine>,
    sources: Vec<Box<dyn UtilizationSource>>,
    ops: OperatorSetup,
    reload: Option<Option<crate::ops::ConfigFile>>,
) -> Actors {
    let (sampler_tx, sampler_rx) = mpsc::channel(8);
    let (controller_tx, controller_rx) = mpsc::channel(8);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (operator, operator_task) = crate::ops::spawn(ops, shutdown_rx.clone());
    let mut tasks = vec![
        operator_task,
        // Like the controller's, the first window starts now.
        tokio::spawn(sampler(
            engine.clone(),
            sources,
            Adaptive::new(&engine),
            sampler_rx,
            controller_tx,
            shutdown_rx.clone(),
        )),
        tokio::spawn(evictor(engine.clone(), shutdown_rx.clone())),
        // The controller's clock starts now, not whenever its task is first polled.
        tokio::spawn(controller(
            engine.clone(),
            new_controller(&engine),
            controller_rx,
        )),
    ];
    #[cfg(unix)]
    if let Some(file) = reload {
        tasks.extend(crate::ops::spawn_reloader(
            file,
            operator.clone(),
            shutdown_rx.clone(),
        ));
    }
    #[cfg(not(unix))]
    let _ = reload;
    Actors {
        sampler: sampler_tx,
        operator,
        shutdown,
        tasks,
    }
}

fn interval_of(engine: &Engine) -> Duration {
    engine
        .settings()
        .load()
        .limiters
        .worker_utilization
        .sample_interval
        .get()
}

fn ticker(period: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

async fn sampler(
    engine: Arc<Engine>,
    mut sources: Vec<Box<dyn UtilizationSource>>,
    mut adaptive: Adaptive,
    mut mailbox: mpsc::Receiver<SamplerMsg>,
    controller: mpsc::Sender<Sample>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut period = interval_of(&engine);
    let mut tick = ticker(period);
    // Between samples the sources take readings to average over the interval, and
    // adaptive_concurrency learns its limit window by window.
    let mut observe = ticker(OBSERVE_EVERY);
    let mut changes = engine.settings().subscribe();
    let mut traffic = engine.metrics().traffic();
    loop {
        let reply = tokio::select! {
            _ = observe.tick() => {
                observe_all(&engine, &mut sources);
                adaptive.tick(&engine);
                continue;
            }
            _ = tick.tick() => None,
            msg = mailbox.recv() => match msg {
                Some(SamplerMsg::SampleNow(reply)) => Some(reply),
                None => break,
            },
            // A new interval counts from the moment it is applied, not from the last tick.
            _ = changes.changed() => {
                rearm(&mut period, &mut tick, interval_of(&engine));
                continue;
            }
            _ = shutdown.changed() => break,
        };
        let at = engine.clock().now();
        let input = sample_all(&engine, &mut sources, at);
        let counts = engine.metrics().traffic();
        let interval = counts.since(std::mem::replace(&mut traffic, counts));
        let service = engine
            .tier_service_times()
            .map(|s| s.map(|s| s.as_secs_f64()));
        let reading = input.map(|u| (u, with_shed(u, interval, service)));
        let sample = Sample { reading, at, reply };
        if controller.send(sample).await.is_err() {
            break;
        }
        // The interval is a live setting.
        rearm(&mut period, &mut tick, interval_of(&engine));
    }
}

/// Restarts `tick` with period `wanted` if it changed.
fn rearm(period: &mut Duration, tick: &mut tokio::time::Interval, wanted: Duration) {
    if wanted != *period {
        *period = wanted;
        *tick = ticker(wanted);
    }
}

/// adaptive_concurrency's learning: the limit and the service times, the app's capacity, and
/// when the current window ends (clock time).
struct Adaptive {
    limit: AdaptiveLimit,
    capacity: CapacityEstimate,
    ceiling: CeilingBase,
    window_end: Duration,
}

impl Adaptive {
    fn new(engine: &Engine) -> Self {
        let c = &engine.settings().load().limiters.adaptive_concurrency;
        let now = engine.clock().now();
        let params = adaptive_concurrency::params(c);
        Self {
            limit: AdaptiveLimit::new(params, engine.adaptive().limit(), micros(now)),
            capacity: CapacityEstimate::default(),
            ceiling: CeilingBase::default(),
            window_end: now + c.window.get(),
        }
    }

    /// Closes the window if it is over: learns from it and publishes the new limit.
    fn tick(&mut self, engine: &Engine) {
        let now = engine.clock().now();
        if now < self.window_end {
            return;
        }
        let settings = engine.settings().load();
        let c = &settings.limiters.adaptive_concurrency;
        let period = self.limit.period(micros(c.window.get()));
        self.window_end = now + Duration::from_micros(period);
        let mut window = engine.adaptive().take_window(micros(now));
        if c.mode == Mode::Off {
            return;
        }
        // While the controller sheds, the windows are quiet because it carries the overload:
        // the limit keeps what the overload taught it (math::adaptive). While it sheds or
        // reads an overload (unless the controller is dark), the lower tiers are let in under
        // the lane (math::capacity), and once the capacity is known under the critical
        // ceiling's cap whatever the controller does.
        let plan = engine.plan().load();
        self.limit.set_hold(plan.amount > 0.0);
        let enforced = settings.limiters.worker_utilization.mode == Mode::Enforce;
        let lane = lane_on(plan.amount, plan.demand, enforced);
        let state = engine.adaptive();
        lane_waits(&mut window, state.lane(), state.limit());
        let params = adaptive_concurrency::params(c);
        let limit = self.capacity.learn(&mut self.limit, params, window);
        state.publish(limit, self.limit.service().floors());
        engine
            .adaptive()
            .publish_classes(self.limit.service().classes().map(|(c, f, _)| (c, f)));
        let known = self.capacity.known(&self.limit, c.critical_ceiling);
        let base = self.ceiling.update(&window, self.limit.learned(), known);
        engine.adaptive().publish_ceiling_base(base);
        engine.adaptive().publish_ceiling_cap(self.ceiling.cap());
        state.publish_lane(self.capacity.lane(lane, self.ceiling.in_time()));
        engine
            .adaptive()
            .publish_capacity(self.capacity.learned(), self.capacity.at_least());
        let pinned = settings.limiters.worker_utilization.capacity.map(f64::from);
        engine.metrics().publish_capacity(
            pinned.or(self.capacity.learned()),
            engine.adaptive().floors(),
        );
        engine
            .metrics()
            .publish_routes(engine.adaptive().class_floors());
        // A limit grown lets waiting requests in now, not at the next slot given back.
        engine.adaptive().dispatch(now);
        let waiting = engine.adaptive().waiting();
        let critical_share = engine.adaptive().settle_critical();
        engine
            .metrics()
            .publish_concurrency_limit(limit, waiting, critical_share);
    }
}

/// Lets every source take a reading between samples; one that panics is counted and logged.
fn observe_all(engine: &Engine, sources: &mut [Box<dyn UtilizationSource>]) {
    let at = engine.clock().now();
    for source in sources {
        if catch_unwind(AssertUnwindSafe(|| source.observe(at))).is_err() {
            engine.fail_open(
                LimiterName::WorkerUtilization.as_str(),
                "source_panic",
                || {
                    format!(
                        "utilization source {} panicked taking a reading",
                        source.name()
                    )
                },
            );
        }
    }
}

/// Reads every source; a source that errors or panics is counted, logged and skipped.
fn sample_all(
    engine: &Engine,
    sources: &mut [Box<dyn UtilizationSource>],
    at: Duration,
) -> Option<f64> {
    let answers = sources.iter_mut().filter_map(|source| {
        let result = catch_unwind(AssertUnwindSafe(|| source.sample(at)));
        let problem = match result {
            Ok(Ok(u)) if u.is_finite() => return Some(u),
            Ok(Ok(u)) => ("source_error", format!("returned {u}")),
            Ok(Err(e)) => ("source_error", e.to_string()),
            Err(_) => ("source_panic", "panicked".to_owned()),
        };
        engine.fail_open(LimiterName::WorkerUtilization.as_str(), problem.0, || {
            format!("utilization source {} {}", source.name(), problem.1)
        });
        None
    });
    combine(answers.collect::<Vec<_>>())
}

fn new_controller(engine: &Engine) -> Controller {
    let params = engine
        .settings()
        .load()
        .limiters
        .worker_utilization
        .controller();
    Controller::new(params, engine.clock().now())
}

async fn controller(engine: Arc<Engine>, mut state: Controller, mut inbox: mpsc::Receiver<Sample>) {
    while let Some(sample) = inbox.recv().await {
        let plan = step(&engine, &mut state, sample.reading, sample.at);
        if let Some(reply) = sample.reply {
            let _ = reply.send(plan);
        }
    }
}

/// One control step: update the amount and publish the plan (live thresholds apply at once).
/// The controller reads the sources' reading capped at 1, as Stripe's does; the plan keeps it
/// and the whole demand (with what the controller shed added back).
fn step(
    engine: &Engine,
    state: &mut Controller,
    reading: Option<(f64, f64)>,
    at: Duration,
) -> ShedPlan {
    let settings = engine.settings().load();
    let config = &settings.limiters.worker_utilization;
    let params = config.controller();
    if params != state.params() {
        state.set_params(params);
    }
    // Turned off (now or since the last step): the controller starts again from rest, so
    // that turning it back on does not bring back the shedding of an overload long gone.
    if engine.plan().take_rest() || config.mode == Mode::Off {
        *state = Controller::new(params, at);
    }
    let previous = engine.plan().load();
    let Some((input, demand)) = reading else {
        return previous;
    };
    // A reading that is not a number (a custom gauge's NaN, say) puts the controller at
    // rest, logged once until the readings are numbers again.
    let readable = input.is_finite() && demand.is_finite();
    let (utilization, demand) = if readable {
        (input.min(1.0), demand)
    } else {
        (0.0, 0.0)
    };
    let was_faulted = state.faulted();
    let amount = state.update(if readable { utilization } else { f64::NAN }, at);
    if state.faulted() && !was_faulted {
        tracing::error!(
            input,
            demand,
            "worker_utilization: the reading or the controller's amount is not a finite number; the controller is back at rest until it is"
        );
    }
    let plan = ShedPlan {
        utilization,
        demand,
        amount,
        probability: config.probabilities(amount),
        at,
        samples: previous.samples + 1,
    };
    if plan.probability != previous.probability {
        tracing::info!(
            utilization,
            amount,
            test = plan.probability.test,
            get = plan.probability.get,
            post = plan.probability.post,
            critical = plan.probability.critical,
            "shed plan changed"
        );
    }
    engine.plan().store(&plan);
    engine.metrics().publish_plan(&plan);
    plan
}

fn eviction_interval_of(engine: &Engine) -> Duration {
    engine
        .settings()
        .load()
        .limiters
        .request_rate
        .eviction_interval
        .get()
}

/// Drops idle keyed state every `eviction_interval`: a full bucket is the same as no bucket,
/// so memory follows the keys that are actually limited, not every key ever seen.
async fn evictor(engine: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    let mut period = eviction_interval_of(&engine);
    let mut tick = ticker(period);
    let mut changes = engine.settings().subscribe();
    loop {
        tokio::select! {
            _ = tick.tick() => engine.evict_idle(),
            _ = changes.changed() => {}
            _ = shutdown.changed() => break,
        }
        rearm(&mut period, &mut tick, eviction_interval_of(&engine));
    }
}
