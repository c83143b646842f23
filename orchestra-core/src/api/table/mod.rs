//! Server-side printing: the `meta.k8s.io/v1` `Table` that `kubectl get`
//! renders.
//!
//! A [`TablePrinter`] gives a kind's column definitions and the cells of one
//! object. Every built-in kind has the columns upstream's printers give it
//! ([`builtin`]); a kind without a printer gets [`DefaultPrinter`] (Name,
//! Age); custom resources describe theirs as data with [`TableColumns`]
//! (a CRD's `additionalPrinterColumns`). [`Table`] assembles the response
//! from a printer and the objects. Everything here is a pure function over
//! `serde_json::Value`.
//!
//! ```
//! use orchestra_core::api::table::{IncludeObject, Table, builtin};
//! use serde_json::json;
//!
//! let printer = builtin("", "ConfigMap").unwrap();
//! let cm = json!({"metadata": {"name": "c", "creationTimestamp": "2024-01-01T00:00:00Z"}, "data": {"a": "1"}});
//! let now = "2024-01-01T00:05:00Z".parse().unwrap();
//! let table = Table::new(&printer, now)
//!     .include(IncludeObject::None)
//!     .rows([&cm])
//!     .to_json("meta.k8s.io/v1");
//! assert_eq!(table["rows"][0]["cells"], json!(["c", 1, "5m"]));
//! ```

mod columns;
mod core;
mod format;
mod other;
mod workloads;

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

pub use self::columns::{ColumnSource, TableColumns};
pub use self::format::{age, human_duration, parse_time};

/// The instant printers measure ages against.
pub type Timestamp = k8s_openapi::jiff::Timestamp;

/// One column of a table (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDefinition {
    /// Header, e.g. `Ready` (kubectl upper-cases it).
    pub name: String,
    /// OpenAPI type of the cells: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: String,
    /// OpenAPI format, e.g. `name` for the column that names the object.
    pub format: String,
    /// What the column means.
    pub description: String,
    /// 0 for the default view; higher priorities appear only with `-o wide`.
    pub priority: i32,
}

impl ColumnDefinition {
    /// A priority-0 column.
    pub fn new(name: &str, type_: &str, description: &str) -> ColumnDefinition {
        ColumnDefinition {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: description.into(),
            priority: 0,
        }
    }

    /// Sets the priority (1 = shown with `-o wide`).
    pub fn priority(mut self, priority: i32) -> ColumnDefinition {
        self.priority = priority;
        self
    }

    /// Sets the format.
    pub fn format(mut self, format: &str) -> ColumnDefinition {
        self.format = format.into();
        self
    }

    /// The `Name` column every kind starts with.
    pub fn name_column() -> ColumnDefinition {
        ColumnDefinition::new("Name", "string", format::NAME_DESCRIPTION).format("name")
    }

    /// The `Age` column (`metadata.creationTimestamp`, rendered as an age).
    pub fn age_column() -> ColumnDefinition {
        ColumnDefinition::new("Age", "string", format::CREATION_TIMESTAMP_DESCRIPTION)
    }

    /// The column's JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// Prints one kind: its columns, and the cells of one object.
///
/// Cells must line up with [`columns`](TablePrinter::columns), all of them,
/// wide ones included (the server always prints wide; kubectl hides columns
/// with a priority above 0 unless asked for `-o wide`). A cell is a JSON
/// string, integer, number or boolean, or `null` for "no value".
///
/// ```
/// use orchestra_core::api::table::{ColumnDefinition, IncludeObject, Printer, Table, TablePrinter, Timestamp};
/// use serde_json::{Value, json};
///
/// /// Prints a name and a replica count.
/// struct Replicas;
///
/// impl TablePrinter for Replicas {
///     fn columns(&self) -> Vec<ColumnDefinition> {
///         vec![
///             ColumnDefinition::new("Name", "string", "The object's name."),
///             ColumnDefinition::new("Replicas", "integer", "Desired replicas."),
///         ]
///     }
///
///     fn cells(&self, object: &Value, _now: Timestamp) -> Vec<Value> {
///         vec![object["metadata"]["name"].clone(), object["spec"]["replicas"].clone()]
///     }
/// }
///
/// let printer = Printer::new(Replicas);
/// let object = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
/// let table = Table::new(&printer, Timestamp::UNIX_EPOCH)
///     .include(IncludeObject::None)
///     .rows([&object])
///     .to_json("meta.k8s.io/v1");
/// assert_eq!(table["rows"][0]["cells"], json!(["web", 3]));
/// ```
pub trait TablePrinter: Send + Sync {
    /// The column definitions.
    fn columns(&self) -> Vec<ColumnDefinition>;

