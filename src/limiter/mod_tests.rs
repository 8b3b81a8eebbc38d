use super::*;

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
