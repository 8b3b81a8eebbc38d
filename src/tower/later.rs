//! The layer's decisions that wait first, as the middleware's (`http/later.rs`): for Redis,
//! or for a request's turn (pacing).

use super::{answer, BrownoutBody, RNG};
use crate::classify::Classified;
use crate::engine::{judge, Engine, Paced, Settings, Verdict};
use crate::http::Turn;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use std::sync::Arc;
use tower_service::Service;

/// Waits for the request's turn if it has one (`paced`), asks the shared store in fleet
/// mode, then decides and answers.
pub(super) async fn decide_later<S, ReqB, ResB>(
    mut inner: S,
    engine: Arc<Engine>,
    mut settings: Arc<Settings>,
    req: Request<ReqB>,
    (classified, plan, mut paced): (Classified, Option<String>, Option<Box<Paced>>),
    grpc: bool,
) -> Result<Response<BrownoutBody<ResB>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes>,
{
    let mut turn = None;
    loop {
        if let Some(paced) = paced.take() {
            turn = Some(Turn::wait(engine.clone(), paced).await);
            // Decided under the settings in force once it has waited.
            settings = engine.settings().load_full();
        }
        let mut request = super::limiter_request(&req, &classified, plan.as_deref());
        request.paid = turn.is_some();
        let mut asked = engine.ask_first(&settings, &request).await;
        let verdict = RNG.with(|cell| {
            let mut rng = cell.take().unwrap_or_else(|| engine.random_stream());
            let may_wait = asked.is_none();
            let answer = asked
                .as_mut()
                .and_then(|(ask, a)| Some((&*ask, a.as_mut()?)));
            let verdict = judge(&engine, &settings, &request, (&mut rng, may_wait), answer);
            cell.set(Some(rng));
            verdict
        });
        let verdict = match turn.take() {
            Some(turn) => turn.settle(verdict),
            None => verdict,
        };
        if let Verdict::Pace(again) = verdict {
            paced = Some(again);
            continue;
        }
        std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
        let fut = answer(
            &mut inner,
            &engine,
            &settings,
            req,
            (classified.tier, grpc),
            verdict,
        );
        return fut.await;
    }
}
