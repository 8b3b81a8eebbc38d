//! What the admin API reads of a request and what it answers, whatever server carries them
//! (`route.rs` answers; `actix.rs` and `hyper.rs` translate).

use std::net::SocketAddr;

/// A request's headers as the admin API reads them.
pub(crate) trait AdminHeaders {
    /// The first value of `name` (lowercase).
    fn get(&self, name: &str) -> Option<&[u8]>;
    /// The bytes of all names and values together.
    fn size(&self) -> usize;
}

/// An admin request, read from whatever server received it.
pub(crate) struct AdminRequest<'a> {
    pub(crate) method: &'a str,
    /// The path as sent (still percent-encoded), without the query.
    pub(crate) path: &'a str,
    pub(crate) query: &'a str,
    pub(crate) headers: &'a (dyn AdminHeaders + Sync),
    pub(crate) peer: Option<SocketAddr>,
}

impl AdminRequest<'_> {
    /// Who asked, for the audit log.
    pub(crate) fn source(&self) -> String {
        self.peer
            .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
    }
}

/// What a refusal for a missing or wrong token asks for (`WWW-Authenticate`).
pub(crate) const CHALLENGE: &str = "Bearer realm=\"brownout-admin\"";

/// An admin answer, as every server writes it.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: Vec<u8>,
    /// The settings version, as an `ETag` (`"12"`).
    pub(crate) etag: Option<u64>,
    /// The methods the path takes, when it does not take the one asked (`Allow`).
    pub(crate) allow: Option<&'static str>,
    /// Whether to ask for the token (`WWW-Authenticate: Bearer`).
    pub(crate) challenge: bool,
    /// Whether to close the connection after the answer (a body left unread).
    pub(crate) close: bool,
}

impl Reply {
    /// 200 with `body` of `content_type`.
    pub(crate) fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 200,
            content_type,
            body: body.into(),
            etag: None,
            allow: None,
            challenge: false,
            close: false,
        }
    }

    /// 200 with a JSON document.
    pub(crate) fn json(value: &impl serde::Serialize) -> Self {
        let body = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
        Self::ok("application/json", body)
    }

    /// The answer's fields beyond its content type (and the connection's close), as every
    /// server writes them: the `ETag`, `Allow` and the token's challenge, where they apply.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        let etag = self.etag.map(|version| ("etag", format!("\"{version}\"")));
        let allow = self.allow.map(|methods| ("allow", methods.to_owned()));
        let challenge = self
            .challenge
            .then(|| ("www-authenticate", CHALLENGE.to_owned()));
        etag.into_iter().chain(allow).chain(challenge)
    }

    /// The same answer with an `ETag` of `version`.
    pub(crate) fn with_etag(self, version: u64) -> Self {
        Self {
            etag: Some(version),
            ..self
        }
    }
}
