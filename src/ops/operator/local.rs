//! The operator without fleet mode (brownout built without its `redis` feature): every change
//! is made on this instance only, and there are no fleet's settings to follow. The names are
//! those of `fleet.rs`, which replaces this module with the feature.

use super::{Durability, Operator, OpsMsg, Prepared};
use crate::config::Config;
use crate::engine::Engine;
use crate::ops::{Applied, ChangeError};
use tokio::sync::{mpsc, watch};

/// The audit source of a change read from the fleet's settings (none here).
pub(super) const SOURCE: &str = "fleet";

/// The operator's side of the fleet's settings: there is none without fleet mode.
pub(super) enum Link {}

impl Link {
    /// No link: `admin.scope: fleet` needs a Redis store, which needs the `redis` feature
    /// (a config asking for one is refused at load).
    pub(super) fn new(
        _: &Engine,
        _: &Config,
        _: &mpsc::Sender<OpsMsg>,
        _: &watch::Receiver<bool>,
    ) -> Option<Self> {
        None
    }
}

impl Operator {
    /// Makes a prepared change on this instance.
    pub(super) async fn make(
        &mut self,
        p: Prepared,
        source: &str,
        durability: Durability,
    ) -> Result<Option<Applied>, ChangeError> {
        self.make_local(p, source, durability).map(Some)
    }

    /// Nothing to catch up with.
    pub(super) async fn sync(&mut self) {}

    /// No settings link to lose.
    pub(super) fn unreachable(&self) {}
}
