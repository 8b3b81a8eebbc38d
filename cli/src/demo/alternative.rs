//! The overload scorecard's comparison arm: an adaptive concurrency limiter from another
//! crate (congestion-limiter's Vegas or Gradient, a fail-fast limit on requests in flight,
//! tier-blind) in front of the demo's routes, chosen by `demo.alternative_limiter`.

use crate::config::AlternativeLimiter;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use brownout::Error;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

type Shared = Arc<dyn congestion_limiter::limiter::Limiter + Send + Sync>;

/// The limit before anything is learned: adaptive_concurrency's default initial limit.
const INITIAL_LIMIT: usize = 20;

/// The middleware: passes everything through when no alternative is configured.
#[derive(Clone)]
pub struct Gate(Option<Shared>);

impl Gate {
    /// The limiter `which` names (one per app, shared by its workers).
    pub fn new(which: AlternativeLimiter) -> Result<Self, Error> {
        {
            use congestion_limiter::limiter::DefaultLimiter;
            use congestion_limiter::limits::{Gradient, Vegas};
            let limiter: Shared = match which {
                AlternativeLimiter::Off => return Ok(Self(None)),
                AlternativeLimiter::Vegas => Arc::new(DefaultLimiter::new(
                    Vegas::new_with_initial_limit(INITIAL_LIMIT),
                )),
                AlternativeLimiter::Gradient => Arc::new(DefaultLimiter::new(
                    Gradient::new_with_initial_limit(INITIAL_LIMIT),
                )),
            };
            Ok(Self(Some(limiter)))
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for Gate
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = GateService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(GateService {
            service: Rc::new(service),
            limiter: self.0.clone(),
        }))
    }
}

/// [`Gate`] around one worker's service.
pub struct GateService<S> {
    service: Rc<S>,
    limiter: Option<Shared>,
}

type Answer<B> = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>;

impl<S, B> Service<ServiceRequest> for GateService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Answer<B>>>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = Rc::clone(&self.service);
        let limiter = self.limiter.clone();
        Box::pin(async move {
            let Some(limiter) = limiter else {
                return service
                    .call(req)
                    .await
                    .map(ServiceResponse::map_into_left_body);
            };
            admit(limiter, service, req).await
        })
    }
}

async fn admit<S, B>(limiter: Shared, service: Rc<S>, req: ServiceRequest) -> Answer<B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    use congestion_limiter::limiter::Outcome;
    let Some(token) = limiter.try_acquire().await else {
        let refused = actix_web::HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "1"))
            .json(serde_json::json!({"error": "overloaded", "limiter": "congestion_limiter"}));
        return Ok(req.into_response(refused).map_into_right_body());
    };
    // A dropped future (a cancelled request) drops the token: its slot comes back, with no
    // latency sample.
    let answer = service.call(req).await;
    let outcome = match &answer {
        Ok(res) if res.status().is_server_error() => Outcome::Overload,
        _ => Outcome::Success,
    };
    limiter.release(token, Some(outcome)).await;
    answer.map(ServiceResponse::map_into_left_body)
}