    /// The cells of one object, measured against `now`.
    fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value>;

    /// `rows[].conditions` of one object (upstream: a completed pod's
    /// `Completed` condition). None by default.
    fn conditions(&self, _object: &Value) -> Option<Value> {
        None
    }
}

/// A shareable [`TablePrinter`] (what a `ResourceInfo` carries).
#[derive(Clone)]
pub struct Printer(Arc<dyn TablePrinter>);

impl Printer {
    /// Wraps a printer.
    pub fn new(printer: impl TablePrinter + 'static) -> Printer {
        Printer(Arc::new(printer))
    }

    /// The printer of kinds that have none: Name, Age.
    pub fn default_printer() -> Printer {
        Printer::new(DefaultPrinter)
    }
}

impl TablePrinter for Printer {
    fn columns(&self) -> Vec<ColumnDefinition> {
        self.0.columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value> {
        self.0.cells(object, now)
    }

    fn conditions(&self, object: &Value) -> Option<Value> {
        self.0.conditions(object)
    }
}

impl std::ops::Deref for Printer {
    type Target = dyn TablePrinter;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for Printer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.columns().into_iter().map(|c| c.name).collect();
        f.debug_tuple("Printer").field(&names).finish()
    }
}

/// Name and Age: the printer of kinds without one of their own.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultPrinter;

impl TablePrinter for DefaultPrinter {
    fn columns(&self) -> Vec<ColumnDefinition> {
        vec![ColumnDefinition::name_column(), ColumnDefinition::age_column()]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value> {
        vec![format::name(object).into(), age(object, now).into()]
    }
}

/// The column definitions of a kind's Table.
pub type ColumnsFn = fn() -> Vec<ColumnDefinition>;

/// The cells of one object's row, given the time the row is printed at.
pub type CellsFn = fn(&Value, Timestamp) -> Vec<Value>;

/// A printer made of two functions (how the built-in kinds are printed).
#[derive(Clone, Copy)]
pub struct FnPrinter {
    /// The column definitions.
    pub columns: ColumnsFn,
    /// The cells of one object.
    pub cells: CellsFn,
    /// The row conditions of one object.
    pub conditions: Option<fn(&Value) -> Option<Value>>,
}

impl TablePrinter for FnPrinter {
    fn columns(&self) -> Vec<ColumnDefinition> {
        (self.columns)()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value> {
        (self.cells)(object, now)
    }

    fn conditions(&self, object: &Value) -> Option<Value> {
        self.conditions.and_then(|f| f(object))
    }
}

/// The upstream printer of a built-in kind, by group and kind (`""` for the
/// core group); `None` for kinds upstream has no printer for.
pub fn builtin(group: &str, kind: &str) -> Option<Printer> {
    let printer = match group {
        "" => core::printer(kind),
        "apps" | "batch" => workloads::printer(kind),
        _ => other::printer(group, kind),
    }?;
    Some(Printer::new(printer))
}

/// The printer of `autoscaling/v1` `Scale` (the `scale` subresource):
/// Name, Desired, Available, Age.
pub fn scale_printer() -> Printer {
    Printer::new(other::SCALE)
}

/// What `rows[].object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// `PartialObjectMetadata` (the default): enough for kubectl's
    /// NAMESPACE and LABELS columns.
    #[default]
    Metadata,
    /// The whole object (`--sort-by`).
    Object,
    /// Nothing.
    None,
}

impl IncludeObject {
    /// Parses the query parameter; `None` for an unknown value.
    pub fn parse(value: &str) -> Option<IncludeObject> {
        match value {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "Object" => Some(IncludeObject::Object),
            "None" => Some(IncludeObject::None),
            _ => None,
        }
    }
}

/// Builds one `Table` response.
pub struct Table<'a> {
    printer: &'a dyn TablePrinter,
    now: Timestamp,
    include: IncludeObject,
    headers: bool,
    rows: Vec<Value>,
    metadata: Map<String, Value>,
}

impl<'a> Table<'a> {
    /// An empty table printed by `printer` at `now`, with headers.
    pub fn new(printer: &'a dyn TablePrinter, now: Timestamp) -> Table<'a> {
        Table { printer, now, include: IncludeObject::default(), headers: true, rows: Vec::new(), metadata: Map::new() }
    }

    /// Sets what each row's `object` holds.
    pub fn include(mut self, include: IncludeObject) -> Table<'a> {
        self.include = include;
        self
    }

