//! Pacing (`excess: delay`): a request request_rate charged a turn waits for it here, holding
//! nothing else (not in flight), then the other limiters decide it (`Request::paid`). The
//! turn goes back if the request is then refused, or if its wait is dropped: a tower server
//! (hyper) drops it when the client hangs up; actix's HTTP/1 server does not, so there the
//! turn is used.

use crate::engine::{Engine, EngineRef, Paced, Verdict};
use crate::limiter::request_rate::RateStatus;
use crate::limiter::{LimiterName, RejectStatus, Rejection};
use crate::metrics::Outcome;
use std::sync::Arc;

/// A turn in a client's queue, charged by request_rate: given back when dropped, unless the
/// request it was charged for went on.
pub(crate) struct Turn {
    engine: Arc<Engine>,
    paced: Paced,
    kept: bool,
}

impl Turn {
    /// Waits out `paced`'s wait (counted and timed in the metrics); the turn is its own
    /// from then on.
    pub(crate) async fn wait(engine: Arc<Engine>, paced: Box<Paced>) -> Self {
        engine.metrics().delayed(paced.tier, paced.wait);
        let turn = Self {
            engine,
            paced: *paced,
            kept: false,
        };
        tokio::time::sleep(turn.paced.wait).await;
        turn
    }

    /// The request's verdict once the other limiters have decided it after its wait: let
    /// through with its turn kept (and request_rate's RateLimit fields and failure quotas of
    /// the first decision), or refused with its turn given back.
    pub(crate) fn settle<P: EngineRef>(mut self, verdict: Verdict<'_, P>) -> Verdict<'_, P> {
        match verdict {
            Verdict::Allow(mut admission) => {
                let paced = &self.paced;
                admission.rate = paced.shown;
                admission.failures = paced.failures;
                if let Some(queued) = admission.queued.as_mut() {
                    // adaptive_concurrency's room gives the turn back if it turns it away.
                    queued.refund = Some(paced.ticket);
                    (queued.held, queued.at, queued.refunded) =
                        (paced.held, paced.at, paced.refunded);
                }
                self.kept = true;
                Verdict::Allow(admission)
            }
            Verdict::Reject(rejection, _) => Verdict::Reject(rejection, self.paced.refunded),
            // A paid request is not charged again, so not paced again; were it, it could not
            // wait twice.
            Verdict::Pace(again) => {
                let (rejection, rate) = refuse(&self.engine, &again);
                Verdict::Reject(rejection, rate)
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.kept {
            give_back(&self.engine, &self.paced);
        }
    }
}

fn give_back(engine: &Engine, paced: &Paced) {
    let settings = engine.settings().load();
    let keyed = engine.keyed();
    settings
        .rules
        .refund(keyed, paced.held, &paced.ticket, paced.at);
}

/// Refuses a paced request where nothing can wait (`Brownout::check`, which answers at once),
/// as `excess: refuse` would: 429, retry after its wait, its turn given back (counted).
pub(crate) fn refuse(engine: &Engine, paced: &Paced) -> (Rejection, Option<RateStatus>) {
    give_back(engine, paced);
    let metrics = engine.metrics();
    metrics.rejection(LimiterName::RequestRate, paced.tier, false);
    metrics.request(paced.tier, Outcome::Rejected);
    let rejection = Rejection {
        limiter: LimiterName::RequestRate,
        tier: paced.tier,
        status: RejectStatus::TooManyRequests,
        retry_after: paced.wait,
        policy: None,
    };
    (rejection, paced.refunded)
}
