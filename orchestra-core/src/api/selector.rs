//! Label and field selectors, parsed from their query-string syntax.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector (`app=web,tier in (a,b),!canary`). The empty
/// selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the query-string syntax.
    pub fn parse(input: &str) -> Result<LabelSelector, ApiError> {
        let mut requirements = Vec::new();
        for term in split_terms(input) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(term).ok_or_else(|| {
                ApiError::bad_request(format!("unable to parse requirement: invalid label selector {term:?}"))
            })?);
        }
        Ok(LabelSelector { requirements })
    }

    /// True if `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// True if the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        if self.is_empty() {
            return true;
        }
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        self.matches(&labels)
    }
}

/// Splits on commas outside parentheses.
fn split_terms(input: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_requirement(term: &str) -> Option<Requirement> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| Requirement::DoesNotExist(key.into()));
    }
    for (op, neg) in [(" notin ", true), (" in ", false)] {
        if let Some(at) = term.find(op) {
            let key = term[..at].trim();
            let set = term[at + op.len()..].trim().strip_prefix('(')?.strip_suffix(')')?;
            let values: Vec<String> = set.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect();
            if !valid_key(key) {
                return None;
            }
            return Some(if neg {
                Requirement::NotIn(key.into(), values)
            } else {
                Requirement::In(key.into(), values)
            });
        }
    }
    if let Some(at) = term.find("!=") {
        let (key, value) = (term[..at].trim(), term[at + 2..].trim());
        return valid_key(key).then(|| Requirement::NotEquals(key.into(), value.into()));
    }
    if let Some(at) = term.find('=') {
        let key = term[..at].trim();
        let value = term[at + 1..].trim_start_matches('=').trim();
        return valid_key(key).then(|| Requirement::Equals(key.into(), value.into()));
    }
    valid_key(term).then(|| Requirement::Exists(term.into()))
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=`): equality and
/// inequality on dotted field paths of the object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the query-string syntax.
    pub fn parse(input: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some(at) = term.find("!=") {
                (&term[..at], false, &term[at + 2..])
            } else if let Some(at) = term.find('=') {
                (&term[..at], true, term[at + 1..].trim_start_matches('='))
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}: no operator")));
            };
            if !valid_key(field.trim()) {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            }
            terms.push((field.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldSelector { terms })
    }

    /// True if the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value `metadata.name=` requires, if the selector pins one name.
    pub fn pinned_name(&self) -> Option<&str> {
        self.terms.iter().find(|(f, eq, _)| f == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }

    /// Checks every term's field against the labels the kind supports
    /// (400 `field label not supported: x`, like upstream).
    pub fn for_kind(self, group: &str, kind: &str) -> Result<FieldSelector, ApiError> {
        for (field, _, _) in &self.terms {
            super::fields::check_label(group, kind, field)?;
        }
        Ok(self)
    }

    /// True if the object satisfies every term. A missing field reads as ""
    /// (see [`field_value`](super::fields::field_value) for the exceptions).
    pub fn matches_object(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, equal, value)| (super::fields::field_value(object, field) == *value) == *equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selectors() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=web,tier=back", false),
            ("tier in (front, back)", true),
            ("tier notin (front)", false),
            ("canary notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!canary,app in (web)", true),
        ];
        for (selector, expected) in cases {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(&l), expected, "{selector}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}});
        assert!(FieldSelector::parse("metadata.name=p").unwrap().matches_object(&pod));
        assert!(FieldSelector::parse("spec.nodeName=n1,metadata.namespace==d").unwrap().matches_object(&pod));
        assert!(!FieldSelector::parse("spec.nodeName!=n1").unwrap().matches_object(&pod));
        assert!(FieldSelector::parse("status.phase=").unwrap().matches_object(&pod));
        assert_eq!(FieldSelector::parse("metadata.name=p").unwrap().pinned_name(), Some("p"));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
