//! The handle's front doors: the actix middleware (feature `actix`) and the tower layer
//! (feature `tower`), both on this handle's engine, settings and hooks.

use super::Brownout;
#[cfg(feature = "actix")]
use crate::http::BrownoutMiddleware;

impl Brownout {
    /// The actix middleware; wrap your `App` with it (each worker's `App` gets its own, all
    /// sharing this handle's state).
    ///
    /// # Examples
    /// ```
    /// use actix_web::{test, web, App};
    /// use brownout::{Brownout, Config};
    ///
    /// # actix_web::rt::System::new().block_on(async {
    /// let brownout = Brownout::builder(Config::builder().rate_limit(0.001, 1).build()?).build()?;
    /// let app = test::init_service(
    ///     App::new()
    ///         .wrap(brownout.middleware())
    ///         .route("/", web::get().to(|| async { "hi" })),
    /// )
    /// .await;
    /// let get = || test::TestRequest::get().uri("/").to_request();
    /// assert_eq!(test::call_service(&app, get()).await.status(), 200);
    /// assert_eq!(test::call_service(&app, get()).await.status(), 429);
    /// # Ok::<(), brownout::Report>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "actix")]
    pub fn middleware(&self) -> BrownoutMiddleware {
        BrownoutMiddleware::new(
            self.engine().clone(),
            self.inner.hooks.clone(),
            self.inner.runtimes.clone(),
        )
    }

    /// The same limiters behind a tower [`Layer`](tower_layer::Layer), for axum, tonic and
    /// hyper apps (feature `tower`): the same engine, settings, admin API and metrics as
    /// `middleware` (feature `actix`), on `http` 1 requests, with the same tier, key and
    /// plan hooks.
    ///
    /// # Examples
    /// ```
    /// use brownout::{Brownout, Config};
    ///
    /// let brownout = Brownout::builder(Config::builder().rate_limit(10.0, 20).build()?).build()?;
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/", axum::routing::get(|| async { "hello" }))
    ///     .layer(brownout.layer());
    /// # drop(app);
    /// # Ok::<(), brownout::Report>(())
    /// ```
    #[cfg(feature = "tower")]
    pub fn layer(&self) -> crate::tower::BrownoutLayer {
        crate::tower::BrownoutLayer::new(
            self.engine().clone(),
            self.inner.hooks.clone(),
            self.inner.runtimes.clone(),
        )
    }
}
