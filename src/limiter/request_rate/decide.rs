//! request_rate's decision on its replies: the per-IP ceiling, the client's bucket, then the
//! quotas, in the order it asked them (`RateRules::add_to_ask`).

use super::{increment, quota_table, secs_up, unmemo, RateAdmit, RateRules, RateStatus, RateTicket};
use super::{CheckTime, Charges, BUCKETS, REPORTED_QUOTAS};
use crate::limiter::{Check, LimiterName, RatePolicy, RejectStatus, Rejection, Request};
use crate::math::gcra::Charge;
use crate::store::{Op, Replies, Store, StoreError};
use std::time::Duration;

impl RateRules {
    /// Decides one request on the store's replies `rate` to its group (what
    /// [`add_to_ask`](Self::add_to_ask) asked), checked at `at`. A refused request took nothing (its
    /// ticket is empty); an admitted one's ticket holds what the store kept, to give back
    /// if a later limiter refuses it.
    pub fn decide(
        &self,
        rate: Replies<'_>,
        req: &Request<'_>,
        at: CheckTime,
    ) -> Result<Check<RateAdmit, RateStatus>, StoreError> {
        let now = at.mono;
        let unanswered = || StoreError::Failed("the store did not answer for request_rate".into());
        let written = rate.written();
        let (plan, elastic) = unmemo(rate.memo());
        let mut status = RateStatus {
            plan,
            elastic,
            at: now,
            ..RateStatus::default()
        };
        let mut ticket = RateTicket {
            key: req.key,
            ip: req.ip,
            ..RateTicket::default()
        };
        let reject = |retry_us: u64, policy: Option<RatePolicy>| refusal(req, retry_us, policy);
        // The per-IP ceiling first, when there is one; then the client's bucket, then the
        // quotas.
        let ops = rate.ops();
        let buckets = ops
            .iter()
            .take_while(|op| matches!(op, Op::Gcra { .. }))
            .count();
        let (ceiling, bucket) = match &ops[..buckets] {
            [bucket] => (None, bucket),
            [ceiling, bucket] => (Some(ceiling), bucket),
            _ => return Err(unanswered()),
        };
        if let Some(ceiling) = ceiling {
            let params = self.per_ip.as_ref().ok_or_else(unanswered)?;
            match rate.charge(0, now).ok_or_else(unanswered)? {
                Charge::Denied { tat, wait } => {
                    status.ip_tat = tat;
                    let rejection = reject(params.retry_after(wait), Some(RatePolicy::PerIp));
                    return Ok(Check::Rejected(rejection, status));
                }
                Charge::Allowed { tat } => {
                    status.ip_tat = tat;
                    if written {
                        ticket.ip_increment = increment(ceiling);
                    }
                }
            }
        }
        let charged_tat = match rate.charge(buckets - 1, now).ok_or_else(unanswered)? {
            Charge::Allowed { tat } => tat,
            Charge::Denied { tat, wait } => {
                let params = self.bucket(usize::from(plan), elastic);
                let rejection = reject(params.retry_after(wait), None);
                return Ok(Check::Rejected(rejection, status.with_tat(tat)));
            }
        };
        // A charge past the bucket's tolerance took a turn in its queue (`excess: delay`):
        // the request is held until the TAT is back within it. (Not written: a later
        // limiter refused it, and its turn was given back.)
        let mut pace = 0;
        if written {
            ticket.increment = increment(bucket);
            let tolerance = self.bucket(usize::from(plan), elastic).tolerance();
            pace = charged_tat.saturating_sub(now).saturating_sub(tolerance);
        }
        status.tat = charged_tat;
        // The bucket as it reads if this request's charge is given back.
        let refunded = charged_tat.saturating_sub(increment(bucket));
        let first_quota = quota_table(0).id();
        for (j, op) in ops.iter().enumerate().skip(buckets) {
            let Op::Window { table, count, .. } = *op else {
                return Err(unanswered());
            };
            let check = rate.window(j).ok_or_else(unanswered)?;
            let i = table.id() - first_quota;
            if status.reported < REPORTED_QUOTAS as u8 {
                let remaining = u16::try_from(check.remaining).unwrap_or(u16::MAX);
                status.quotas[status.reported as usize] =
                    (i as u8, remaining, secs_up(check.reset));
                status.reported += 1;
            }
            if !check.allowed {
                let rejection = reject(check.retry, Some(RatePolicy::Quota(i as u8)));
                return Ok(Check::Rejected(rejection, status.with_tat(refunded)));
            }
            if !count {
                ticket.failures |= 1 << i;
            } else if written {
                ticket.counted |= 1 << i;
            }
        }
        Ok(Check::Allowed(RateAdmit {
            status,
            refunded,
            ticket,
            pace,
        }))
    }

    /// [`decide`](Self::decide) on the per-IP ceiling and the client's bucket alone
    /// (`Decider::RateAlone`), charged in `store` at once at `now` µs. A ceiling charged
    /// goes back if the bucket refuses or fails (a group keeps nothing then).
    #[inline]
    pub(crate) fn charge_alone(
        &self,
        store: &dyn Store,
        req: &Request<'_>,
        now: u64,
    ) -> Result<Check, StoreError> {
        let Charges {
            plan,
            bucket,
            ceiling,
        } = self.charges(req, false);
        if let Some((params, c)) = self.per_ip.as_ref().zip(ceiling) {
            if let Charge::Denied { wait, .. } = store.gcra(BUCKETS, c.key, now, c.charge)? {
                let retry = params.retry_after(wait);
                return Ok(Check::Rejected(refusal(req, retry, Some(RatePolicy::PerIp)), ()));
            }
        }
        let answer = store.gcra(BUCKETS, bucket.key, now, bucket.charge);
        let kept = matches!(answer, Ok(Charge::Allowed { .. }));
        if let Some(c) = ceiling.filter(|_| !kept) {
            let _ = store.gcra_refund(BUCKETS, c.key, c.charge.increment);
        }
        match answer? {
            Charge::Allowed { .. } => Ok(Check::Allowed(())),
            Charge::Denied { wait, .. } => {
                let retry = self.bucket(plan, false).retry_after(wait);
                Ok(Check::Rejected(refusal(req, retry, None), ()))
            }
        }
    }
}

/// request_rate's refusal of `req`, to retry in `retry_us` µs.
fn refusal(req: &Request<'_>, retry_us: u64, policy: Option<RatePolicy>) -> Rejection {
    Rejection {
        limiter: LimiterName::RequestRate,
        tier: req.tier,
        status: RejectStatus::TooManyRequests,
        retry_after: Duration::from_micros(retry_us),
        policy,
    }
}
