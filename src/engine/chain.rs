//! The limiter chain: each limiter in DESIGN.md order, under its mode, failing open on any
//! error or panic. A request rejected by a later limiter gets back what earlier ones took.

use super::{Engine, Settings};
use crate::config::Mode;
use crate::limiter::concurrent_requests::{self, ConcurrencyPermit};
use crate::limiter::fleet_usage::{self, FleetPermit};
use crate::limiter::request_rate::{RateRequest, RateStatus, RateTicket};
use crate::limiter::{worker_utilization, LimiterError, LimiterName, Rejection};
use crate::metrics::Outcome;
use crate::rng::SplitMix64;
use crate::store::Store;
use crate::tier::Tier;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// A classified request, as the chain needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) tier: Tier,
    pub(crate) key: u64,
    pub(crate) ip: u64,
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) plan: Option<&'a str>,
}

/// What an admitted request carries until its response is done.
#[derive(Debug, Default)]
pub(crate) struct Admission<'a> {
    pub(crate) outcome: Outcome,
    /// For the RateLimit fields (request_rate enforced and headers on).
    pub(crate) rate: Option<RateStatus>,
    /// Failure quotas to charge if the app answers with an error.
    pub(crate) failures: Option<RateTicket>,
    pub(crate) concurrency: Option<ConcurrencyPermit<'a>>,
    pub(crate) fleet: Option<FleetPermit<'a>>,
}

/// The chain's answer for one request.
#[derive(Debug)]
pub(crate) enum Verdict<'a> {
    /// Let it through.
    Allow(Admission<'a>),
    /// Answer with this rejection (and the RateLimit fields, if any).
    Reject(Rejection, Option<RateStatus>),
}

/// Runs every limiter over one request.
///
/// One `catch_unwind` guards the whole chain: a panic in any limiter releases what earlier
/// limiters took (their permits unwind), is counted against the limiter that was running, and
/// lets the request through.
pub(crate) fn decide<'a>(
    shared: &'a Engine,
    settings: &Settings,
    req: &Request<'_>,
    now: Duration,
    rng: &mut SplitMix64,
) -> Verdict<'a> {
    let mut running = None;
    let chain = AssertUnwindSafe(|| run(shared, settings, req, now, rng, &mut running));
    catch_unwind(chain).unwrap_or_else(|_| {
        let limiter = running.map_or("chain", LimiterName::as_str);
        shared.fail_open(limiter, "panic", || format!("{limiter} panicked"));
        Verdict::Allow(Admission {
            outcome: Outcome::FailedOpen,
            ..Admission::default()
        })
    })
}

fn run<'a>(
    shared: &'a Engine,
    settings: &Settings,
    req: &Request<'_>,
    now: Duration,
    rng: &mut SplitMix64,
    running: &mut Option<LimiterName>,
) -> Verdict<'a> {
    let mut admission = Admission::default();
    if settings.kill_switch {
        return Verdict::Allow(admission);
    }
    let limiters = &settings.limiters;
    let store: &'a dyn Store = &*shared.store;
    let at = shared.check_time(now);
    let plan = shared.plan.load();

    let rr = &limiters.request_rate;
    let mut ticket = None;
    let mut refunded_status = None::<RateStatus>;
    let rated = evaluate(
        shared,
        LimiterName::RequestRate,
        rr.mode,
        req,
        (&mut admission.outcome, &mut *running),
        || {
            let wu = &limiters.worker_utilization;
            let elastic = plan.samples > 0 && plan.utilization < wu.end_of_good;
            let rate_req = RateRequest {
                tier: req.tier,
                key: req.key,
                ip: req.ip,
                method: req.method,
                path: req.path,
                plan: req.plan,
            };
            let d = settings.rules.check(store, &rate_req, at, elastic)?;
            if rr.mode == Mode::Enforce && settings.rules.headers {
                admission.rate = Some(d.status);
                refunded_status = Some(d.status.with_tat(d.refunded));
            }
            ticket = Some(d.ticket);
            Ok(d.rejection)
        },
    );
    let rate_status = admission.rate;
    if let Some(rejection) = rated {
        return Verdict::Reject(rejection, rate_status);
    }
    // A later limiter's rejection gives the request's credits back first.
    let reject = |rejection: Rejection| {
        if let Some(t) = ticket {
            settings.rules.refund(store, &t, at);
        }
        Verdict::Reject(rejection, refunded_status)
    };
    admission.failures = ticket.filter(|t| t.failures != 0);

    let cr = &limiters.concurrent_requests;
    let mut concurrency = None;
    let limited = evaluate(
        shared,
        LimiterName::ConcurrentRequests,
        cr.mode,
        req,
        (&mut admission.outcome, &mut *running),
        || match concurrent_requests::acquire(cr, store, req.key, req.tier)? {
            Ok(permit) => {
                concurrency = Some(permit);
                Ok(None)
            }
            Err(rejection) => Ok(Some(rejection)),
        },
    );
    if let Some(rejection) = limited {
        return reject(rejection);
    }
    admission.concurrency = concurrency;

    let fu = &limiters.fleet_usage;
    let mut fleet = None;
    let reserved = evaluate(
        shared,
        LimiterName::FleetUsage,
        fu.mode,
        req,
        (&mut admission.outcome, &mut *running),
        || match fleet_usage::acquire(fu, store, req.tier)? {
            Ok(permit) => {
                fleet = permit;
                Ok(None)
            }
            Err(rejection) => Ok(Some(rejection)),
        },
    );
    if let Some(rejection) = reserved {
        return reject(rejection);
    }
    admission.fleet = fleet;

    let wu = &limiters.worker_utilization;
    let shed = evaluate(
        shared,
        LimiterName::WorkerUtilization,
        wu.mode,
        req,
        (&mut admission.outcome, &mut *running),
        || worker_utilization::check(wu, &plan, req.tier, req.key, now, rng),
    );
    if let Some(rejection) = shed {
        return reject(rejection);
    }
    Verdict::Allow(admission)
}

/// Evaluates one limiter under `mode`; only an enforced rejection is returned.
fn evaluate(
    shared: &Engine,
    limiter: LimiterName,
    mode: Mode,
    req: &Request<'_>,
    (outcome, running): (&mut Outcome, &mut Option<LimiterName>),
    check: impl FnOnce() -> Result<Option<Rejection>, LimiterError>,
) -> Option<Rejection> {
    if mode == Mode::Off {
        return None;
    }
    *running = Some(limiter);
    match check() {
        Ok(None) => None,
        Ok(Some(rejection)) => {
            let dark = mode == Mode::Dark;
            shared.metrics.rejection(limiter, req.tier, dark);
            if !dark {
                return Some(rejection);
            }
            // A dark rejection outranks a fail-open in the request's outcome.
            *outcome = Outcome::DarkRejected;
            shared.dark_rejected(limiter.as_str(), req.tier);
            None
        }
        Err(error) => {
            if matches!(error, LimiterError::Store(_)) {
                shared.metrics.store_error(limiter);
            }
            shared.fail_open(limiter.as_str(), error.reason(), || {
                format!("{}: {error}", limiter.as_str())
            });
            note_fail_open(outcome);
            None
        }
    }
}

fn note_fail_open(outcome: &mut Outcome) {
    if *outcome == Outcome::Allowed {
        *outcome = Outcome::FailedOpen;
    }
}
