//! What both front doors (the actix middleware, the tower layer) answer a refused request
//! with: its status, `Retry-After`, the RateLimit fields and an RFC 9457 problem+json body.

use super::ratelimit::{self, FieldValue};
use crate::engine::Settings;
use crate::limiter::request_rate::RateStatus;
use crate::limiter::{RatePolicy, RejectStatus, Rejection};
use serde_json::{json, Value};
use std::time::Duration;

/// Whole seconds, rounded up, at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// "1 second", "8 seconds".
fn seconds(n: u64) -> String {
    if n == 1 {
        "1 second".to_owned()
    } else {
        format!("{n} seconds")
    }
}

/// The media type of every refusal's body.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// A problem+json body; `extra` members are merged into it.
pub(crate) fn problem_body(status: u16, title: &str, detail: &str, extra: Value) -> Value {
    let mut body = json!({
        "type": format!("urn:brownout:problem:{}", title.to_ascii_lowercase().replace(' ', "-")),
        "title": title,
        "status": status,
        "detail": detail,
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}

/// A refusal as any framework answers it: the status, `Retry-After` (s) and the
/// problem+json body naming the limiter, the tier, the request-rate policy other than the
/// client's bucket that was exceeded (`per_ip` or a quota's name), and when to retry.
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) retry_after: u64,
    /// The problem's title (a gRPC client reads it as the status message).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) title: &'static str,
    pub(crate) body: String,
}

impl Refusal {
    /// The refusal of `r`, naming `policy`.
    pub(crate) fn of(r: &Rejection, policy: Option<&str>) -> Self {
        let secs = retry_after_secs(r.retry_after);
        let wait = seconds(secs);
        let status = match r.status {
            RejectStatus::TooManyRequests => 429,
            RejectStatus::ServiceUnavailable => 503,
        };
        let (title, detail) = r.limiter.problem(r, policy, &wait);
        let mut extra = json!({
            "limiter": r.limiter.as_str(),
            "tier": r.tier.as_str(),
            "retry_after_seconds": secs,
        });
        if let (Some(name), Some(map)) = (policy, extra.as_object_mut()) {
            let member = match r.policy {
                Some(RatePolicy::PerIp) => "policy",
                Some(RatePolicy::Quota(_)) | None => "quota",
            };
            map.insert(member.into(), name.into());
        }
        Self {
            status,
            retry_after: secs,
            title,
            body: problem_body(status, title, &detail, extra).to_string(),
        }
    }

    /// The answer for a `tier` request stopped at `limiters.deadline.after` (with
    /// `deadline.cancel`): 503, retry in a second.
    pub(crate) fn deadline(after: Duration, tier: crate::tier::Tier) -> Self {
        let status = 503;
        let title = "Request took too long";
        let detail = format!(
            "The server stopped this {tier} request after {} ms without an answer: it is overloaded. Retry in 1 second.",
            after.as_millis()
        );
        let extra = json!({"limiter": "deadline", "tier": tier.as_str(), "retry_after_seconds": 1});
        Self {
            status,
            retry_after: 1,
            title,
            body: problem_body(status, title, &detail, extra).to_string(),
        }
    }
}

/// The RateLimit fields of a rejected response for `status`: `RateLimit-Policy` and the
/// `RateLimit` consistent with its `Retry-After` (`rejection`, and its Retry-After in
/// seconds).
pub(crate) fn rejected_fields<V: FieldValue>(
    settings: &Settings,
    policy: Option<V>,
    status: &RateStatus,
    (rejection, secs): (&Rejection, u64),
) -> [Option<V>; 2] {
    let value = ratelimit::rejected(&settings.rules, status, rejection, secs);
    [policy, value]
}

/// The request-rate policy other than the client's bucket that `rejection` names: `per_ip` or
/// a quota's name.
pub(crate) fn named_policy<'s>(settings: &'s Settings, rejection: &Rejection) -> Option<&'s str> {
    match rejection.policy {
        Some(RatePolicy::Quota(i)) => settings
            .rules
            .quotas
            .get(usize::from(i))
            .map(|q| q.name.as_str()),
        Some(RatePolicy::PerIp) => Some("per_ip"),
        None => None,
    }
}

#[cfg(test)]
#[path = "refusal_tests.rs"]
mod tests;
