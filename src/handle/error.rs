//! Why brownout could not be built or started ([`Error`]), and an error as `main` shows it
//! ([`Report`]).

use crate::config::ConfigError;
use crate::control::SourceError;

/// Why brownout could not be built or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A utilization source could not be set up.
    #[error("{0}")]
    Source(#[from] SourceError),
    /// `start` was called outside a tokio runtime.
    #[error("Brownout::start must be called inside a tokio (or actix) runtime")]
    NoRuntime,
    /// The admin server could not be set up.
    #[error("admin server: {0}")]
    Admin(String),
}

/// An error as `main` should show it: its one-line sentence, not its structure. A `main` that
/// returns `Result<(), Box<dyn Error>>` prints the error's `Debug` (`InFile { path: .., inner:
/// Invalid { .. } }`); one that returns `Result<(), brownout::Report>` prints
/// `Error: config.yaml: limiters.fleet_usage.capacity must be ...`. Any error converts into
/// it with `?`.
///
/// # Examples
/// ```no_run
/// fn main() -> Result<(), brownout::Report> {
///     let config = brownout::Config::load("config.yaml")?;
///     let _brownout = brownout::Brownout::builder(config).build()?;
///     Ok(())
/// }
/// ```
pub struct Report(Box<dyn std::error::Error + 'static>);

impl<E: std::error::Error + 'static> From<E> for Report {
    fn from(e: E) -> Self {
        Self(Box::new(e))
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl Report {
    /// The error reported.
    pub fn error(&self) -> &(dyn std::error::Error + 'static) {
        &*self.0
    }
}
