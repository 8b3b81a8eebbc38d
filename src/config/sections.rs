//! The embedding application's own sections of the configuration file.
//!
//! One file can configure brownout and the program that embeds it: brownout reads `admin`,
//! `classifier`, `limiters` and `store`, and refuses any other top-level key as a typo, unless
//! the program names it as one of its own sections
//! ([`Config::from_yaml_str_with_sections`]). brownout keeps those sections as written and
//! never interprets them; the program reads its own with [`app_section`], which gives the same
//! errors (dotted key, what was expected, line) as brownout's sections. A reload that changes
//! an application section is refused by the key's name, since brownout cannot apply it and
//! the program read it at start.

use super::{Config, ConfigError};
use crate::schema::parse;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// brownout's own top-level sections.
const OWN: [&str; 4] = ["admin", "classifier", "limiters", "store"];

/// The application sections a file was read with: their names, and what each says (as
/// JSON values), to tell whether a reload changes one.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AppSections {
    names: Vec<String>,
    values: BTreeMap<String, Value>,
}

impl AppSections {
    /// The names the file was read with (what a reload reads it with again).
    pub(crate) fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The first dotted key whose value differs between `self` and `new`, if any.
    pub(crate) fn first_change(&self, new: &AppSections) -> Option<String> {
        let null = Value::Null;
        self.names.iter().find_map(|name| {
            let a = self.values.get(name).unwrap_or(&null);
            let b = new.values.get(name).unwrap_or(&null);
            first_difference(a, b, name)
        })
    }
}

/// The dotted key under `at` where `a` and `b` first differ.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let null = Value::Null;
                first_difference(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &format!("{at}.{k}"),
                )
            })
        }
        _ => (a != b).then(|| at.to_owned()),
    }
}

/// Reads the whole file: brownout's sections into a [`Config`], the application's as written.
pub(super) struct WholeFile<'a> {
    pub(super) sections: &'a [&'a str],
}

impl<'de> DeserializeSeed<'de> for WholeFile<'_> {
    type Value = Config;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Config, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WholeFile<'_> {
    type Value = Config;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of sections")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
        let mut config = Config::default();
        config.app.names = self.sections.iter().map(|s| (*s).to_owned()).collect();
        let known = TopKey {
            sections: self.sections,
        };
        while let Some(key) = map.next_key_seed(known)? {
            match key.as_str() {
                "admin" => config.admin = map.next_value()?,
                "classifier" => config.classifier = map.next_value()?,
                "limiters" => config.limiters = map.next_value()?,
                "store" => config.store = map.next_value()?,
                name if self.sections.contains(&name) => {
                    let value: Value = map.next_value()?;
                    config.app.values.insert(key, value);
                }
                _ => unreachable!("TopKey refuses other keys"),
            }
        }
        Ok(config)
    }
}

/// A top-level key: one of brownout's sections or the program's, else refused (while the
/// key is read, so that the error names it and its line).
#[derive(Clone, Copy)]
struct TopKey<'a> {
    sections: &'a [&'a str],
}

impl<'de> DeserializeSeed<'de> for TopKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<String, D::Error> {
        de.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for TopKey<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a section name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<String, E> {
        if OWN.contains(&key) || self.sections.contains(&key) {
            return Ok(key.to_owned());
        }
        // serde's words for an unknown field, which the parser's messages turn into the file's.
        let known: Vec<&str> = OWN.iter().chain(self.sections).copied().collect();
        Err(E::custom(format!(
            "unknown field `{key}`, expected one of {}",
            known.join(", ")
        )))
    }
}

/// Reads one top-level section and nothing else.
struct OneSection<'a, T> {
    name: &'a str,
    out: std::marker::PhantomData<T>,
}

impl<'de, T: DeserializeOwned + Default> DeserializeSeed<'de> for OneSection<'_, T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned + Default> Visitor<'de> for OneSection<'_, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of sections")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.unwrap_or_default())
    }
}

/// Reads the application's own top-level section `name` of the configuration file `text`
/// (its default where the file has none), with brownout's errors: a type error, an unknown
/// or a duplicate key names the dotted key, what was expected and the line. Then `check`
/// validates it: an error it returns (see [`ConfigError::invalid`]) gets the line where its
/// key is written. brownout's own sections are not read here.
///
/// # Errors
/// The first problem, as a [`ConfigError`].
///
/// # Examples
/// ```
/// use brownout::config::{app_section, ConfigError};
///
/// #[derive(serde::Deserialize, Default, Debug)]
/// #[serde(deny_unknown_fields, default)]
/// struct Shop {
///     workers: u32,
/// }
///
/// let text = "shop:\n  workers: 0\nlimiters:\n  request_rate:\n    rate: 5\n";
/// let config = brownout::Config::from_yaml_str_with_sections(text, &["shop"])?;
/// assert_eq!(config.limiters.request_rate.rate, 5.0);
/// let err = app_section::<Shop>(text, "shop", |s| match s.workers {
///     0 => Err(ConfigError::invalid("shop.workers", "must be at least 1")),
///     _ => Ok(()),
/// })
/// .unwrap_err();
/// assert_eq!(err.to_string(), "shop.workers must be at least 1 (line 2)");
/// # Ok::<(), brownout::Report>(())
/// ```
pub fn app_section<T: DeserializeOwned + Default>(
    text: &str,
    name: &str,
    check: impl FnOnce(&T) -> Result<(), ConfigError>,
) -> Result<T, ConfigError> {
    let section = parse::with_seed(
        text,
        OneSection {
            name,
            out: std::marker::PhantomData,
        },
    )?;
    check(&section).map_err(|e| e.located(text))?;
    Ok(section)
}

/// Parses `text` into brownout's sections, keeping the application `sections` as written; an
/// empty file (nothing but comments) is an error, not a default config.
pub(crate) fn yaml(text: &str, sections: &[&str]) -> Result<Config, ConfigError> {
    parse::with_seed(text, WholeFile { sections })
}

#[cfg(test)]
#[path = "sections_tests.rs"]
mod tests;
