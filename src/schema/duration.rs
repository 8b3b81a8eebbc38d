//! Human-readable durations in config files: `250ms`, `8s`, `2m`, `1h`, `1d`.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration written as a number and a unit (`ms`, `s`, `m`, `h`, `d`), e.g. `8s` or `1.5s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// From whole milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }

    /// From whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        Self(Duration::from_secs(s))
    }

    /// The wrapped duration.
    pub const fn get(self) -> Duration {
        self.0
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a duration; write a number and a unit, like 250ms, 8s, 2m, 1h or 1d")]
pub struct DurationParseError(String);

impl FromStr for HumanDuration {
    type Err = DurationParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DurationParseError(s.to_owned());
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| err())?;
        let unit_secs = match unit.trim() {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(err()),
        };
        let secs = value * unit_secs;
        if !(0.0..=1e12).contains(&secs) {
            return Err(err());
        }
        Ok(Self(Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        let units = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1000, "s"),
        ];
        for (size, name) in units {
            if ms >= size
                && ms.is_multiple_of(size)
                && self.0.subsec_nanos().is_multiple_of(1_000_000)
            {
                return write!(f, "{}{name}", ms / size);
            }
        }
        if self.0.subsec_nanos().is_multiple_of(1_000_000) {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", self.0.as_secs_f64())
        }
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 250ms, 8s, 2m, 1h or 1d")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
#[path = "duration_tests.rs"]
mod tests;
