//! The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) of the request-rate
//! limiter's answers: the policies in force, what is left under each, and when, consistent
//! with `Retry-After`. The limiter says what it saw ([`RateStatus`]); this writes it down.

use crate::limiter::request_rate::{saturate, secs_up, RateRules, RateStatus};
use crate::limiter::{LimiterName, RatePolicy, Rejection};
use crate::store::MAX_QUOTAS;
use arrayvec::ArrayVec;
use bytes::Bytes;
use std::fmt::Write;

/// A header value of the front door at hand: actix's, or the `http` 1 crate's (the tower
/// layer). The fields are written once as bytes and cloned from the caches as values.
pub(crate) trait FieldValue: Clone {
    /// `bytes` as a value, if it is one (visible ASCII, spaces and tabs).
    fn from_shared(bytes: Bytes) -> Option<Self>;
    /// The value's bytes.
    fn bytes(&self) -> &[u8];
}

#[cfg(feature = "actix")]
impl FieldValue for actix_web::http::header::HeaderValue {
    fn from_shared(bytes: Bytes) -> Option<Self> {
        Self::from_maybe_shared(bytes).ok()
    }

    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(feature = "tower")]
impl FieldValue for http::HeaderValue {
    fn from_shared(bytes: Bytes) -> Option<Self> {
        Self::from_maybe_shared(bytes).ok()
    }

    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// `text` as a value, or an empty one.
fn value_or_empty<V: FieldValue>(text: String) -> V {
    V::from_shared(Bytes::from(text))
        .or_else(|| V::from_shared(Bytes::new()))
        .expect("an empty header value is valid")
}

/// `RateLimit-Policy` of every plan, normal and while elastic, for a request no quota
/// applies to: the bucket (`q` credits, `w` the seconds to refill it from empty) and the
/// per-IP ceiling. Computed once per settings version and worker; [`policy`] adds the quotas
/// of a request's route.
pub(crate) fn policies<V: FieldValue>(rules: &RateRules) -> Vec<[V; 2]> {
    let tail = match rules.per_ip_limits {
        Some((burst, rate)) => format!(", {}", item("per_ip", burst, rate)),
        None => String::new(),
    };
    (0..rules.plan_count())
        .map(|i| {
            rules.plan_at(i).limits.map(|(burst, rate)| {
                value_or_empty(format!("{}{tail}", item("request_rate", burst, rate)))
            })
        })
        .collect()
}

/// The `RateLimit-Policy` of a request whose plan's policies are `base`: with the quotas
/// its route was counted in (`q` requests per `w` seconds), and only those.
pub(crate) fn policy<V: FieldValue>(base: &V, rules: &RateRules, status: &RateStatus) -> Option<V> {
    if status.quotas().is_empty() {
        return Some(base.clone());
    }
    let mut text = std::str::from_utf8(base.bytes()).ok()?.to_owned();
    for &(i, _, _) in status.quotas() {
        let q = rules.quotas.get(usize::from(i))?;
        let _ = write!(
            text,
            ", \"{}\";q={};w={}",
            q.name,
            q.rule.limit,
            secs_up(q.rule.window)
        );
    }
    V::from_shared(Bytes::from(text))
}

fn item(name: &str, burst: f64, rate: f64) -> String {
    format!(
        "\"{name}\";q={};w={}",
        burst.floor() as u64,
        (burst / rate).ceil() as u64
    )
}

/// The `RateLimit` field of a response the app answered: the bucket (credits left, seconds
/// until it is full) and each quota evaluated (requests left, seconds until its window ends).
// The actix middleware's (the tower layer has its own cache).
#[cfg_attr(not(feature = "actix"), allow(dead_code))]
pub(crate) fn allowed<V: FieldValue>(rules: &RateRules, status: &RateStatus) -> Option<V> {
    service_limits(rules, status, u32::MAX)
}

/// The items of an allowed response's `RateLimit` field: (which, remaining, reset), `which`
/// being 0 for the bucket, 1 for the per-IP ceiling and 2 + i for quota i.
type Items = ArrayVec<(u16, u32, u32), { 2 + MAX_QUOTAS }>;

/// The last allowed `RateLimit` field a worker wrote, by what it says: the next response
/// that says the same (most clients, far from their limits, read the same credits left and
/// the same seconds to full) clones it instead of writing, checking and allocating another.
#[derive(Debug)]
pub(crate) struct LastField<V> {
    version: u64,
    items: Items,
    value: Option<V>,
}

impl<V> Default for LastField<V> {
    fn default() -> Self {
        Self {
            version: 0,
            items: Items::new(),
            value: None,
        }
    }
}

impl<V: FieldValue> LastField<V> {
    /// [`allowed`] under the settings of `version`, from this cache when it says the same.
    pub(crate) fn allowed(
        &mut self,
        version: u64,
        rules: &RateRules,
        status: &RateStatus,
    ) -> Option<V> {
        let mut items = Items::new();
        items_into(rules, status, u32::MAX, &mut items)?;
        if self.version != version || self.items != items || self.value.is_none() {
            let value = write(rules, &items)?;
            *self = Self {
                version,
                items,
                value: Some(value),
            };
        }
        self.value.clone()
    }
}

/// A worker's (or a thread's) RateLimit fields: the `RateLimit-Policy` values of the live
/// settings version, and the last allowed `RateLimit` field, so that a response clones what
/// its own worker wrote, touching no cache line that other workers use.
#[derive(Debug)]
pub(crate) struct FieldCache<V> {
    version: u64,
    policies: Vec<[V; 2]>,
    last: LastField<V>,
}

impl<V> Default for FieldCache<V> {
    fn default() -> Self {
        Self {
            version: 0,
            policies: Vec::new(),
            last: LastField::default(),
        }
    }
}

impl<V: FieldValue> FieldCache<V> {
    /// The `RateLimit-Policy` value for `status` under `settings`.
    pub(crate) fn policy(
        &mut self,
        settings: &crate::engine::Settings,
        status: &RateStatus,
    ) -> Option<V> {
        if self.version != settings.version || self.policies.is_empty() {
            self.version = settings.version;
            self.policies = policies(&settings.rules);
        }
        let plan = self.policies.get(usize::from(status.plan))?;
        policy(&plan[usize::from(status.elastic)], &settings.rules, status)
    }

