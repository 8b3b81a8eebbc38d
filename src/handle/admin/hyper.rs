//! The admin API without actix (feature `tower`): a tower service over `http` 1 requests
//! ([`Brownout::admin_service`], for an app that serves it itself), and that service on its
//! own HTTP/1 listener, served by hyper ([`Brownout::admin_server_hyper`]). Both answer
//! through the one implementation (`route.rs`), exactly as the actix server does.

use super::error::AdminError;
use super::reply::{AdminHeaders, AdminRequest, Reply};
use super::route::answer;
use super::MAX_BODY;
#[cfg(doc)]
use super::MAX_HEADERS;
use crate::handle::{Brownout, Error};
use crate::logging::{notice, Level, LogGate};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Most connections the hyper admin server holds open at once: past it, a new connection
/// closes the oldest one that is not answering a request (idle, or still sending its head),
/// so that clients holding connections open without a token cannot lock the operator out.
const MAX_CONNECTIONS: usize = 256;

/// The largest request head read, as actix's (128 KiB): a larger one is refused by hyper
/// (431), one between [`MAX_HEADERS`] and this by the admin API, in words.
const MAX_HEAD: usize = 128 * 1024;

/// How long a request's head may take to arrive (bodies have `admin.body_timeout`).
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The admin API as a tower service ([`Brownout::admin_service`]).
#[derive(Clone)]
pub struct AdminService {
    brownout: Brownout,
}

/// The admin server future of [`Brownout::admin_server_hyper`].
pub type AdminServerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A bound, not yet awaited admin server, served by hyper.
pub struct HyperAdminServer {
    /// The server: spawn it on a tokio runtime (it runs until dropped).
    pub server: AdminServerFuture,
    /// Where it listens (useful when bound to port 0).
    pub local_addr: SocketAddr,
}

impl Brownout {
    /// The admin API (health, metrics, state and the operator's writes, behind the admin
    /// token) as a tower service over `http` 1 requests, for an app that serves it itself,
    /// on a listener of its own: `axum::Router::new().fallback_service(brownout.admin_service())`.
    ///
    /// It answers exactly as [`admin_server_hyper`](Self::admin_server_hyper) does, but it
    /// does not check where it is served: keep it off the app's public listener, and behind
    /// a token of your own (`admin.token_env`) anywhere but loopback. The audit log names
    /// the peer from axum's `ConnectInfo` or a `SocketAddr` extension.
    pub fn admin_service(&self) -> AdminService {
        AdminService {
            brownout: self.clone(),
        }
    }

    /// Binds the admin server to `admin.bind`, served by hyper (HTTP/1) on the tokio runtime
    /// it is spawned on: the admin API without actix. The same endpoints, token rules and
    /// answers as `admin_server` (feature `actix`).
    ///
    /// # Errors
    /// [`Error::Admin`] when `admin.bind` is not an address, cannot be bound, or is not on
    /// loopback while the token is generated or shorter than 16 characters.
    ///
    /// # Examples
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), brownout::Report> {
    /// let brownout = brownout::Brownout::from_config_file("config.yaml")?;
    /// brownout.start()?;
    /// let admin = brownout.admin_server_hyper()?; // on admin.bind, behind the admin token
    /// println!("admin API on http://{}", admin.local_addr);
    /// tokio::spawn(admin.server);
    /// # Ok(()) }
    /// ```
    pub fn admin_server_hyper(&self) -> Result<HyperAdminServer, Error> {
        self.admin_server_hyper_on(self.admin_bind()?)
    }

    /// [`admin_server_hyper`](Self::admin_server_hyper) on `bind` instead of `admin.bind`.
    ///
    /// # Errors
    /// As for [`admin_server_hyper`](Self::admin_server_hyper).
    pub fn admin_server_hyper_on(&self, bind: SocketAddr) -> Result<HyperAdminServer, Error> {
        self.check_admin_token(bind)?;
        let listen = |e: std::io::Error| Error::Admin(format!("cannot listen on {bind}: {e}"));
        let listener = std::net::TcpListener::bind(bind).map_err(listen)?;
        listener.set_nonblocking(true).map_err(listen)?;
        let local_addr = listener.local_addr().map_err(listen)?;
        Ok(HyperAdminServer {
            server: Box::pin(serve(listener, self.admin_service())),
            local_addr,
        })
    }
}

