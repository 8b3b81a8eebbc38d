//! The limiter chain: each limiter in the order of docs/how-it-decides.md,
//! under its mode, failing open on any error or panic. A request rejected by a later limiter
//! gets back what earlier ones took.
//!
//! The per-key limiters (request_rate, concurrent_requests, fleet_usage) go through three
//! steps, whichever store keeps their state: what the request asks of the store is written
//! ([`add_to_ask`]), the store answers ([`Answer`]: the local store at once, here; Redis in a
//! round trip, before the chain runs), and each limiter decides on its part of the answer.

use super::asks::{add_to_ask, elastic};
use super::evaluate::{fail_open_on_panic, Evaluation};
use super::guards::{guard_steps, Guarded};
use super::{EngineRef, Settings};
use crate::config::Mode;
use crate::limiter::adaptive_concurrency::AdaptivePermit;
use crate::limiter::adaptive_concurrency::Wait;
use crate::limiter::concurrent_requests::{self, ConcurrencyPermit};
use crate::limiter::fleet_usage::{self, FleetPermit};
use crate::limiter::request_rate::{CheckTime, FailureTicket, RateStatus, RateTicket};
use crate::limiter::{LimiterName, Rejection, Request};
use crate::metrics::Outcome;
use crate::rng::SplitMix64;
use crate::store::{Answer, Ask, Held, StoreError};
use crate::tier::Tier;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// What the chain admitted a request with: its permits go back to the store if it is dropped
/// (a later step refused the request), or pass to the request's hold (`P` is how they reach
/// the store).
#[derive(Debug)]
pub(crate) struct Admission<'a, P: EngineRef> {
    pub(crate) outcome: Outcome,
    /// Where what the per-key limiters took is held (the store that answered).
    pub(crate) held: Held,
    /// For the RateLimit fields (request_rate enforced and headers on).
    pub(crate) rate: Option<RateStatus>,
    /// Failure quotas to charge if the app answers with an error.
    pub(crate) failures: Option<FailureTicket>,
    pub(crate) concurrency: Option<ConcurrencyPermit<'a, P>>,
    pub(crate) fleet: Option<FleetPermit<'a, P>>,
    pub(crate) adaptive: Option<AdaptivePermit<'a>>,
    /// adaptive_concurrency had no room: the request waits for one before it is let through
    /// (boxed: only under overload, and the admission stays small).
    pub(crate) queued: Option<Box<Queued>>,
}

/// A request admitted by every limiter but waiting for adaptive_concurrency's room.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) wait: Wait,
    /// The credits to give back if it is refused after all, charged at `at` and held as
    /// `held`.
    pub(crate) refund: Option<RateTicket>,
    pub(crate) held: Held,
    pub(crate) at: CheckTime,
    /// The RateLimit fields of a refusal (with the credits given back).
    pub(crate) refunded: Option<RateStatus>,
}

impl<'a, P: EngineRef> Admission<'a, P> {
    /// Whether it holds no permit and waits for nothing.
    #[inline]
    pub(crate) fn holds_nothing(&self) -> bool {
        self.concurrency.is_none()
            && self.fleet.is_none()
            && self.adaptive.is_none()
            && self.queued.is_none()
    }

    /// An admission that holds only what the fast guard gave it, if anything: its slot, or
    /// its place in the waiting room (with nothing to give back if it is refused there).
    #[inline]
    pub(crate) fn guarded(outcome: Outcome, (adaptive, wait): Guarded<'a>) -> Self {
        Self {
            adaptive,
            queued: wait.map(|wait| {
                Box::new(Queued {
                    wait,
                    refund: None,
                    held: Held::LOCAL,
                    at: CheckTime::default(),
                    refunded: None,
                })
            }),
            ..Self::new(outcome)
        }
    }

    /// An admission that holds nothing.
    #[inline]
    pub(crate) fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            held: Held::LOCAL,
            rate: None,
            failures: None,
            concurrency: None,
            fleet: None,
            adaptive: None,
            queued: None,
        }
    }
}

/// The chain's answer for one request.
#[derive(Debug)]
pub(crate) enum Verdict<'a, P: EngineRef> {
    /// Let it through.
    Allow(Admission<'a, P>),
    /// Answer with this rejection (and the RateLimit fields, if any).
    Reject(Rejection, Option<RateStatus>),
    /// Hold it for its turn in its client's bucket, then decide it again without
    /// request_rate (`Request::paid`): `excess: delay` (boxed: only over a client's rate).
    Pace(Box<Paced>),
}

