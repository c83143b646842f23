//! Columns described as data: a CRD's `additionalPrinterColumns`, or any
//! kind's columns given as simple JSONPath expressions.

use serde_json::Value;

use super::format::{human_duration, name, parse_time, seconds_between};
use super::{ColumnDefinition, TablePrinter, Timestamp};

/// Where a column's cell comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnSource {
    /// A simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`,
    /// `.status.conditions[?(@.type=="Ready")].status`, `.metadata.labels.app\.kubernetes\.io/name`),
    /// as CRDs' `additionalPrinterColumns[].jsonPath`.
    JsonPath(String),
}

/// A printer made of column definitions and JSONPaths, like upstream's
/// custom-resource table convertor: a Name column, then the given columns.
/// Cells are typed by the column's type (`integer`, `number`, `boolean`,
/// `string`; `date` cells render as ages); a missing value is `null`.
///
/// ```
/// use orchestra_core::api::table::{TableColumns, TablePrinter};
/// use serde_json::json;
///
/// let crd_version = json!({"name": "v1", "additionalPrinterColumns": [
///     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
///     {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "priority": 1}]});
/// let columns = TableColumns::from_crd_version(&crd_version);
/// let object = json!({"metadata": {"name": "w"}, "spec": {"replicas": 3}});
/// let cells = columns.cells(&object, "2024-01-01T00:00:00Z".parse().unwrap());
/// assert_eq!(cells, vec![json!("w"), json!(3), json!(null)]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableColumns {
    columns: Vec<(ColumnDefinition, ColumnSource)>,
}

impl TableColumns {
    /// No columns besides Name.
    pub fn new() -> TableColumns {
        TableColumns::default()
    }

    /// Adds a column read from a JSONPath.
    pub fn column(mut self, definition: ColumnDefinition, json_path: &str) -> TableColumns {
        self.columns.push((definition, ColumnSource::JsonPath(json_path.to_owned())));
        self
    }

    /// The columns of one CRD version (`spec.versions[]`): its
    /// `additionalPrinterColumns`, or an Age column if it has none (the
    /// apiextensions defaulting).
    pub fn from_crd_version(version: &Value) -> TableColumns {
        let declared = version.get("additionalPrinterColumns").and_then(Value::as_array).filter(|c| !c.is_empty());
        let Some(declared) = declared else {
            return TableColumns::new().column(
                ColumnDefinition::new("Age", "date", super::format::CREATION_TIMESTAMP_DESCRIPTION),
                ".metadata.creationTimestamp",
            );
        };
        let text = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
        declared.iter().fold(TableColumns::new(), |columns, c| {
            let definition = ColumnDefinition {
                name: text(c, "name"),
                type_: text(c, "type"),
                format: text(c, "format"),
                description: text(c, "description"),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
            };
            columns.column(definition, &text(c, "jsonPath"))
        })
    }
}

impl TableColumns {
    /// The columns of version `version` of a CustomResourceDefinition
    /// (`apiextensions.k8s.io/v1`, as JSON); an Age column if the version
    /// is not found or declares none.
    pub fn from_crd(crd: &Value, version: &str) -> TableColumns {
        let found = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|versions| versions.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(version)));
        TableColumns::from_crd_version(found.unwrap_or(&Value::Null))
    }
}

