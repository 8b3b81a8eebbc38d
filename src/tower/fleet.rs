//! The layer in fleet mode: the shared store answers first, then the same decision as on the
//! local store's answer runs on it (as the actix middleware does, `http/fleet.rs`); when Redis
//! cannot answer in time the request is decided on this server's own limiters.

use super::{answer, BrownoutBody, RNG};
use crate::classify::Classified;
use crate::engine::{judge, Engine, Settings};
use crate::store::Ask;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use std::sync::Arc;
use tower_service::Service;

/// Waits for the shared store's answer, then decides and answers.
#[allow(clippy::too_many_arguments)]
pub(super) async fn judge_shared<S, ReqB, ResB>(
    mut inner: S,
    engine: Arc<Engine>,
    settings: Arc<Settings>,
    req: Request<ReqB>,
    classified: Classified,
    plan: Option<String>,
    asked: Ask,
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
    let mut answered = engine.answer_shared(&asked).await;
    let request = super::limiter_request(&req, &classified, plan.as_deref());
    let verdict = RNG.with(|cell| {
        let mut rng = cell.take().unwrap_or_else(|| engine.random_stream());
        let answer = answered.as_mut().map(|a| (&asked, a));
        let verdict = judge(&engine, &settings, &request, (&mut rng, false), answer);
        cell.set(Some(rng));
        verdict
    });
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    let fut = answer(
        &mut inner,
        &engine,
        &settings,
        req,
        (classified.tier, grpc),
        verdict,
    );
    fut.await
}
