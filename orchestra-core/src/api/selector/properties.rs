//! Property tests of the selector parsers: parsing never panics, printing
//! and parsing a selector gives it back, and matching agrees with a
//! reference evaluator over the requirements the selector was made from.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::properties::config;

/// A label name part: alphanumeric at both ends, `-_.` inside.
fn name() -> impl Strategy<Value = String> + Clone {
    prop_oneof!["[a-z]", "[a-zA-Z0-9][a-zA-Z0-9._-]{0,6}[a-zA-Z0-9]", Just("in".to_owned()), Just("notin".to_owned())]
}

/// A label key, with a DNS-subdomain prefix now and then.
fn key() -> impl Strategy<Value = String> {
    (proptest::option::of("[a-z0-9]{1,4}(\\.[a-z0-9]{1,4}){0,2}"), name())
        .prop_map(|(prefix, name)| prefix.map_or(name.clone(), |p| format!("{p}/{name}")))
}

/// A label value: empty, or a name.
fn value() -> impl Strategy<Value = String> + Clone {
    prop_oneof![1 => Just(String::new()), 4 => name()]
}

/// The operators and values of the query-string syntax, as the reference
/// evaluator reads them.
#[derive(Debug, Clone)]
enum Reference {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

impl Reference {
    fn holds(&self, label: Option<&String>) -> bool {
        match (self, label) {
            (Reference::In(values), Some(v)) => values.contains(v),
            (Reference::In(_), None) => false,
            (Reference::NotIn(values), Some(v)) => !values.contains(v),
            (Reference::NotIn(_), None) => true,
            (Reference::Exists, label) => label.is_some(),
            (Reference::DoesNotExist, label) => label.is_none(),
        }
    }

    fn operator(&self) -> Operator {
        match self {
            Reference::In(_) => Operator::In,
            Reference::NotIn(_) => Operator::NotIn,
            Reference::Exists => Operator::Exists,
            Reference::DoesNotExist => Operator::DoesNotExist,
        }
    }

    fn values(&self) -> Vec<String> {
        match self {
            Reference::In(values) | Reference::NotIn(values) => values.clone(),
            Reference::Exists | Reference::DoesNotExist => Vec::new(),
        }
    }
}

fn reference() -> impl Strategy<Value = Reference> {
    let values = proptest::collection::vec(value(), 1..4);
    prop_oneof![
        values.clone().prop_map(Reference::In),
        values.prop_map(Reference::NotIn),
        Just(Reference::Exists),
        Just(Reference::DoesNotExist),
    ]
}

/// A selector's requirements, on keys drawn from a small set so that
/// labels often meet them.
fn requirements() -> impl Strategy<Value = Vec<(String, Reference)>> {
    proptest::collection::vec((key(), reference()), 0..5)
}

/// Labels over the requirements' keys and values, plus others.
fn labels_for(requirements: &[(String, Reference)]) -> impl Strategy<Value = BTreeMap<String, String>> + use<> {
    let mut keys: Vec<String> = requirements.iter().map(|(k, _)| k.clone()).collect();
    keys.push("other".into());
    let mut values: Vec<String> = requirements.iter().flat_map(|(_, r)| r.values()).collect();
    values.extend(["".to_owned(), "x".to_owned()]);
    proptest::collection::btree_map(proptest::sample::select(keys), proptest::sample::select(values), 0..5)
}

/// The requirements written with random spacing and operator spelling.
fn spelled(requirements: &[(String, Reference)], spacing: &[(u8, bool)]) -> String {
    let space = |i: usize| " ".repeat(usize::from(spacing.get(i % spacing.len().max(1)).map_or(0, |s| s.0 % 3)));
    let double = |i: usize| spacing.get(i % spacing.len().max(1)).is_some_and(|s| s.1);
    let terms: Vec<String> = requirements
        .iter()
        .enumerate()
        .map(|(i, (key, reference))| {
            let (s, t) = (space(i), space(i + 1));
            match reference {
                Reference::In(values) if values.len() == 1 && double(i) => format!("{s}{key}{t}=={t}{}{s}", values[0]),
                Reference::In(values) if values.len() == 1 => format!("{s}{key}{t}={t}{}{s}", values[0]),
                Reference::NotIn(values) if values.len() == 1 => format!("{s}{key}{t}!={t}{}", values[0]),
                Reference::In(values) => format!("{s}{key} {t}in{t} ({t}{}{t}){s}", values.join(&format!("{t},{s}"))),
                Reference::NotIn(values) => format!("{key} {s}notin {t}({}){t}", values.join(&format!(",{s}"))),
                Reference::Exists => format!("{s}{key}{t}"),
                Reference::DoesNotExist => format!("{s}!{t}{key}"),
            }
        })
        .collect();
    terms.join(",")
}

/// A field value: anything printable, escapes and operators included, with
/// no space at either end (terms are trimmed).
fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9=,!\\\\]([a-z0-9=,!\\\\.:/ -]{0,6}[a-z0-9=,!\\\\])?"]
}