/// A request request_rate charged a turn in its client's queue (`excess: delay`), holding
/// nothing else while it waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paced {
    /// How long it waits.
    pub(crate) wait: Duration,
    pub(crate) tier: Tier,
    /// Its charge, given back if it is refused or its client hangs up; charged at `at` and
    /// held as `held`.
    pub(crate) ticket: RateTicket,
    pub(crate) held: Held,
    pub(crate) at: CheckTime,
    /// Its RateLimit fields (when shown), and those of a refusal (its charge given back).
    pub(crate) shown: Option<RateStatus>,
    pub(crate) refunded: Option<RateStatus>,
    /// Failure quotas to count if the app answers with an error.
    pub(crate) failures: Option<FailureTicket>,
}

/// Runs every limiter over one request; `owner` is the handle its permits keep. `may_wait`:
/// the caller can wait for adaptive_concurrency's room (the middleware's own decisions).
/// `answered`: the keyed store's answer, when a store that answers later (fleet mode's Redis)
/// has given it; else the local store answers here.
///
/// One `catch_unwind` guards the whole chain: a panic in any limiter releases what earlier
/// limiters took (their permits unwind, and the answer gives back what no limiter took
/// over), is counted against the limiter that was running, and lets the request through.
///
/// `#[inline]`: three owners instantiate it, and out of line every decision would pay a call
/// and a copy of the verdict.
#[inline]
pub(crate) fn run_chain<'a: 'k, 'k, P: EngineRef>(
    owner: &'a P,
    settings: &Settings,
    req: &Request<'_>,
    (now, rng, may_wait): (Duration, &mut SplitMix64, bool),
    answered: Option<(&Ask, &mut Answer<'k>)>,
) -> Verdict<'a, P> {
    let mut running = None;
    let mut part = None;
    let chain = AssertUnwindSafe(|| {
        let request = (req, now, may_wait);
        run(
            owner,
            settings,
            request,
            rng,
            answered,
            (&mut running, &mut part),
        )
    });
    catch_unwind(chain).unwrap_or_else(|_| {
        let answering = part.and_then(|owner| LimiterName::ALL.get(usize::from(owner)).copied());
        fail_open_on_panic(owner.engine(), running.or(answering));
        Verdict::Allow(Admission::new(Outcome::FailedOpen))
    })
}

/// The answer a per-key limiter decides on (there is one whenever one of them is on).
#[inline]
fn answer_of<'x, 'k>(
    answer: &'x mut Option<(&Ask, &mut Answer<'k>)>,
) -> Result<(&'x Ask, &'x mut Answer<'k>), StoreError> {
    match answer {
        Some((ask, answer)) => Ok((ask, answer)),
        None => Err(StoreError::Failed("the keyed store was not asked".into())),
    }
}

