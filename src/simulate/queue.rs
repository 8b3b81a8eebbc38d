//! A fluid model of the protected server: `workers` slots, each holding a request for its
//! route's mean time, fed first come first served from one queue of admitted requests (each
//! tier's requests split over the routes by fixed shares). Amounts are real numbers (a flow
//! of requests, not single ones), so a run costs the same at 10 or 10,000 requests a second.

use std::collections::VecDeque;

/// Requests of each tier (in `Tier::ALL` order) that arrived in one tick.
#[derive(Debug, Clone)]
struct Chunk {
    /// When it entered the app.
    arrived: f64,
    /// How long it had waited before (in the fast guard's waiting room).
    waited: f64,
    amount: [f64; 4],
}

/// How clients and the app treat a request whose client gave up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientDeadline {
    /// Seconds after which a client stops waiting for its answer.
    pub seconds: f64,
    /// Whether the app keeps a request whose client is gone (actix-web runs its handler to the
    /// end) instead of dropping it from the queue.
    pub keep_abandoned: bool,
}

/// What one tick did, by tier.
#[derive(Debug, Default, Clone)]
pub struct Tick {
    /// Requests that started service within their client's deadline (they will succeed).
    pub succeeded: [f64; 4],
    /// Requests whose client gave up (dropped from the queue or started too late).
    pub timed_out: [f64; 4],
}

/// The server.
#[derive(Debug)]
pub struct Server {
    workers: f64,
    /// Per route: its mean time (s) and the share of each tier's requests it takes.
    routes: Vec<(f64, [f64; 4])>,
    waiting: VecDeque<Chunk>,
    /// Per route, by tier.
    running: Vec<[f64; 4]>,
}

/// Amounts below this are rounding dust.
const DUST: f64 = 1e-9;

impl Server {
    /// An idle server whose every request takes `service_time`.
    pub fn new(workers: u32, service_time: f64) -> Self {
        Self::with_routes(workers, vec![(service_time, [1.0; 4])])
    }

    /// An idle server of `routes`: each its mean time (s) and the share of each tier's
    /// requests it takes (a tier's shares sum to 1).
    pub fn with_routes(workers: u32, routes: Vec<(f64, [f64; 4])>) -> Self {
        Self {
            workers: f64::from(workers),
            running: vec![[0.0; 4]; routes.len()],
            routes,
            waiting: VecDeque::new(),
        }
    }

    /// Takes workers away or gives them back: those taken finish what they serve first.
    pub fn set_workers(&mut self, workers: f64) {
        self.workers = workers;
    }

    /// The workers serving now.
    pub fn workers(&self) -> f64 {
        self.workers
    }

    /// Requests being served.
    fn busy(&self) -> f64 {
        self.running.iter().flatten().sum()
    }

    /// Requests inside the app (waiting for a worker or being served): what the in-flight
    /// count of the middleware sees.
    pub fn in_flight(&self) -> f64 {
        let waiting: f64 = self
            .waiting
            .iter()
            .map(|c| c.amount.iter().sum::<f64>())
            .sum();
        waiting + self.busy()
    }

    /// Requests inside the app by tier (waiting for a worker or being served).
    pub fn in_flight_by_tier(&self) -> [f64; 4] {
        let mut out = [0.0; 4];
        for r in &self.running {
            for (o, a) in out.iter_mut().zip(r) {
                *o += a;
            }
        }
        for c in &self.waiting {
            for (o, a) in out.iter_mut().zip(c.amount) {
                *o += a;
            }
        }
        out
    }

    /// Advances `dt` seconds to `now`: finishes work (service time × `slowdown`), queues
    /// `admitted`, lets clients give up, and starts what the free workers can take; calls
    /// `latency(tier, amount, seconds)` for every request started, with its expected latency.
    pub fn tick(
        &mut self,
        now: f64,
        dt: f64,
        admitted: [f64; 4],
        slowdown: f64,
        deadline: Option<ClientDeadline>,
        latency: &mut impl FnMut(usize, f64, f64),
    ) -> Tick {
        self.finish(dt, slowdown);
        self.push(now, admitted, 0.0);
        self.start(now, slowdown, deadline, &mut |started: Started| {
            latency(started.tier, started.amount, started.total)
        })
    }

    /// Finishes `dt` seconds of work (each route's time × `slowdown`).
    pub fn finish(&mut self, dt: f64, slowdown: f64) {
        for (running, &(time, _)) in self.running.iter_mut().zip(&self.routes) {
            let done = (dt / (time * slowdown)).min(1.0);
            for r in running {
                *r -= *r * done;
            }
        }
    }

    /// Lets `admitted` into the app at `now`, after it `waited` seconds outside it.
    pub fn push(&mut self, now: f64, admitted: [f64; 4], waited: f64) {
        if admitted.iter().sum::<f64>() > DUST {
            self.waiting.push_back(Chunk {
                arrived: now,
                waited,
                amount: admitted,
            });
        }
    }

    /// Lets clients give up, then starts what the free workers can take; calls `started` for
    /// every amount started.
    pub fn start(
        &mut self,
        now: f64,
        slowdown: f64,
        deadline: Option<ClientDeadline>,
        started: &mut impl FnMut(Started),
    ) -> Tick {
        let mut out = Tick::default();
        if let Some(d) = deadline.filter(|d| !d.keep_abandoned) {
            while let Some(front) = self.waiting.front() {
                if now - front.arrived + front.waited < d.seconds {
                    break;
                }
                for (t, a) in front.amount.iter().enumerate() {
                    out.timed_out[t] += a;
                }
                self.waiting.pop_front();
            }
        }
        let mut free = self.workers - self.busy();
        while free > DUST {
            let Some(front) = self.waiting.front_mut() else {
                break;
            };
            let total: f64 = front.amount.iter().sum();
            let share = (free / total).min(1.0);
            for t in 0..4 {
                let amount = front.amount[t] * share;
                if amount <= 0.0 {
                    continue;
                }
                front.amount[t] -= amount;
                for (route, &(time, shares)) in self.routes.iter().enumerate() {
                    let amount = amount * shares[t];
                    if amount <= 0.0 {
                        continue;
                    }
                    self.running[route][t] += amount;
                    let service = time * slowdown;
                    let in_app = now - front.arrived + service;
                    let whole = in_app + front.waited;
                    let late = deadline.is_some_and(|d| whole > d.seconds);
                    let slot = if late {
                        &mut out.timed_out
                    } else {
                        &mut out.succeeded
                    };
                    slot[t] += amount;
                    started(Started {
                        tier: t,
                        route,
                        amount,
                        in_app,
                        total: whole,
                        service,
                    });
                }
            }
            free -= total * share;
            if share >= 1.0 || front.amount.iter().sum::<f64>() <= DUST {
                self.waiting.pop_front();
            }
        }
        out
    }
}

/// An amount of requests of one tier and route that started service, with their expected
/// latencies.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// Index of the tier (`Tier::ALL` order).
    pub tier: usize,
    /// Index of the route.
    pub route: usize,
    /// How many.
    pub amount: f64,
    /// Seconds from entering the app to finishing: the latency the fast guard measures.
    pub in_app: f64,
    /// Seconds from arriving to finishing, waits before the app included: what the client sees.
    pub total: f64,
    /// Of those, the seconds of service (the route's mean time, slowed down).
    pub service: f64,
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
