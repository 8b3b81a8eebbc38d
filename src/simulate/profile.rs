//! Offered load over time: built-in profiles (in multiples of the server's capacity, split
//! between the tiers by a mix) or a CSV trace of requests per second by tier.

use crate::tier::Tier;

/// One stretch of a profile: load moving linearly from `from` to `to` (× capacity) over
/// `seconds`, with the server's service time multiplied by `slowdown`.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Its name in the summary.
    pub name: String,
    /// How long it lasts.
    pub seconds: f64,
    /// Offered load at its start and end, in multiples of the capacity.
    pub from: f64,
    /// See `from`.
    pub to: f64,
    /// Service time multiplier (2 = the server runs at half its capacity).
    pub slowdown: f64,
}

impl Phase {
    fn flat(name: &str, seconds: f64, load: f64) -> Self {
        Self {
            name: name.to_owned(),
            seconds,
            from: load,
            to: load,
            slowdown: 1.0,
        }
    }
}

/// The built-in profiles, by name, with what each is for.
pub const BUILT_IN: [(&str, &str); 6] = [
    ("step", "0.5C for 60 s, 2C for 300 s, 0.3C for 300 s"),
    ("ramp", "0.2C rising to 3C over 300 s, then falling back over 300 s"),
    ("spike", "0.5C for 60 s, 4C for 30 s, 0.5C for 300 s"),
    (
        "scorecard",
        "0.5C 60 s, 0.75C 180 s, 2C 240 s, 4C 60 s, 0.3C 300 s, 1.5C with the service time doubled 120 s, 1.5C 60 s (the phases of bench overload's scorecard)",
    ),
    (
        "capacity_drop",
        "0.75C for 60 s, then the service time doubles for 120 s (1.5× the reduced capacity), then 0.75C for 180 s",
    ),
    (
        "matrix",
        "0.5C 60 s, 0.75C 180 s, 2C 240 s, 4C 60 s, 0.3C 120 s, 10C 20 s, 0.3C 30 s, 1.5C with the capacity halved 80 s, 0.3C 150 s, 0.3C rising to 3C over 300 s (the phases of bench overload's app matrix)",
    ),
];

/// A built-in profile by name.
pub fn built_in(name: &str) -> Option<Vec<Phase>> {
    let phases = match name {
        "step" => vec![
            Phase::flat("0.5C", 60.0, 0.5),
            Phase::flat("2C", 300.0, 2.0),
            Phase::flat("0.3C", 300.0, 0.3),
        ],
        "ramp" => vec![
            Phase {
                to: 3.0,
                ..Phase::flat("ramp up", 300.0, 0.2)
            },
            Phase {
                to: 0.2,
                ..Phase::flat("ramp down", 300.0, 3.0)
            },
        ],
        "spike" => vec![
            Phase::flat("0.5C", 60.0, 0.5),
            Phase::flat("4C", 30.0, 4.0),
            Phase::flat("after", 300.0, 0.5),
        ],
        "scorecard" => vec![
            Phase::flat("0.5C", 60.0, 0.5),
            Phase::flat("0.75C", 180.0, 0.75),
            Phase::flat("2C", 240.0, 2.0),
            Phase::flat("4C", 60.0, 4.0),
            Phase::flat("0.3C", 300.0, 0.3),
            Phase {
                slowdown: 2.0,
                ..Phase::flat("drop 1.5C", 120.0, 1.5)
            },
            Phase::flat("restored 1.5C", 60.0, 1.5),
        ],
        "matrix" => vec![
            Phase::flat("0.5C", 60.0, 0.5),
            Phase::flat("0.75C", 180.0, 0.75),
            Phase::flat("2C", 240.0, 2.0),
            Phase::flat("4C", 60.0, 4.0),
            Phase::flat("0.3C", 120.0, 0.3),
            Phase::flat("10C spike", 20.0, 10.0),
            Phase::flat("after 0.3C", 30.0, 0.3),
            Phase {
                slowdown: 2.0,
                ..Phase::flat("halved 1.5C", 80.0, 1.5)
            },
            Phase::flat("back 0.3C", 150.0, 0.3),
            Phase {
                to: 3.0,
                ..Phase::flat("ramp 0.3C to 3C", 300.0, 0.3)
            },
        ],
        "capacity_drop" => vec![
            Phase::flat("0.75C", 60.0, 0.75),
            Phase {
                slowdown: 2.0,
                ..Phase::flat("half capacity", 120.0, 0.75)
            },
            Phase::flat("restored", 180.0, 0.75),
        ],
        _ => return None,
    };
    Some(phases)
}

/// Every phase shortened `factor` times (for a quick run); at least one second each.
pub fn compress(phases: &mut [Phase], factor: f64) {
    for p in phases {
        p.seconds = (p.seconds / factor).max(1.0);
    }
}

/// The phases `bench overload --compress` keeps at their length: a spike and the 30 s after
/// it (judged per 5 s), and the rest before the ramp (the controller's slow return).
pub const KEPT_WHOLE: [&str; 3] = ["10C spike", "after 0.3C", "back 0.3C"];

/// Every phase shortened `factor` times as `bench overload --compress` shortens them: at
/// least two seconds each, [`KEPT_WHOLE`] as they are.
pub fn compress_like_bench(phases: &mut [Phase], factor: f64) {
    for p in phases
        .iter_mut()
        .filter(|p| !KEPT_WHOLE.contains(&p.name.as_str()))
    {
        p.seconds = (p.seconds / factor).max(2.0);
    }
}

/// A trace: one row per second of requests per second by tier, in `Tier::ALL` order.
pub type Trace = Vec<[f64; 4]>;

/// Parses a CSV trace: one line per second, `critical,post,get,test` requests per second; an
/// optional header line naming those columns; `#` comments and blank lines are skipped.
/// Errors name the line.
pub fn parse_trace(text: &str) -> Result<Trace, String> {
    let mut rows = Trace::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if rows.is_empty() && fields == Tier::ALL.map(Tier::as_str) {
            continue;
        }
        let [critical, post, get, test] = fields[..] else {
            return Err(format!(
                "line {}: want 4 columns (critical,post,get,test requests per second), got {}",
                n + 1,
                fields.len()
            ));
        };
        let mut row = [0.0; 4];
        for (slot, field) in row.iter_mut().zip([critical, post, get, test]) {
            *slot = match field.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => v,
                _ => {
                    return Err(format!(
                        "line {}: {field:?} is not a number of requests per second (0 or more)",
                        n + 1
                    ))
                }
            };
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err("the trace has no rows".into());
    }
    Ok(rows)
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