impl TablePrinter for TableColumns {
    fn columns(&self) -> Vec<ColumnDefinition> {
        std::iter::once(ColumnDefinition::name_column()).chain(self.columns.iter().map(|(d, _)| d.clone())).collect()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value> {
        let mut cells = vec![Value::from(name(object))];
        for (definition, ColumnSource::JsonPath(path)) in &self.columns {
            let value = evaluate(object, path);
            cells.push(match value {
                None | Some(Value::Null) => Value::Null,
                Some(value) => cell(&definition.type_, value, now),
            });
        }
        cells
    }
}

/// A typed cell, as upstream's `cellForJSONValue`.
fn cell(type_: &str, value: &Value, now: Timestamp) -> Value {
    match type_ {
        "integer" => match value {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => match value.as_str() {
            Some(_) => match parse_time(value) {
                Some(t) => human_duration(seconds_between(t, now)).into(),
                None => "<invalid>".into(),
            },
            None => Value::Null,
        },
        // "string" and anything else: the value as JSONPath prints it.
        _ => match value {
            Value::String(s) => s.clone().into(),
            other => other.to_string().into(),
        },
    }
}

/// Evaluates a simple JSONPath; the first result, if any.
fn evaluate<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let mut current = object;
    for step in steps(path.strip_prefix('$').unwrap_or(path))? {
        current = match step {
            Step::Field(field) => current.get(field.as_str())?,
            Step::Index(i) => current.as_array()?.get(i)?,
            Step::Filter(field, expected) => current.as_array()?.iter().find(|item| {
                item.get(field.as_str()).is_some_and(|v| match v {
                    Value::String(s) => *s == expected,
                    other => serde_json::from_str::<Value>(&expected).is_ok_and(|e| e == *other),
                })
            })?,
        };
    }
    Some(current)
}

enum Step {
    Field(String),
    Index(usize),
    Filter(String, String),
}

/// Splits `.a.b\.c[0][?(@.x=="y")]` into steps; `None` if malformed.
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut chars = path.chars().peekable();
    let mut field = String::new();
    let flush = |field: &mut String, steps: &mut Vec<Step>| {
        if !field.is_empty() {
            steps.push(Step::Field(std::mem::take(field)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.push(chars.next()?),
            '.' => flush(&mut field, &mut steps),
            '[' => {
                flush(&mut field, &mut steps);
                let mut inner = String::new();
                let mut depth = 1;
                for c in chars.by_ref() {
                    match c {
                        '[' => depth += 1,
                        ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    inner.push(c);
                }
                steps.push(bracket(inner.trim())?);
            }
            c => field.push(c),
        }
    }
    flush(&mut field, &mut steps);
    Some(steps)
}

fn bracket(inner: &str) -> Option<Step> {
    if let Ok(i) = inner.parse() {
        return Some(Step::Index(i));
    }
    if let Some(quoted) = inner
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
    {
        return Some(Step::Field(quoted.to_owned()));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?;
    let (left, right) = filter.split_once("==")?;
    let field = left.trim().strip_prefix("@.")?;
    let value = right.trim().trim_matches(|c| c == '"' || c == '\'');
    Some(Step::Filter(field.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_paths() {
        let object = json!({"metadata": {"name": "w", "labels": {"app.kubernetes.io/name": "x"}},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let cases = [
            (".metadata.name", Some(json!("w"))),
            (".metadata.labels.app\\.kubernetes\\.io/name", Some(json!("x"))),
            (".status.conditions[0].type", Some(json!("Synced"))),
            (".status.conditions[?(@.type==\"Ready\")].status", Some(json!("True"))),
            ("{.metadata.labels['app.kubernetes.io/name']}", Some(json!("x"))),
            (".status.conditions[5].type", None),
            (".spec.missing", None),
        ];
        for (path, expected) in cases {
            assert_eq!(evaluate(&object, path).cloned(), expected, "{path}");
        }
    }

    #[test]
    fn typed_cells_and_default_age() {
        let now: Timestamp = "2024-01-01T01:00:00Z".parse().unwrap();
        let columns = TableColumns::new()
            .column(ColumnDefinition::new("N", "integer", ""), ".spec.n")
            .column(ColumnDefinition::new("F", "number", ""), ".spec.f")
            .column(ColumnDefinition::new("B", "boolean", ""), ".spec.b")
            .column(ColumnDefinition::new("S", "string", ""), ".spec.n")
            .column(ColumnDefinition::new("D", "date", ""), ".metadata.creationTimestamp")
            .column(ColumnDefinition::new("Bad", "integer", ""), ".spec.b");
        let object = json!({"metadata": {"name": "w", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": {"n": 2.0, "f": 1.5, "b": true}});
        assert_eq!(
            columns.cells(&object, now),
            vec![json!("w"), json!(2), json!(1.5), json!(true), json!("2.0"), json!("60m"), json!(null)]
        );
        let crd = json!({"spec": {"versions": [{"name": "v1"}, {"name": "v2", "additionalPrinterColumns": [
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}]}]}});
        let v2: Vec<String> = TableColumns::from_crd(&crd, "v2").columns().into_iter().map(|c| c.name).collect();
        assert_eq!(v2, ["Name", "Ready"]);
        let default = TableColumns::from_crd(&crd, "v1");
        let names: Vec<String> = default.columns().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["Name", "Age"]);
        assert_eq!(default.cells(&object, now)[1], "60m");
    }
}
