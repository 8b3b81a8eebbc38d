//! One round of a hybrid store (`store.sync: local_first`) against Redis: the buckets charged
//! on this instance since its last round, added to the fleet's (`reconcile.lua`).

use super::conn::Conn;
use super::RedisStore;
use crate::store::hybrid::Credit;
use futures_util::future::try_join_all;
use std::sync::LazyLock;

static RECONCILE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("reconcile.lua")));

/// Buckets per script call (standalone); a Cluster gets one call per bucket (they live on
/// different slots), this many at a time.
const BATCH: usize = 256;

/// The answer to a round: Redis's time, and each bucket's TAT on that clock (0: full), in
/// the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// `TIME` on the server (µs).
    pub now: u64,
    /// (bucket key, TAT).
    pub tats: Vec<(u64, u64)>,
}

impl RedisStore {
    /// Adds `credits` (bucket key, credit µs and the bucket it was charged in) to the fleet's
    /// buckets, each carried to that bucket first, and reads them back.
    pub async fn reconcile(&self, credits: &[(u64, Credit)]) -> redis::RedisResult<Round> {
        let conn = self.conn.load_full().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "not connected to Redis yet"))
        })?;
        let per_call = if self.target.is_cluster() { 1 } else { BATCH };
        let mut round = Round {
            now: 0,
            tats: Vec::with_capacity(credits.len()),
        };
        for group in credits.chunks(BATCH) {
            let calls = group
                .chunks(per_call)
                .map(|chunk| self.reconcile_call(&conn, chunk));
            let replies = try_join_all(calls).await;
            self.answered(replies.is_ok());
            for (chunk, (now, tats)) in group.chunks(per_call).zip(replies?) {
                round.now = round.now.max(now);
                // TATs are times on the server's clock: one reading converts them all.
                round
                    .tats
                    .extend(chunk.iter().zip(tats).map(|((key, _), tat)| (*key, tat)));
            }
        }
        Ok(round)
    }

    async fn reconcile_call(
        &self,
        conn: &Conn,
        chunk: &[(u64, Credit)],
    ) -> redis::RedisResult<(u64, Vec<u64>)> {
        let mut call = RECONCILE.prepare_invoke();
        for (key, c) in chunk {
            call.key(self.keys().client(*key))
                .arg(c.credit)
                .arg(c.bucket.step)
                .arg(c.bucket.tolerance);
        }
        let mut c = conn.clone();
        let reply = tokio::time::timeout(
            super::settings::TIMEOUT,
            call.invoke_async::<Vec<u64>>(&mut c),
        )
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "timed out")))??;
        let now = reply.first().copied().unwrap_or(0);
        Ok((now, reply.into_iter().skip(1).collect()))
    }
}