/// The chain's steps for one request. (Inlined into `run_chain`: out of line, its verdict is
/// copied once more on the way out.) Where only the guards are on, `guards::decide` decides
/// instead: what is added here outside `guard_steps` must be added there too.
#[inline]
fn run<'a: 'k, 'k, P: EngineRef>(
    owner: &'a P,
    settings: &Settings,
    (req, now, may_wait): (&Request<'_>, Duration, bool),
    rng: &mut SplitMix64,
    answered: Option<(&Ask, &mut Answer<'k>)>,
    (running, part): (&mut Option<LimiterName>, &mut Option<u8>),
) -> Verdict<'a, P> {
    let engine = owner.engine();
    if settings.kill_switch {
        return Verdict::Allow(Admission::new(Outcome::Allowed));
    }
    let limiters = &settings.limiters;
    // What applies to this request, under which mode (Settings::modes_for: a CORS
    // preflight spends no client's quota, a critical request no fleet slot).
    let modes = settings.modes_for(req);
    let mode = |limiter: LimiterName| modes.of(limiter);
    let mut outcome = Outcome::Allowed;
    let mut eval = Evaluation::new(owner, req.tier, &mut outcome, running);
    let plan = engine.plan.load();
    // Plan and answer: what the request asks of the keyed store, answered by the local
    // store now unless a store that answers later has answered it already.
    // (Both filled in place: moving them would cost more than answering.)
    let mut ask = Ask::default();
    let asked =
        answered.is_some() || add_to_ask(settings, req, &modes, elastic(settings, &plan), &mut ask);
    // The time of the keyed checks: only a request the keyed store answers has any (its
    // credits, windows and slots; the give-backs and the pacing of its charge).
    let at = if asked {
        engine.check_time(now)
    } else {
        CheckTime::default()
    };
    // Made only where the local store answers: a request that asks nothing (the fast guard
    // and the controller alone) neither builds nor drops one.
    // (Declared, not wrapped in an `Option`: its drop flag costs less than an option's drop.)
    let mut local: Answer<'k>;
    let mut answer = match answered {
        Some(answered) => Some(answered),
        None if asked => {
            local = Answer::new(engine.keyed());
            local.answer_here(&ask, (at.mono, at.unix), part);
            Some((&ask, &mut local))
        }
        None => None,
    };
    let held = answer
        .as_ref()
        .map_or(Held::LOCAL, |(_, answer)| answer.held());

    // Decide.
    let headers = mode(LimiterName::RequestRate) == Mode::Enforce && settings.rules.headers;
    let admitted = match eval.evaluate(
        LimiterName::RequestRate,
        mode(LimiterName::RequestRate),
        || {
            let (ask, answer) = answer_of(&mut answer)?;
            let replies = answer.replies(ask, LimiterName::RequestRate as u8)?;
            Ok(settings.rules.decide(replies, req, at)?)
        },
    ) {
        ControlFlow::Continue(admitted) => admitted,
        ControlFlow::Break((rejection, status)) => {
            return Verdict::Reject(rejection, headers.then_some(status))
        }
    };
    let ticket = admitted.map(|a| a.ticket);
    let shown = admitted.filter(|_| headers);
    let refunded_status = shown.map(|a| a.status.with_tat(a.refunded));
    // Its turn in the client's queue: held first, decided by the others after (an enforced
    // charge that stands: in dark mode nothing waits).
    if let Some(a) = admitted.as_ref().filter(|a| a.pace > 0) {
        if mode(LimiterName::RequestRate) == Mode::Enforce {
            return Verdict::Pace(Box::new(Paced {
                wait: Duration::from_micros(a.pace),
                tier: req.tier,
                ticket: a.ticket,
                held,
                at,
                shown: shown.map(|a| a.status),
                refunded: refunded_status,
                failures: a.ticket.failure_ticket(),
            }));
        }
    }
    // A later limiter's rejection gives the request's credits back (its permits go back
    // as they are dropped with the unfinished admission).
    let reject = |rejection: Rejection| {
        if let Some(t) = ticket {
            settings.rules.refund(engine.keyed(), held, &t, at);
        }
        Verdict::Reject(rejection, refunded_status)
    };

    let cr = &limiters.concurrent_requests;
    let concurrency = match eval.evaluate(
        LimiterName::ConcurrentRequests,
        mode(LimiterName::ConcurrentRequests),
        || concurrent_requests::decide(cr, owner, answer_of(&mut answer)?, req.key, req.tier),
    ) {
        ControlFlow::Continue(permit) => permit,
        ControlFlow::Break((rejection, ())) => return reject(rejection),
    };
    let fu = &limiters.fleet_usage;
    let fleet = match eval.evaluate(
        LimiterName::FleetUsage,
        mode(LimiterName::FleetUsage),
        || fleet_usage::decide(fu, owner, answer_of(&mut answer)?, req.tier),
    ) {
        ControlFlow::Continue(permit) => permit.flatten(),
        ControlFlow::Break((rejection, ())) => return reject(rejection),
    };
    let shed = plan.tier(req.tier);
    let (adaptive, wait) = match guard_steps(
        owner,
        &mut eval,
        (settings, &modes),
        (req, now, may_wait),
        (shed, rng),
    ) {
        ControlFlow::Continue(guarded) => guarded,
        ControlFlow::Break(rejection) => return reject(rejection),
    };
    Verdict::Allow(Admission {
        outcome,
        held,
        rate: shown.map(|a| a.status),
        failures: ticket.and_then(|t| t.failure_ticket()),
        concurrency,
        fleet,
        adaptive,
        queued: wait.map(|wait| {
            Box::new(Queued {
                wait,
                refund: ticket,
                held,
                at,
                refunded: refunded_status,
            })
        }),
    })
}
