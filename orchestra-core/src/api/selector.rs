//! Label and field selectors: the query-string syntax (`app=web,tier in
//! (a,b)`) and the typed `metav1.LabelSelector` of object specs (a
//! workload's `spec.selector`, an affinity term's `labelSelector`), matched
//! by one set of rules.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;

/// Why a typed label selector cannot be used: the errors of upstream's
/// `metav1.LabelSelectorAsSelector`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// `operator` is none of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{operator:?} is not a valid label selector operator (key {key:?})")]
    InvalidOperator {
        /// The requirement's key.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `In` or `NotIn` without values.
    #[error("for 'In', 'NotIn' operators, values set can't be empty (key {key:?})")]
    EmptyValues {
        /// The requirement's key.
        key: String,
    },
    /// `Exists` or `DoesNotExist` with values.
    #[error("values set must be empty for 'Exists', 'DoesNotExist' (key {key:?})")]
    UnexpectedValues {
        /// The requirement's key.
        key: String,
    },
    /// The JSON form does not decode as a `metav1.LabelSelector`.
    #[error("malformed label selector: {0}")]
    Malformed(String),
}

/// What a requirement asks of one label. `key=value` is `In` with one value,
/// `key!=value` is `NotIn` with one value: upstream gives them the same
/// meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    /// The operator of a typed requirement, checked against its values as
    /// upstream's `NewRequirement` does.
    fn of(requirement: &meta::LabelSelectorRequirement) -> Result<Operator, SelectorError> {
        let key = || requirement.key.clone();
        let count = requirement.values.as_ref().map_or(0, Vec::len);
        let operator = match requirement.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => return Err(SelectorError::InvalidOperator { key: key(), operator: other.to_owned() }),
        };
        match operator {
            Operator::In | Operator::NotIn if count == 0 => Err(SelectorError::EmptyValues { key: key() }),
            Operator::Exists | Operator::DoesNotExist if count != 0 => {
                Err(SelectorError::UnexpectedValues { key: key() })
            }
            _ => Ok(operator),
        }
    }

    /// The one matching rule: whether a label's value (`None`: the label is
    /// absent) satisfies the operator over `values`.
    fn holds<S: AsRef<str>>(self, value: Option<&str>, values: &[S]) -> bool {
        let listed = |v: &str| values.iter().any(|listed| listed.as_ref() == v);
        match self {
            Operator::In => value.is_some_and(listed),
            Operator::NotIn => value.is_none_or(|v| !listed(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// Whether `labels` satisfy a typed `metav1.LabelSelector`, with upstream's
/// semantics (`metav1.LabelSelectorAsSelector`): every `matchLabels` pair
/// and every `matchExpressions` requirement must hold, so the empty selector
/// matches everything; a selector that does not convert (an unknown
/// operator, `In` without values, ...) matches nothing. A nil selector
/// (`Option::None` in the spec) selects nothing: callers holding an
/// `Option` use [`LabelSelector::from_meta`], or check for `None` first.
///
/// Does not allocate: for matching in loops (a scheduler plugin over every
/// pod of every node).
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
/// use orchestra_core::api::selector_matches;
///
/// let selector = LabelSelector {
///     match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
///     match_expressions: Some(vec![LabelSelectorRequirement {
///         key: "tier".into(),
///         operator: "NotIn".into(),
///         values: Some(vec!["db".into()]),
///     }]),
/// };
/// let labels = [("app".to_owned(), "web".to_owned())].into();
/// assert!(selector_matches(&selector, Some(&labels)));
/// assert!(!selector_matches(&selector, None));
/// assert!(selector_matches(&LabelSelector::default(), None));
/// ```
pub fn selector_matches(selector: &meta::LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    selector.match_labels.iter().flatten().all(|(k, v)| Operator::In.holds(label(k), std::slice::from_ref(v)))
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|e| Operator::of(e).is_ok_and(|op| op.holds(label(&e.key), e.values.as_deref().unwrap_or_default())))
}

/// True if a typed selector has neither `matchLabels` nor
/// `matchExpressions`: it matches everything. Workload controllers and
/// some scheduler rules treat such a selector as selecting nothing instead.
pub fn selector_is_empty(selector: &meta::LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// A label selector, parsed from the query-string syntax
/// (`app=web,tier in (a,b),!canary`) or converted from a typed
/// `metav1.LabelSelector` ([`LabelSelector::from_meta`]). The empty
/// selector matches everything; [`LabelSelector::nothing`] matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
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
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// The selector that matches nothing (upstream's `labels.Nothing()`).
    pub fn nothing() -> LabelSelector {
        LabelSelector { requirements: Vec::new(), nothing: true }
    }

    /// Converts a typed selector (upstream's
    /// `metav1.LabelSelectorAsSelector`): `None` (a nil selector) matches
    /// nothing, an empty one everything.
    ///
    /// ```
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as Typed;
    /// use orchestra_core::api::LabelSelector;
    ///
    /// let labels = [("app".to_owned(), "web".to_owned())].into();
    /// assert!(!LabelSelector::from_meta(None).unwrap().matches(&labels));
    /// assert!(LabelSelector::from_meta(Some(&Typed::default())).unwrap().matches(&labels));
    /// ```
    pub fn from_meta(selector: Option<&meta::LabelSelector>) -> Result<LabelSelector, SelectorError> {
        let Some(selector) = selector else { return Ok(LabelSelector::nothing()) };
        let pairs = selector.match_labels.iter().flatten().map(|(k, v)| Requirement {
            key: k.clone(),
            operator: Operator::In,
            values: vec![v.clone()],
        });
        let expressions = selector.match_expressions.iter().flatten().map(|e| {
            Ok(Requirement {
                key: e.key.clone(),
                operator: Operator::of(e)?,
                values: e.values.clone().unwrap_or_default(),
            })
        });
        let requirements = pairs.map(Ok).chain(expressions).collect::<Result<_, SelectorError>>()?;
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// Converts the JSON form of a typed selector (a `spec.selector` read
    /// from an object as JSON), as [`LabelSelector::from_meta`] does; JSON
    /// `null` or an absent selector is nil.
    pub fn from_json(selector: Option<&Value>) -> Result<LabelSelector, SelectorError> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else { return Ok(LabelSelector::nothing()) };
        let typed = meta::LabelSelector::deserialize(selector).map_err(|e| SelectorError::Malformed(e.to_string()))?;
        LabelSelector::from_meta(Some(&typed))
    }

    /// True if `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// True if the labels `label` reads satisfy every requirement.
    fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.operator.holds(label(&r.key), &r.values))
    }

    /// True if the selector matches everything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        self.matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
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

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./".contains(c)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(is_key_char)
}

/// A label value as upstream validates it: empty, or at most 63
/// alphanumerics, `-`, `_` and `.`, beginning and ending alphanumeric.
fn valid_value(value: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= 63
            && alphanumeric(value.chars().next())
            && alphanumeric(value.chars().last())
            && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
}

/// One requirement: `!key`, `key`, `key=value` (or `==`), `key!=value`,
/// `key in (a,b)`, `key notin (a,b)`. The key runs up to the first character
/// a key cannot hold, so an operator word is read where upstream's lexer
/// reads it and never inside the value list.
fn parse_requirement(term: &str) -> Option<Requirement> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| requirement(key, Operator::DoesNotExist, Vec::new()));
    }
    let end = term.find(|c: char| !is_key_char(c)).unwrap_or(term.len());
    let (key, rest) = (&term[..end], term[end..].trim_start());
    if !valid_key(key) {
        return None;
    }
    if rest.is_empty() {
        return Some(requirement(key, Operator::Exists, Vec::new()));
    }
    let single = |operator, value: &str| {
        let value = value.trim();
        valid_value(value).then(|| requirement(key, operator, vec![value.to_owned()]))
    };
    if let Some(value) = rest.strip_prefix("!=") {
        return single(Operator::NotIn, value);
    }
    if let Some(value) = rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')) {
        return single(Operator::In, value);
    }
    let (operator, set) = if let Some(set) = rest.strip_prefix("notin") {
        (Operator::NotIn, set)
    } else {
        (Operator::In, rest.strip_prefix("in")?)
    };
    let set = set.trim().strip_prefix('(')?.strip_suffix(')')?;
    // Empty values are values: `in ()` is the set of `""`, `in (a,,b)`
    // holds `""` as upstream's parser reads them.
    let values: Vec<String> = set.split(',').map(|v| v.trim().to_owned()).collect();
    values.iter().all(|v| valid_value(v)).then(|| requirement(key, operator, values))
}

