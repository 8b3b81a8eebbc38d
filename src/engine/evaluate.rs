//! One limiter evaluated under its mode for one request ([`Evaluation`]), and the panic
//! guard of the decisions made apart from the general chain ([`guarded`]): what the chain
//! (`chain.rs`), request_rate alone (`alone.rs`) and the guards alone (`guards.rs`) share.

use super::EngineRef;
use crate::config::Mode;
use crate::limiter::{Check, LimiterError, LimiterName, Rejection};
use crate::metrics::Outcome;
use crate::tier::Tier;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A decision that panicked while `limiter` ran (or outside every limiter): counted and
/// logged against it; the request is let through.
#[cold]
#[inline(never)]
pub(super) fn fail_open_on_panic(engine: &super::Engine, limiter: Option<LimiterName>) {
    let limiter = limiter.map_or("chain", LimiterName::as_str);
    engine.fail_open(limiter, "panic", || format!("{limiter} panicked"));
}

/// Runs `decide` under a panic guard of its own, with the limiter it runs written to the
/// slot it is given: a panic is counted and logged against that limiter (or the chain), and
/// the request is let through as `open` says. The guard of every decision made apart from
/// the general chain (request_rate alone, the guards alone), which returns less than the
/// chain's whole verdict.
#[inline(always)]
pub(super) fn guarded<T>(
    engine: &super::Engine,
    open: impl FnOnce() -> T,
    decide: impl FnOnce(&mut Option<LimiterName>) -> T,
) -> T {
    let mut running = None;
    let decided = catch_unwind(AssertUnwindSafe(|| decide(&mut running)));
    decided.unwrap_or_else(|_| {
        fail_open_on_panic(engine, running);
        open()
    })
}

/// What evaluating the limiters of one request touches: its outcome, and which limiter runs
/// (for a panic's fail-open).
pub(super) struct Evaluation<'c, P> {
    owner: &'c P,
    tier: Tier,
    outcome: &'c mut Outcome,
    running: &'c mut Option<LimiterName>,
}

impl<'c, P: EngineRef> Evaluation<'c, P> {
    /// The evaluation of a request of `tier`, its outcome kept in `outcome` and the limiter
    /// running in `running`.
    #[inline(always)]
    pub(super) fn new(
        owner: &'c P,
        tier: Tier,
        outcome: &'c mut Outcome,
        running: &'c mut Option<LimiterName>,
    ) -> Self {
        Self {
            owner,
            tier,
            outcome,
            running,
        }
    }

    /// Evaluates one limiter under `mode`: an enforced rejection stops the chain (`Break`);
    /// otherwise it goes on (`Continue`), holding what the limiter gave unless it is off,
    /// failed open (counted and logged) or said no in dark mode (counted and logged). (Always inlined: out of line, each step
    /// paid a call and a copy of its result, and `Brownout::check` a quarter more.)
    #[inline(always)]
    pub(super) fn evaluate<H, R>(
        &mut self,
        limiter: LimiterName,
        mode: Mode,
        check: impl FnOnce() -> Result<Check<H, R>, LimiterError>,
    ) -> ControlFlow<(Rejection, R), Option<H>> {
        if mode == Mode::Off {
            return ControlFlow::Continue(None);
        }
        let engine = self.owner.engine();
        *self.running = Some(limiter);
        match check() {
            Ok(Check::Allowed(held)) => ControlFlow::Continue(Some(held)),
            Ok(Check::Rejected(rejection, reading)) => {
                let dark = mode == Mode::Dark;
                engine.metrics.rejection(limiter, self.tier, dark);
                if !dark {
                    return ControlFlow::Break((rejection, reading));
                }
                // A dark rejection outranks a fail-open in the request's outcome.
                *self.outcome = Outcome::DarkRejected;
                engine.dark_rejected(limiter.as_str(), self.tier);
                ControlFlow::Continue(None)
            }
            Err(error) => {
                if matches!(error, LimiterError::Store(_)) {
                    engine.metrics.store_error(limiter);
                }
                engine.fail_open(limiter.as_str(), error.reason(), || {
                    format!("{}: {error}", limiter.as_str())
                });
                if *self.outcome == Outcome::Allowed {
                    *self.outcome = Outcome::FailedOpen;
                }
                ControlFlow::Continue(None)
            }
        }
    }
}
