//! The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) of the request-rate
//! limiter's answers: what is left under each policy, and when, consistent with `Retry-After`.

use super::{saturate, secs_up, RateStatus};
use crate::limiter::{LimiterName, RatePolicy, Rejection};
use actix_web::http::header::HeaderValue;
use std::fmt::Write;

impl super::RateRules {
    /// Credits left of the nominal burst and seconds until the bucket is full, as of the check.
    pub fn bucket_reading(&self, status: &RateStatus) -> (u32, u32) {
        let bucket = self.bucket(usize::from(status.plan), status.elastic);
        (
            saturate(bucket.remaining(status.tat, status.at)),
            secs_up(status.tat.saturating_sub(status.at)),
        )
    }

    /// The `RateLimit` field of a response the app answered: the bucket (credits left, seconds
    /// until it is full) and each quota evaluated (requests left, seconds until its window
    /// ends).
    pub fn rate_limit_header(&self, status: &RateStatus) -> Option<HeaderValue> {
        self.service_limits(status, u32::MAX)
    }

    /// The `RateLimit` field of a rejected response that says `Retry-After: retry_secs`.
    ///
    /// The draft (draft-ietf-httpapi-ratelimit-headers) asks that Retry-After not point
    /// earlier than the end of any effective window (`t`) in the same response. So a request
    /// this limiter rejected reports only the policy it violated, with `t` equal to
    /// Retry-After (when enough of it is back for this request; `r` is what is left now, in
    /// credits); a request another limiter rejected reports only the policies whose window
    /// ends by then.
    pub fn rejected_rate_limit_header(
        &self,
        status: &RateStatus,
        rejection: &Rejection,
        retry_secs: u64,
    ) -> Option<HeaderValue> {
        let t = saturate(retry_secs);
        if rejection.limiter != LimiterName::RequestRate {
            return self.service_limits(status, t);
        }
        let (name, remaining) = match rejection.policy {
            None => ("request_rate", self.bucket_reading(status).0),
            Some(RatePolicy::PerIp) => {
                let ceiling = self.per_ip.as_ref()?;
                (
                    "per_ip",
                    saturate(ceiling.remaining(status.ip_tat, status.at)),
                )
            }
            Some(RatePolicy::Quota(i)) => {
                let left = status.quotas[..usize::from(status.reported)]
                    .iter()
                    .find(|q| q.0 == i)
                    .map_or(0, |q| u32::from(q.1));
                (self.quotas.get(usize::from(i))?.name.as_str(), left)
            }
        };
        HeaderValue::from_str(&format!("\"{name}\";r={remaining};t={t}")).ok()
    }

    /// The bucket and the quotas whose effective window ends within `max_t` seconds.
    fn service_limits(&self, status: &RateStatus, max_t: u32) -> Option<HeaderValue> {
        let (remaining, reset) = self.bucket_reading(status);
        let mut value = String::new();
        if reset <= max_t {
            let _ = write!(value, "\"request_rate\";r={remaining};t={reset}");
        }
        for &(i, remaining, reset) in &status.quotas[..status.reported as usize] {
            if reset > max_t {
                continue;
            }
            let name = &self.quotas.get(usize::from(i))?.name;
            let sep = if value.is_empty() { "" } else { ", " };
            let _ = write!(value, "{sep}\"{name}\";r={remaining};t={reset}");
        }
        (!value.is_empty())
            .then(|| HeaderValue::from_str(&value).ok())
            .flatten()
    }
}
