//! The middleware's decisions that wait first: for the shared store's answer (fleet mode: one
//! script call for every per-key limiter; when Redis cannot answer in time the request is
//! decided on this server's own limiters, never failed), or for a request's turn in its
//! client's queue (pacing, [`Turn::wait`]), after which the other limiters decide it.

use super::after::RateFields;
use super::body::TrackedBody;
use super::ratelimit;
use super::respond::respond;
use super::worker::Worker;
use super::Turn;
use crate::classify::Classified;
use crate::engine::{judge, Paced, Settings, Verdict};
use crate::limiter::request_rate::RateStatus;
use crate::rng::SplitMix64;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::Error;
use std::rc::Rc;
use std::sync::Arc;

/// A request whose decision waits.
pub(super) struct Later<S> {
    pub(super) service: Rc<S>,
    pub(super) worker: Rc<Worker>,
    pub(super) settings: Arc<Settings>,
    pub(super) req: ServiceRequest,
    pub(super) classified: Classified,
    pub(super) plan: Option<String>,
    /// Its turn, when request_rate charged it one to wait for.
    pub(super) paced: Option<Box<Paced>>,
    pub(super) rng: SplitMix64,
}

/// Waits for the request's turn if it has one, asks the shared store in fleet mode, then
/// decides and answers as the middleware does on the local store's answer (`Brownout`'s one
/// decision, [`judge`]).
pub(super) async fn decide_later<S, B>(
    p: Later<S>,
) -> Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    let Later {
        service,
        worker,
        mut settings,
        req,
        classified,
        plan,
        mut paced,
        mut rng,
    } = p;
    let engine = &worker.engine;
    let mut turn = None;
    loop {
        if let Some(paced) = paced.take() {
            turn = Some(Turn::wait(engine.0.clone(), paced).await);
            // Decided under the settings in force once it has waited.
            settings = engine.settings().load_full();
        }
        let mut request = super::request::request_of(&req, &classified, plan.as_deref());
        request.paid = turn.is_some();
        let mut asked = engine.ask_first(&settings, &request).await;
        let may_wait = asked.is_none();
        let answered = asked
            .as_mut()
            .and_then(|(ask, a)| Some((&*ask, a.as_mut()?)));
        let verdict = judge(engine, &settings, &request, (&mut rng, may_wait), answered);
        let mut verdict = match turn.take() {
            Some(turn) => turn.settle(verdict),
            None => verdict,
        };
        if let Verdict::Pace(again) = verdict {
            paced = Some(again);
            continue;
        }
        return respond(
            &service,
            &worker,
            &settings,
            req,
            classified.tier,
            &mut verdict,
            &SharedFields(&settings),
        )
        .await;
    }
}

/// The RateLimit fields of a decision that waited, built when a response needs them (a
/// network round trip or a wait dwarfs writing them).
struct SharedFields<'a>(&'a Settings);

impl RateFields for SharedFields<'_> {
    /// The plan's policies, with the quotas of the request's route, as the middleware writes
    /// them.
    fn policy(&self, status: &RateStatus) -> Option<HeaderValue> {
        let rules = &self.0.rules;
        let policies = ratelimit::policies(rules);
        let plan = policies.get(usize::from(status.plan))?;
        ratelimit::policy(&plan[usize::from(status.elastic)], rules, status)
    }

    fn allowed(&self, status: &RateStatus) -> Option<HeaderValue> {
        ratelimit::allowed(&self.0.rules, status)
    }
}