/// Accepts connections on `listener` and serves each with `service`, at most
/// [`MAX_CONNECTIONS`] at once.
async fn serve(listener: std::net::TcpListener, service: AdminService) {
    static ACCEPT_ERRORS: LogGate = LogGate::new(Duration::from_secs(10));
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            notice(Level::Error, &format!("admin server: cannot listen: {e}"));
            return;
        }
    };
    // The open connections, oldest first: whether each is answering a request, and its task.
    let mut open: VecDeque<(Arc<AtomicBool>, tokio::task::AbortHandle)> = VecDeque::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: wait a little rather than spin.
                let now = service.brownout.engine().clock().now();
                if ACCEPT_ERRORS.open(now).is_some() {
                    notice(Level::Warn, &format!("admin server: accept failed: {e}"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        open.retain(|(_, task)| !task.is_finished());
        if open.len() >= MAX_CONNECTIONS {
            let idle = open
                .iter()
                .position(|(busy, _)| !busy.load(Ordering::Relaxed));
            match idle.and_then(|i| open.remove(i)) {
                Some((_, task)) => task.abort(),
                // Every one is answering a request: the new one waits for none of them.
                None => continue,
            }
        }
        let busy = Arc::new(AtomicBool::new(false));
        let connection = Connection {
            service: service.clone(),
            peer,
            busy: busy.clone(),
        };
        let task = tokio::spawn(async move {
            // A connection that fails (a client gone, a malformed request) ends here.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), connection)
                .await;
        });
        open.push_back((busy, task.abort_handle()));
    }
}

/// One connection of the hyper admin server: its peer, and whether it is answering a request.
struct Connection {
    service: AdminService,
    peer: SocketAddr,
    busy: Arc<AtomicBool>,
}

impl hyper::service::Service<Request<hyper::body::Incoming>> for Connection {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = AdminFuture;

    fn call(&self, mut req: Request<hyper::body::Incoming>) -> AdminFuture {
        req.extensions_mut().insert(self.peer);
        let busy = self.busy.clone();
        busy.store(true, Ordering::Relaxed);
        let answer = handle(self.service.brownout.clone(), req);
        Box::pin(async move {
            let answered = answer.await;
            busy.store(false, Ordering::Relaxed);
            answered
        })
    }
}

/// The answer of [`AdminService`].
pub type AdminFuture =
    Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static>>;

impl<B> tower_service::Service<Request<B>> for AdminService
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = AdminFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> AdminFuture {
        handle(self.brownout.clone(), req)
    }
}

impl AdminHeaders for HeaderMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        HeaderMap::get(self, name).map(HeaderValue::as_bytes)
    }

    fn size(&self) -> usize {
        self.iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum()
    }
}

/// Answers `req` through the admin API.
fn handle<B>(brownout: Brownout, req: Request<B>) -> AdminFuture
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Box::pin(async move {
        let (parts, body) = req.into_parts();
        let request = AdminRequest {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query().unwrap_or(""),
            headers: &parts.headers,
            peer: crate::tower::peer_addr(&parts.extensions),
        };
        let reply = answer(&brownout, &request, |deadline| read_body(body, deadline)).await;
        Ok(respond(reply))
    })
}

/// Reads a body of at most [`MAX_BODY`] bytes within `deadline`: 413 for one too large, 408
/// for one that does not arrive in time.
async fn read_body<B>(body: B, deadline: Duration) -> Result<Bytes, AdminError>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match tokio::time::timeout(deadline, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(AdminError::PayloadTooLarge),
        Ok(Err(e)) => Err(AdminError::invalid("body", e.to_string())),
        Err(_) => Err(AdminError::BodyTimeout(deadline.as_millis())),
    }
}

/// `reply` as `http` 1 writes it.
fn respond(mut reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(std::mem::take(&mut reply.body))));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    for (name, value) in reply.fields() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    if reply.close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