fn field_terms() -> impl Strategy<Value = Vec<(String, bool, String)>> {
    let field = proptest::sample::select(vec!["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"]);
    proptest::collection::vec((field.prop_map(String::from), any::<bool>(), field_value()), 0..4)
}

/// The object a field selector is matched against: the fields' values
/// drawn from the terms' values.
fn object_for(terms: &[(String, bool, String)]) -> impl Strategy<Value = Value> + use<> {
    let mut values: Vec<String> = terms.iter().map(|(_, _, v)| v.clone()).collect();
    values.push("x".into());
    let pick = proptest::sample::select(values);
    (pick.clone(), pick.clone(), pick.clone(), pick).prop_map(|(name, namespace, node, phase)| {
        json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node},
            "status": {"phase": phase},
        })
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parsing_any_text_never_panics(input in "\\PC{0,40}", ascii in "[a-z!=(), \\\\.]{0,30}") {
        for text in [&input, &ascii] {
            if let Ok(selector) = LabelSelector::parse(text) {
                // What parses prints as something that parses to the same.
                prop_assert_eq!(LabelSelector::parse(&selector.to_string()).unwrap(), selector);
            }
            if let Ok(selector) = FieldSelector::parse(text) {
                prop_assert_eq!(FieldSelector::parse(&selector.to_string()).unwrap(), selector);
            }
        }
    }

    #[test]
    fn label_selectors_print_and_parse_back(
        (requirements, labels) in requirements().prop_flat_map(|r| { let l = labels_for(&r); (Just(r), l) }),
        spacing in proptest::collection::vec((any::<u8>(), any::<bool>()), 1..6),
    ) {
        let selector = LabelSelector {
            requirements: requirements
                .iter()
                .map(|(key, r)| Requirement { key: key.clone(), operator: r.operator(), values: r.values() })
                .collect(),
            nothing: false,
        };
        let printed = selector.to_string();
        prop_assert_eq!(LabelSelector::parse(&printed).unwrap(), selector.clone(), "printed as {}", printed);
        let written = spelled(&requirements, &spacing);
        prop_assert_eq!(LabelSelector::parse(&written).unwrap(), selector.clone(), "written as {:?}", written);

        let expected = requirements.iter().all(|(key, r)| r.holds(labels.get(key)));
        prop_assert_eq!(selector.matches(&labels), expected, "{} on {:?}", printed, labels);
        prop_assert_eq!(selector.matches_object(&json!({"metadata": {"labels": labels}})), expected);
        prop_assert_eq!(selector.is_empty(), requirements.is_empty());
    }

    #[test]
    fn typed_selectors_match_as_the_reference(
        (requirements, labels) in requirements().prop_flat_map(|r| { let l = labels_for(&r); (Just(r), l) }),
    ) {
        let typed = meta::LabelSelector {
            match_labels: None,
            match_expressions: Some(
                requirements
                    .iter()
                    .map(|(key, r)| meta::LabelSelectorRequirement {
                        key: key.clone(),
                        operator: format!("{:?}", r.operator()),
                        values: Some(r.values()).filter(|v| !v.is_empty()),
                    })
                    .collect(),
            ),
        };
        let expected = requirements.iter().all(|(key, r)| r.holds(labels.get(key)));
        prop_assert_eq!(selector_matches(&typed, Some(&labels)), expected);
        prop_assert_eq!(LabelSelector::from_meta(Some(&typed)).unwrap().matches(&labels), expected);
    }

    #[test]
    fn field_selectors_print_and_parse_back(
        (terms, object) in field_terms().prop_flat_map(|t| { let o = object_for(&t); (Just(t), o) }),
    ) {
        let selector = FieldSelector { terms: terms.clone() };
        let printed = selector.to_string();
        prop_assert_eq!(FieldSelector::parse(&printed).unwrap(), selector.clone(), "printed as {}", printed);

        let expected = terms.iter().all(|(field, equal, value)| {
            let path: Vec<&str> = field.split('.').collect();
            let actual = object[path[0]][path[1]].as_str().unwrap_or_default();
            (actual == value) == *equal
        });
        prop_assert_eq!(selector.matches_object(&object), expected, "{} on {}", printed, object);
        prop_assert_eq!(
            selector.pinned_name(),
            terms.iter().find(|(f, equal, _)| f == "metadata.name" && *equal).map(|(_, _, v)| v.as_str())
        );
    }
}
