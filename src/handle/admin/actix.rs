//! The admin API on its own actix server ([`Brownout::admin_server`]): every request goes to
//! the one implementation (`route.rs`), its body read from actix's payload.

use super::error::AdminError;
use super::reply::{AdminHeaders, AdminRequest, Reply};
use super::route::answer;
use super::MAX_BODY;
use crate::handle::{Brownout, Error};
use actix_web::dev::Server;
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::{ConnectionType, StatusCode};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use std::net::SocketAddr;
use std::time::Duration;

/// A bound, not yet awaited admin server.
pub struct AdminServer {
    /// The server future; spawn or await it.
    pub server: Server,
    /// Where it listens (useful when bound to port 0).
    pub local_addr: SocketAddr,
}

impl Brownout {
    /// Binds the admin server to `admin.bind`.
    ///
    /// Refuses a non-loopback address unless a token was configured explicitly: a generated
    /// token is only logged, which is fine on one machine, not on a network. (Without actix:
    /// [`admin_server_hyper`](Self::admin_server_hyper), feature `tower`.)
    ///
    /// # Errors
    /// [`Error::Admin`] when `admin.bind` is not an address, cannot be bound, or is not on
    /// loopback while the token is generated or shorter than 16 characters.
    ///
    /// # Examples
    /// ```no_run
    /// # #[actix_web::main]
    /// # async fn main() -> Result<(), brownout::Report> {
    /// let brownout = brownout::Brownout::from_config_file("config.yaml")?;
    /// brownout.start()?;
    /// let admin = brownout.admin_server()?; // on admin.bind, behind the admin token
    /// println!("admin API on http://{}", admin.local_addr);
    /// actix_web::rt::spawn(admin.server);
    /// # Ok(()) }
    /// ```
    pub fn admin_server(&self) -> Result<AdminServer, Error> {
        self.admin_server_on(self.admin_bind()?)
    }

    /// Binds the admin server to `bind` instead of `admin.bind`.
    ///
    /// A generated token is handed to the operator whatever logging the app set up: written to
    /// `admin.token_file` (mode 0600) when set, else printed once to stderr. A token shorter
    /// than 16 characters is refused on a non-loopback address and warned about on
    /// loopback.
    ///
    /// # Errors
    /// As for [`admin_server`](Self::admin_server).
    pub fn admin_server_on(&self, bind: SocketAddr) -> Result<AdminServer, Error> {
        self.check_admin_token(bind)?;
        let brownout = self.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(brownout.clone()))
                .default_service(web::to(serve))
        })
        .workers(1)
        .disable_signals()
        // Request heads must arrive within this; bodies have admin.body_timeout.
        .client_request_timeout(Duration::from_secs(5))
        .bind(bind)
        .map_err(|e| Error::Admin(format!("cannot listen on {bind}: {e}")))?;
        let local_addr = server.addrs()[0];
        Ok(AdminServer {
            server: server.run(),
            local_addr,
        })
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

/// Every admin request.
async fn serve(
    req: HttpRequest,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> HttpResponse {
    let request = AdminRequest {
        method: req.method().as_str(),
        path: req.uri().path(),
        query: req.query_string(),
        headers: req.headers(),
        peer: req.peer_addr(),
    };
    let reply = answer(&brownout, &request, |deadline| read_body(payload, deadline)).await;
    respond(reply)
}

/// Reads a body of at most [`MAX_BODY`] bytes within `deadline`: 413 for one too large, 408
/// for one that does not arrive in time.
async fn read_body(payload: web::Payload, deadline: Duration) -> Result<web::Bytes, AdminError> {
    match tokio::time::timeout(deadline, payload.to_bytes_limited(MAX_BODY)).await {
        Ok(Ok(Ok(body))) => Ok(body),
        Ok(Ok(Err(e))) => Err(AdminError::invalid("body", e.to_string())),
        Ok(Err(_)) => Err(AdminError::PayloadTooLarge),
        Err(_) => Err(AdminError::BodyTimeout(deadline.as_millis())),
    }
}

/// `reply` as actix writes it.
fn respond(mut reply: Reply) -> HttpResponse {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, reply.content_type))
        .body(std::mem::take(&mut reply.body));
    for (name, value) in reply.fields() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
    }
    if reply.close {
        response
            .head_mut()
            .set_connection_type(ConnectionType::Close);
    }
    response
}
