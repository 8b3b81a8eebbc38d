//! A store whose concurrency operations fail or panic, over a real memory store: what the
//! request path does when a limiter's store breaks (it fails open, counted).

use brownout::limiter::LimiterName;
use brownout::store::{StoreError, Table};

/// A store whose concurrency operations fail (or panic) on demand, over a real memory store.
pub struct Faulty {
    inner: brownout::store::MemoryStore,
    panic: bool,
    /// Whether the charges of a bucket of more than one request time out.
    buckets: bool,
}

impl Faulty {
    /// Over a memory store for the default limiters; its concurrency operations panic when
    /// `panic`, else time out.
    pub fn new(panic: bool) -> Self {
        Self {
            inner: brownout::store::MemoryStore::for_limiters(
                &brownout::Config::default().limiters,
            ),
            panic,
            buckets: false,
        }
    }

    /// Over a memory store for the default limiters; the charge of a bucket of more than one
    /// request times out, or panics when `panic` (a one-credit per-IP ceiling passes, the
    /// client's own bucket fails).
    pub fn large_buckets(panic: bool) -> Self {
        Self {
            buckets: true,
            ..Self::new(panic)
        }
    }
}

impl brownout::store::Store for Faulty {
    fn peek(&self, table: Table, key: u64) -> Result<Option<u64>, StoreError> {
        self.inner.peek(table, key)
    }
    fn gcra(
        &self,
        table: Table,
        key: u64,
        now: u64,
        charge: brownout::limiter::gcra::BucketCharge,
    ) -> Result<brownout::limiter::gcra::Charge, brownout::store::StoreError> {
        if self.buckets && charge.tolerance > charge.increment {
            if self.panic {
                panic!("the bucket's store panicked");
            }
            return Err(StoreError::Timeout);
        }
        self.inner.gcra(table, key, now, charge)
    }
    fn gcra_refund(&self, table: Table, key: u64, inc: u64) -> Result<(), StoreError> {
        self.inner.gcra_refund(table, key, inc)
    }
    fn window(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &brownout::limiter::window::WindowRule,
        count: bool,
    ) -> Result<brownout::limiter::window::WindowCheck, StoreError> {
        self.inner.window(table, key, now, rule, count)
    }
    fn window_refund(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &brownout::limiter::window::WindowRule,
    ) -> Result<(), StoreError> {
        self.inner.window_refund(table, key, now, rule)
    }
    fn slot_take(&self, table: Table, key: u64, max: u64) -> Result<bool, StoreError> {
        if table != LimiterName::ConcurrentRequests.table(0) {
            return self.inner.slot_take(table, key, max);
        }
        if self.panic {
            panic!("store bug");
        }
        Err(StoreError::Timeout)
    }
    fn slot_give(&self, table: Table, key: u64) {
        self.inner.slot_give(table, key)
    }
    fn evict_idle(
        &self,
        now: u64,
        unix_now: u64,
        windows: &[(Table, brownout::limiter::window::WindowRule)],
    ) {
        self.inner.evict_idle(now, unix_now, windows)
    }
    fn tracked_keys(&self, table: Table) -> Option<usize> {
        self.inner.tracked_keys(table)
    }
}