fn requirement(key: &str, operator: Operator, values: Vec<String>) -> Requirement {
    Requirement { key: key.to_owned(), operator, values }
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=`): equality and
/// inequality on dotted field paths of the object. In values, `\,`, `\=`
/// and `\\` stand for `,`, `=` and `\` (upstream's `fields.EscapeValue`,
/// [`escape_field_value`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the query-string syntax: terms split on unescaped commas,
    /// each split at its first operator (`!=`, `==` or `=`), the value
    /// unescaped. An unescaped `=` or `,` in a value, or an escape other than
    /// `\\`, `\,` and `\=`, is refused as upstream refuses it.
    ///
    /// ```
    /// use orchestra_core::api::FieldSelector;
    ///
    /// let selector = FieldSelector::parse(r"metadata.name=a\,b,spec.nodeName!=").unwrap();
    /// assert_eq!(selector.pinned_name(), Some("a,b"));
    /// assert_eq!(selector.to_string(), r"metadata.name=a\,b,spec.nodeName!=");
    /// assert!(FieldSelector::parse("metadata.name=a=b").is_err());
    /// ```
    pub fn parse(input: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for term in split_unescaped_commas(input).into_iter().map(str::trim).filter(|t| !t.is_empty()) {
            let Some((field, equal, value)) = split_field_term(term) else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}: no operator")));
            };
            if !valid_key(field.trim()) {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            }
            terms.push((field.trim().to_owned(), equal, unescape_field_value(value.trim())?));
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

/// `value` with `\\`, `,` and `=` escaped, to be written in a field
/// selector (upstream's `fields.EscapeValue`).
///
/// ```
/// use orchestra_core::api::{FieldSelector, escape_field_value};
///
/// let selector = format!("metadata.name={}", escape_field_value("a,b=c"));
/// assert_eq!(selector, r"metadata.name=a\,b\=c");
/// assert_eq!(FieldSelector::parse(&selector).unwrap().pinned_name(), Some("a,b=c"));
/// ```
pub fn escape_field_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Splits a field selector on the commas no backslash escapes.
fn split_unescaped_commas(input: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in input.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

/// A field term split at its first operator: field, whether it asks for
/// equality, and the (still escaped) value.
fn split_field_term(term: &str) -> Option<(&str, bool, &str)> {
    term.char_indices().find_map(|(at, _)| {
        let rest = &term[at..];
        [("!=", false), ("==", true), ("=", true)]
            .into_iter()
            .find(|(operator, _)| rest.starts_with(operator))
            .map(|(operator, equal)| (&term[..at], equal, &rest[operator.len()..]))
    })
}

/// Undoes [`escape_field_value`]; refuses unescaped `,` and `=` and unknown
/// escapes with upstream's messages.
fn unescape_field_value(value: &str) -> Result<String, ApiError> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => out.push(escaped),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
                None => return Err(ApiError::bad_request("invalid field selector: invalid escape sequence: \\")),
            },
            ',' | '=' => {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: unescaped character in value: {c:?}"
                )));
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