    /// Leaves out `columnDefinitions` (every watch event after the first).
    pub fn without_headers(mut self) -> Table<'a> {
        self.headers = false;
        self
    }

    /// Copies `resourceVersion`, `continue` and `remainingItemCount` from a
    /// list's (or an object's) metadata.
    pub fn metadata_from(mut self, metadata: &Value) -> Table<'a> {
        for field in ["resourceVersion", "continue", "remainingItemCount"] {
            if let Some(value) = metadata.get(field).filter(|v| !v.is_null()) {
                self.metadata.insert(field.into(), value.clone());
            }
        }
        self
    }

    /// Adds one row per object.
    pub fn rows<'o>(mut self, objects: impl IntoIterator<Item = &'o Value>) -> Table<'a> {
        for object in objects {
            let mut row = Map::new();
            row.insert("cells".into(), self.printer.cells(object, self.now).into());
            if let Some(conditions) = self.printer.conditions(object) {
                row.insert("conditions".into(), conditions);
            }
            match self.include {
                IncludeObject::Metadata => {
                    row.insert("object".into(), partial_object_metadata(object, "meta.k8s.io/v1"));
                }
                IncludeObject::Object => {
                    row.insert("object".into(), object.clone());
                }
                IncludeObject::None => {}
            }
            self.rows.push(Value::Object(row));
        }
        self
    }

    /// The `Table` in API version `api_version` (`meta.k8s.io/v1` or
    /// `meta.k8s.io/v1beta1`).
    pub fn to_json(self, api_version: &str) -> Value {
        let columns = if self.headers {
            Value::Array(self.printer.columns().iter().map(ColumnDefinition::to_json).collect())
        } else {
            Value::Null
        };
        let mut rows = self.rows;
        if api_version != "meta.k8s.io/v1" {
            for row in &mut rows {
                if let Some(object) = row.get_mut("object")
                    && object.get("kind").and_then(Value::as_str) == Some("PartialObjectMetadata")
                {
                    object["apiVersion"] = api_version.into();
                }
            }
        }
        json!({
            "kind": "Table",
            "apiVersion": api_version,
            "metadata": self.metadata,
            "columnDefinitions": columns,
            "rows": rows,
        })
    }
}

/// An object's `PartialObjectMetadata` (kind, apiVersion, metadata).
pub fn partial_object_metadata(object: &Value, api_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn table_shape_and_include_object() {
        let printer = Printer::default_printer();
        let object = json!({"kind": "Widget", "metadata": {"name": "w", "namespace": "d", "labels": {"a": "b"}, "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": {"x": 1}});
        let now = at("2024-01-01T00:00:30Z");
        let list_meta = json!({"resourceVersion": "7", "continue": "tok", "remainingItemCount": 3});
        let table = Table::new(&*printer, now).metadata_from(&list_meta).rows([&object]).to_json("meta.k8s.io/v1");
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["metadata"], list_meta);
        assert_eq!(table["columnDefinitions"][0]["name"], "Name");
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["columnDefinitions"][1]["priority"], 0);
        assert_eq!(table["rows"][0]["cells"], json!(["w", "30s"]));
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
        );

        let full =
            Table::new(&*printer, now).include(IncludeObject::Object).rows([&object]).to_json("meta.k8s.io/v1beta1");
        assert_eq!(full["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(full["rows"][0]["object"], object);

        let none = Table::new(&*printer, now)
            .include(IncludeObject::None)
            .without_headers()
            .rows([&object])
            .to_json("meta.k8s.io/v1");
        assert!(none["rows"][0].get("object").is_none());
        assert!(none["columnDefinitions"].is_null());
        assert_eq!(IncludeObject::parse("Nope"), None);
    }

    #[test]
    fn every_builtin_row_matches_its_columns() {
        let registry = crate::api::Registry::builtin();
        let now = at("2024-01-01T00:00:00Z");
        for group in registry.groups().map(str::to_owned).collect::<Vec<_>>() {
            for version in registry.versions(&group) {
                for resource in registry.resources(&group, &version) {
                    if !resource.verbs.iter().any(|v| v == "get") {
                        continue; // create-only reviews are never printed
                    }
                    let printer = builtin(&resource.group, &resource.kind)
                        .unwrap_or_else(|| panic!("no printer for {}", resource.kind));
                    let empty = json!({"metadata": {"name": "x"}});
                    assert_eq!(
                        printer.cells(&empty, now).len(),
                        printer.columns().len(),
                        "{} cells vs columns",
                        resource.kind
                    );
                }
            }
        }
    }
}
