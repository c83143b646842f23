//! Cell formatting shared by the printers: ages, labels, selectors.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Timestamp;

/// Description of the Name column (`ObjectMeta.name`).
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// Description of the Age column (`ObjectMeta.creationTimestamp`).
pub(crate) const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A duration in seconds as upstream's `duration.HumanDuration` writes it:
/// `45s`, `2m30s`, `15m`, `3h10m`, `20h`, `3d4h`, `30d`, `3y45d`, `10y`.
/// Negative durations of up to a second read `0s` (clock skew);
/// more negative ones `<invalid>`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// Parses an RFC 3339 timestamp (`metav1.Time` or `MicroTime`).
pub fn parse_time(value: &Value) -> Option<Timestamp> {
    value.as_str().filter(|s| !s.is_empty())?.parse().ok()
}

/// How long ago `value` (an RFC 3339 timestamp) was: `<unknown>` if unset.
pub(crate) fn since(value: Option<&Value>, now: Timestamp) -> String {
    match value.and_then(parse_time) {
        Some(time) => human_duration(seconds_between(time, now)),
        None => "<unknown>".into(),
    }
}

/// Whole seconds from `from` to `to` (rounded toward zero, like Go).
pub(crate) fn seconds_between(from: Timestamp, to: Timestamp) -> i64 {
    to.as_second() - from.as_second() - i64::from(to.subsec_nanosecond() < from.subsec_nanosecond() && to > from)
}

/// The Age cell of an object: the time since `metadata.creationTimestamp`.
pub fn age(object: &Value, now: Timestamp) -> String {
    since(object.pointer("/metadata/creationTimestamp"), now)
}

/// `metadata.name`.
pub(crate) fn name(object: &Value) -> &str {
    str_at(object, "/metadata/name")
}

/// The string at a JSON pointer, or "".
pub(crate) fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The integer at a JSON pointer, or 0.
pub(crate) fn int_at(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The array at a JSON pointer, or empty.
pub(crate) fn array_at<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// The number of entries of the map at a JSON pointer.
pub(crate) fn map_len(object: &Value, pointer: &str) -> usize {
    object.pointer(pointer).and_then(Value::as_object).map_or(0, |m| m.len())
}

/// A string map as upstream's `labels.FormatLabels`: `a=b,c=d` sorted by
/// key, `<none>` if empty.
pub(crate) fn format_labels(map: Option<&Value>) -> String {
    let sorted: BTreeMap<&str, &str> = map
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    if sorted.is_empty() {
        return "<none>".into();
    }
    sorted.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A `metav1.LabelSelector` as upstream's `FormatLabelSelector`:
/// `app=web,tier in (a,b),!canary`; `<none>` if empty, `<error>` if unset.
pub(crate) fn format_label_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return "<none>".into();
    };
    let mut terms = Vec::new();
    let labels: BTreeMap<&str, &str> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    for (k, v) in labels {
        terms.push(format!("{k}={v}"));
    }
    for expression in selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = str_at(expression, "/key");
        let mut values: Vec<&str> = array_at(expression, "/values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let term = match str_at(expression, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<error>".into(),
        };
        terms.push(term);
    }
    // Upstream sorts the requirements by key.
    terms.sort_by(|a, b| selector_key(a).cmp(selector_key(b)));
    if terms.is_empty() { "<none>".into() } else { terms.join(",") }
}

fn selector_key(term: &str) -> &str {
    let term = term.trim_start_matches('!');
    term.split([' ', '=', '!']).next().unwrap_or(term)
}

/// Container names and images of a pod spec, comma-separated.
pub(crate) fn containers(spec: Option<&Value>) -> (String, String) {
    let containers = spec.and_then(|s| s.get("containers")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// An `IntOrString` as Go prints it.
pub(crate) fn int_or_string(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The Endpoints cell of an EndpointSlice: up to three addresses.
pub(crate) fn format_endpoints_slice(endpoints: &[Value]) -> String {
    let addresses: Vec<String> = endpoints
        .iter()
        .flat_map(|e| array_at(e, "/addresses"))
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    list_with_more(&addresses)
}

/// A resource quantity as written (string or number).
pub(crate) fn quantity(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A list of at most three entries followed by `+ N more...`, or `<unset>`.
pub(crate) fn list_with_more(all: &[String]) -> String {
    const MAX: usize = 3;
    if all.len() > MAX {
        return format!("{} + {} more...", all[..MAX].join(","), all.len() - MAX);
    }
    if all.is_empty() {
        return "<unset>".into();
    }
    all.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn human_durations() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (9 * 60 + 59, "9m59s"),
            (10 * 60 + 30, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 10 * 60, "3h10m"),
            (8 * 3600 + 59 * 60, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (8 * 86400, "8d"),
            (5 * 86400, "5d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            ((3 * 365 + 45) * 86400, "3y45d"),
            (10 * 365 * 86400, "10y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
    }

    #[test]
    fn ages() {
        let now: Timestamp = "2024-03-01T12:00:00Z".parse().unwrap();
        let object = |ts: &str| json!({"metadata": {"creationTimestamp": ts}});
        assert_eq!(age(&object("2024-03-01T11:59:55Z"), now), "5s");
        assert_eq!(age(&object("2024-02-25T12:00:00Z"), now), "5d");
        assert_eq!(age(&json!({"metadata": {}}), now), "<unknown>");
        let micro: Timestamp = "2024-03-01T11:59:54.600000Z".parse().unwrap();
        assert_eq!(seconds_between(micro, now), 5);
    }

    #[test]
    fn labels_and_selectors() {
        assert_eq!(format_labels(Some(&json!({"b": "2", "a": "1"}))), "a=1,b=2");
        assert_eq!(format_labels(None), "<none>");
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]},
            {"key": "canary", "operator": "DoesNotExist"}]});
        assert_eq!(format_label_selector(Some(&selector)), "app=web,!canary,tier in (a,b)");
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(list_with_more(&["a", "b", "c", "d", "e"].map(String::from)), "a,b,c + 2 more...");
    }
}