impl std::fmt::Display for FieldSelector {
    /// The query-string syntax [`FieldSelector::parse`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (field, equal, value)) in self.terms.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            let operator = if *equal { "=" } else { "!=" };
            write!(f, "{separator}{field}{operator}{}", escape_field_value(value))?;
        }
        Ok(())
    }
}

impl std::fmt::Display for LabelSelector {
    /// The query-string syntax [`LabelSelector::parse`] reads back: `k=v`
    /// and `k!=v` for one value, `k in (a,b)` and `k notin (a,b)` for more,
    /// `k` and `!k` for existence. The selector that matches nothing has no
    /// such form and prints as `""`, as upstream's does.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, Requirement { key, operator, values }) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match (operator, values.as_slice()) {
                (Operator::In, [value]) => write!(f, "{key}={value}")?,
                (Operator::NotIn, [value]) => write!(f, "{key}!={value}")?,
                (Operator::In, values) => write!(f, "{key} in ({})", values.join(","))?,
                (Operator::NotIn, values) => write!(f, "{key} notin ({})", values.join(","))?,
                (Operator::Exists, _) => write!(f, "{key}")?,
                (Operator::DoesNotExist, _) => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod properties;

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
        // The empty string is a value: `in ()` holds it, and so does an
        // empty item of a list.
        let blank = labels(&[("app", "")]);
        let cases = [
            ("app in ()", &blank, true),
            ("app in ()", &l, false),
            ("app notin ()", &l, true),
            ("app in (,web)", &blank, true),
            ("app in (,web)", &l, true),
            ("app notin (web,)", &blank, false),
            ("app=", &blank, true),
        ];
        for (selector, labels, expected) in cases {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(labels), expected, "{selector} on {labels:?}");
        }
        assert_eq!(LabelSelector::parse("app in (a,,b)").unwrap().requirements[0].values, ["a", "", "b"]);
        // Operator words are read after the key, never inside the values.
        assert!(LabelSelector::parse("app in ( notin , web )").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app notin (in,web)").unwrap().matches(&l));
        assert!(LabelSelector::parse("app in(web)").unwrap().matches(&l));
        // Values must be label values.
        for invalid in ["app=a b", "app in (=web)", "app===web", "app!=(x", "app in (web,-x)"] {
            assert!(LabelSelector::parse(invalid).is_err(), "{invalid}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    fn typed(pairs: &[(&str, &str)], expressions: &[(&str, &str, &[&str])]) -> meta::LabelSelector {
        meta::LabelSelector {
            match_labels: (!pairs.is_empty()).then(|| labels(pairs)),
            match_expressions: (!expressions.is_empty()).then(|| {
                expressions
                    .iter()
                    .map(|(key, operator, values)| meta::LabelSelectorRequirement {
                        key: key.to_string(),
                        operator: operator.to_string(),
                        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn typed_selectors() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let invalid = |operator: &str| SelectorError::InvalidOperator { key: "app".into(), operator: operator.into() };
        type Case<'a> =
            (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str, &'a [&'a str])], Result<bool, SelectorError>);
        let cases: &[Case<'_>] = &[
            // The empty selector matches everything.
            (&[], &[], Ok(true)),
            (&[("app", "web")], &[], Ok(true)),
            (&[("app", "db")], &[], Ok(false)),
            (&[("app", "web"), ("canary", "yes")], &[], Ok(false)),
            (&[], &[("tier", "In", &["front", "back"])], Ok(true)),
            (&[], &[("tier", "In", &["back"])], Ok(false)),
            (&[], &[("canary", "In", &["yes"])], Ok(false)),
            (&[], &[("tier", "NotIn", &["back"])], Ok(true)),
            (&[], &[("tier", "NotIn", &["front"])], Ok(false)),
            // An absent label is not in any set.
            (&[], &[("canary", "NotIn", &["yes"])], Ok(true)),
            (&[], &[("app", "Exists", &[])], Ok(true)),
            (&[], &[("canary", "Exists", &[])], Ok(false)),
            (&[], &[("canary", "DoesNotExist", &[])], Ok(true)),
            (&[], &[("app", "DoesNotExist", &[])], Ok(false)),
            (&[("app", "web")], &[("tier", "In", &["front"]), ("canary", "DoesNotExist", &[])], Ok(true)),
            (&[("app", "web")], &[("tier", "In", &["back"])], Ok(false)),
            // Invalid requirements: the selector does not convert and matches nothing.
            (&[], &[("app", "Equals", &["web"])], Err(invalid("Equals"))),
            (&[], &[("app", "in", &["web"])], Err(invalid("in"))),
            (&[], &[("app", "Gt", &["1"])], Err(invalid("Gt"))),
            (&[], &[("app", "NotIn", &[])], Err(SelectorError::EmptyValues { key: "app".into() })),
            (&[], &[("app", "Exists", &["web"])], Err(SelectorError::UnexpectedValues { key: "app".into() })),
        ];
        for (pairs, expressions, expected) in cases {
            let selector = typed(pairs, expressions);
            let converted = LabelSelector::from_meta(Some(&selector));
            assert_eq!(converted.as_ref().map(|s| s.matches(&l)).map_err(Clone::clone), *expected, "{selector:?}");
            let matches = *expected == Ok(true);
            assert_eq!(selector_matches(&selector, Some(&l)), matches, "{selector:?}");
            let object = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
            assert_eq!(converted.is_ok_and(|s| s.matches_object(&object)), matches, "{selector:?}");
            let json = serde_json::to_value(&selector).unwrap();
            assert_eq!(LabelSelector::from_json(Some(&json)).is_ok_and(|s| s.matches(&l)), matches, "{json}");
        }
        // Without labels, only requirements an absent label satisfies hold.
        assert!(selector_matches(&typed(&[], &[("app", "DoesNotExist", &[])]), None));
        assert!(!selector_matches(&typed(&[("app", "web")], &[]), None));
        // A nil selector matches nothing; so does JSON null.
        assert!(!LabelSelector::from_meta(None).unwrap().matches(&l));
        assert!(!LabelSelector::from_meta(None).unwrap().is_empty());
        assert!(!LabelSelector::from_json(Some(&json!(null))).unwrap().matches_object(&json!({})));
        assert!(LabelSelector::from_json(Some(&json!({}))).unwrap().matches_object(&json!({})));
        assert!(matches!(LabelSelector::from_json(Some(&json!({"matchLabels": 1}))), Err(SelectorError::Malformed(_))));
        assert!(selector_is_empty(&typed(&[], &[])));
        assert!(!selector_is_empty(&typed(&[("app", "web")], &[])));
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
        // Escapes, and the first operator splits the term.
        let odd = json!({"metadata": {"name": "a,b=c\\d"}, "spec": {"nodeName": "x!=y"}});
        let escaped = r"metadata.name=a\,b\=c\\d,spec.nodeName=x!\=y";
        assert!(FieldSelector::parse(escaped).unwrap().matches_object(&odd));
        assert_eq!(FieldSelector::parse(escaped).unwrap().to_string(), escaped);
        assert!(!FieldSelector::parse(r"spec.nodeName!=x!\=y").unwrap().matches_object(&odd));
        assert!(FieldSelector::parse("spec.nodeName=x!=y").is_err(), "an unescaped = in the value");
        for invalid in ["metadata.name=a=b", "metadata.name===b", r"metadata.name=a\b", r"metadata.name=a\"] {
            assert!(FieldSelector::parse(invalid).is_err(), "{invalid}");
        }
    }
}
