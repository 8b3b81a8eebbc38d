use super::*;

// Helpers of the crate's tests (here, out of the published package).
impl MemoryStore {
    /// The limiters' tables sized `rate_keys` (request_rate's buckets and `quotas` windows)
    /// and `concurrency_keys` (concurrent_requests' permits), for tests.
    pub(crate) fn sized(rate_keys: usize, quotas: usize, concurrency_keys: usize) -> Self {
        let mut limiters = LimitersConfig::default();
        limiters.request_rate.max_keys = rate_keys;
        limiters.concurrent_requests.max_keys = concurrency_keys;
        let mut tables = limiters.tables();
        tables.extend((0..quotas).map(|i| {
            let table = request_rate::quota_table(i);
            TableSpec::new(table, crate::store::TableKind::Window, rate_keys)
        }));
        Self::with_tables(&tables)
    }
}

impl<H, R> Check<H, R> {
    /// The rejection, if this is one.
    pub(crate) fn rejection(&self) -> Option<Rejection> {
        match self {
            Check::Allowed(_) => None,
            Check::Rejected(r, _) => Some(*r),
        }
    }
}

#[test]
fn every_limiter_is_found_by_its_name_and_its_mode_is_its_own() {
    assert_eq!(LimiterName::ALL.len(), LimiterName::COUNT);
    for (i, l) in LimiterName::ALL.into_iter().enumerate() {
        assert_eq!(l as usize, i, "ALL is in index order");
        assert_eq!(LimiterName::parse(l.as_str()), Some(l));
        let mut limiters = LimitersConfig::default();
        l.set_mode(&mut limiters, Mode::Dark);
        for other in LimiterName::ALL {
            let dark = other.mode(&limiters) == Mode::Dark;
            assert_eq!(dark, other == l, "{other:?} after setting {l:?}");
        }
    }
    assert_eq!(
        LimiterName::names(),
        "request_rate, concurrent_requests, fleet_usage, adaptive_concurrency, worker_utilization"
    );
}

#[test]
fn every_limiter_words_its_refusals() {
    for l in LimiterName::ALL {
        for tier in Tier::ALL {
            let r = Rejection {
                limiter: l,
                tier,
                status: RejectStatus::ServiceUnavailable,
                retry_after: Duration::from_secs(2),
                policy: None,
            };
            let (title, detail) = l.problem(&r, None, "2 seconds");
            assert!(!title.is_empty(), "{l:?}");
            assert!(detail.contains("Retry"), "{l:?}: {detail}");
        }
    }
}
