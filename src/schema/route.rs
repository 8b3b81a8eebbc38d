//! Route patterns such as `POST /v1/charges/{id}`, matched without allocating.

/// One segment of a pattern's path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

/// A method and a path pattern; `{name}` matches one path segment, method `*` any method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePattern {
    method: Option<String>,
    segments: Vec<Segment>,
    /// For a pattern without `{param}`: its path after the leading slash, which a request's
    /// path (after its own) must equal exactly — one comparison instead of a walk.
    literal: Option<String>,
}

impl RoutePattern {
    /// Parses `"METHOD /path/{param}"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split_whitespace();
        let (Some(method), Some(path), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "must be \"METHOD /path\", like \"POST /v1/charges\" (got {text:?})"
            ));
        };
        if !path.starts_with('/') {
            return Err(format!("path must start with / (got {text:?})"));
        }
        let method = match method {
            "*" => None,
            m if m.bytes().all(|b| b.is_ascii_alphabetic()) => Some(m.to_ascii_uppercase()),
            m => return Err(format!("{m:?} is not an HTTP method")),
        };
        let segments = split(path)
            .map(|s| {
                if s.starts_with('{') && s.ends_with('}') && s.len() > 2 {
                    Segment::Param
                } else {
                    Segment::Literal(s.to_owned())
                }
            })
            .collect::<Vec<_>>();
        let literal = segments
            .iter()
            .all(|s| matches!(s, Segment::Literal(_)))
            .then(|| path.strip_prefix('/').unwrap_or(path).to_owned());
        Ok(Self {
            method,
            segments,
            literal,
        })
    }

    /// How specific the pattern is: literal segments first, then a named method. Among
    /// patterns that match the same request, the most specific one wins.
    pub fn specificity(&self) -> (usize, usize, bool) {
        let literals = self
            .segments
            .iter()
            .filter(|s| matches!(s, Segment::Literal(_)))
            .count();
        (self.segments.len(), literals, self.method.is_some())
    }

    /// Whether a request with this method and path matches.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        if let Some(m) = &self.method {
            if m != method {
                return false;
            }
        }
        if let Some(literal) = &self.literal {
            return path.strip_prefix('/').unwrap_or(path) == literal;
        }
        let mut want = self.segments.iter();
        for got in split(path) {
            match want.next() {
                // Like actix's `{name}`: one non-empty segment.
                Some(Segment::Param) if !got.is_empty() => {}
                Some(Segment::Literal(lit)) if lit == got => {}
                _ => return false,
            }
        }
        want.next().is_none()
    }
}

/// The segments of a path after its leading slash. Like actix's router, nothing is normalized:
/// a trailing slash, `//` or a dot segment is a segment of its own, so a pattern matches
/// exactly the paths that the same actix route would.
fn split(path: &str) -> impl Iterator<Item = &str> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    trimmed.split('/').filter(move |_| !trimmed.is_empty())
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