    /// The `RateLimit` value of an allowed response for `status` under `settings`.
    pub(crate) fn allowed(
        &mut self,
        settings: &crate::engine::Settings,
        status: &RateStatus,
    ) -> Option<V> {
        self.last.allowed(settings.version, &settings.rules, status)
    }
}

/// The `RateLimit` field of a rejected response that says `Retry-After: retry_secs`.
///
/// The draft asks that Retry-After not point earlier than the end of any effective window
/// (`t`) in the same response. So a request this limiter rejected reports only the policy it
/// violated, with `t` equal to Retry-After (when enough of it is back for this request; `r` is
/// what is left now, in credits); a request another limiter rejected reports only the policies
/// whose window ends by then.
pub(crate) fn rejected<V: FieldValue>(
    rules: &RateRules,
    status: &RateStatus,
    rejection: &Rejection,
    retry_secs: u64,
) -> Option<V> {
    let t = saturate(retry_secs);
    if rejection.limiter != LimiterName::RequestRate {
        return service_limits(rules, status, t);
    }
    let (name, remaining) = match rejection.policy {
        None => ("request_rate", rules.bucket_reading(status).0),
        Some(RatePolicy::PerIp) => {
            let ceiling = rules.per_ip.as_ref()?;
            (
                "per_ip",
                saturate(ceiling.remaining(status.ip_tat, status.at)),
            )
        }
        Some(RatePolicy::Quota(i)) => {
            let left = status
                .quotas()
                .iter()
                .find(|q| q.0 == i)
                .map_or(0, |q| u32::from(q.1));
            (rules.quotas.get(usize::from(i))?.name.as_str(), left)
        }
    };
    let mut field = Field::new();
    field.item(name, remaining, t);
    field.value()
}

/// The bucket, the per-IP ceiling and the quotas whose effective window ends within `max_t`
/// seconds.
fn service_limits<V: FieldValue>(rules: &RateRules, status: &RateStatus, max_t: u32) -> Option<V> {
    let mut items = Items::new();
    items_into(rules, status, max_t, &mut items)?;
    write(rules, &items)
}

/// What [`service_limits`] writes, as numbers, into `items` (empty; `None`: a quota the rules
/// do not have). Filled in place: the list is a few hundred bytes.
fn items_into(rules: &RateRules, status: &RateStatus, max_t: u32, items: &mut Items) -> Option<()> {
    let (remaining, reset) = rules.bucket_reading(status);
    if reset <= max_t {
        items.push((0, remaining, reset));
    }
    // The ceiling the config sets (the automatic one is not advertised).
    if let (Some(ceiling), Some(_)) = (&rules.per_ip, rules.per_ip_limits) {
        let reset = secs_up(status.ip_tat.saturating_sub(status.at));
        if reset <= max_t {
            let remaining = saturate(ceiling.remaining(status.ip_tat, status.at));
            items.push((1, remaining, reset));
        }
    }
    for &(i, remaining, reset) in status.quotas() {
        if reset > max_t {
            continue;
        }
        rules.quotas.get(usize::from(i))?;
        let _ = items.try_push((2 + u16::from(i), u32::from(remaining), reset));
    }
    Some(())
}

/// The field of `items`, named as `rules` names them.
fn write<V: FieldValue>(rules: &RateRules, items: &Items) -> Option<V> {
    let mut field = Field::new();
    for &(which, remaining, reset) in items {
        let name = match which {
            0 => "request_rate",
            1 => "per_ip",
            q => rules.quotas.get(usize::from(q - 2))?.name.as_str(),
        };
        field.item(name, remaining, reset);
    }
    field.value()
}

/// A list of `"name";r=R;t=T` items, written without the formatting machinery (this runs on
/// every response of an enforced request_rate limiter) into a stack buffer, then copied into
/// one exactly sized allocation; long quota names spill to the heap.
struct Field {
    inline: [u8; INLINE],
    len: usize,
    spill: Vec<u8>,
}

/// Bytes a field holds on the stack: the bucket and two or three quotas.
const INLINE: usize = 128;

impl Field {
    fn new() -> Self {
        Self {
            inline: [0; INLINE],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.spill.is_empty() && self.len + bytes.len() <= INLINE {
            self.inline[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
            return;
        }
        if self.spill.is_empty() {
            self.spill.extend_from_slice(&self.inline[..self.len]);
        }
        self.spill.extend_from_slice(bytes);
    }

    fn item(&mut self, name: &str, remaining: u32, reset: u32) {
        // The common case: the item fits the stack buffer, written in place (the fixed parts as
        // fixed-size stores, the numbers digit by digit) instead of a copy per piece.
        let most = 2 + 1 + name.len() + 4 + 10 + 3 + 10;
        if self.spill.is_empty() && self.len + most <= INLINE {
            let (buf, mut at) = (&mut self.inline, self.len);
            if at != 0 {
                buf[at..at + 2].copy_from_slice(b", ");
                at += 2;
            }
            buf[at] = b'"';
            at += 1;
            buf[at..at + name.len()].copy_from_slice(name.as_bytes());
            at += name.len();
            buf[at..at + 4].copy_from_slice(b"\";r=");
            at = digits(buf, at + 4, remaining);
            buf[at..at + 3].copy_from_slice(b";t=");
            self.len = digits(buf, at + 3, reset);
            return;
        }
        if self.len != 0 {
            self.push(b", ");
        }
        self.push(b"\"");
        self.push(name.as_bytes());
        self.push(b"\";r=");
        self.number(remaining);
        self.push(b";t=");
        self.number(reset);
    }

    fn number(&mut self, mut n: u32) {
        let mut digits = [0u8; 10];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    /// The field as a header value (`None` if it is empty). (By reference: moving the field
    /// would copy its buffer once more.)
    fn value<V: FieldValue>(&self) -> Option<V> {
        let written = if self.spill.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spill[..]
        };
        if written.is_empty() {
            return None;
        }
        V::from_shared(Bytes::copy_from_slice(written))
    }
}

/// Writes `n` in decimal into `buf` at `at` (there is room for ten digits); returns where it
/// ends.
fn digits(buf: &mut [u8; INLINE], at: usize, mut n: u32) -> usize {
    let len = match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1_000..=9_999 => 4,
        10_000..=99_999 => 5,
        100_000..=999_999 => 6,
        1_000_000..=9_999_999 => 7,
        10_000_000..=99_999_999 => 8,
        100_000_000..=999_999_999 => 9,
        _ => 10,
    };
    let end = at + len;
    for slot in buf[at..end].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    end
}

#[cfg(test)]
#[path = "ratelimit_tests.rs"]
mod tests;
