//! OpenAPI v3 documents generated from a [`Registry`].
//!
//! [`OpenApi::build`] makes what `/openapi/v3` serves: an index naming one
//! document per served group/version (`api/v1`, `apis/apps/v1`, ...) and the
//! documents themselves, each with its `paths` (every resource's collection,
//! object and subresource operations, each tagged with
//! `x-kubernetes-group-version-kind` and its parameters) and the
//! `components.schemas` they reference, named like upstream
//! (`io.k8s.api.core.v1.Pod`). `kubectl` reads them for `explain`, and for
//! `create`/`apply`, where a `fieldValidation` parameter on a kind's PATCH
//! operation makes it leave validation to the server.
//!
//! Built-in kinds get their schemas from `k8s-openapi`'s `schemars`
//! implementations, custom resources from their CRD schema; kinds without a
//! schema get a permissive one. The same schemas back [`OpenApi::kind_schema`],
//! the [`SchemaView`] that `fieldValidation` walks.
//!
//! Building is costly (hundreds of schemas); build once per registry.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use k8s_openapi::api::{
    autoscaling::v1::Scale, core::v1::Binding, core::v1::Pod, policy::v1::Eviction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::Schema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::Registry;
use super::resource::{KindSchema, ResourceInfo};
use super::schema::{REF_PREFIX, SchemaView};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// The content types a PATCH accepts.
pub const PATCH_CONTENT_TYPES: [&str; 4] = [
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// The OpenAPI v3 documents of a registry: the index and one document per
/// group/version.
#[derive(Debug, Clone)]
pub struct OpenApi {
    index: Bytes,
    documents: BTreeMap<String, GroupVersionDocument>,
}

/// One group/version's OpenAPI document.
#[derive(Debug, Clone)]
pub struct GroupVersionDocument {
    /// Path in the index: `api/v1` or `apis/<group>/<version>`.
    pub path: String,
    /// Content hash (hex), used in `serverRelativeURL` and as the ETag.
    pub hash: String,
    /// The document, serialized.
    pub json: Bytes,
    /// `components.schemas`.
    schemas: Map<String, Value>,
    /// Kind name → schema name, for every served kind of the group/version.
    kinds: BTreeMap<String, String>,
}

impl GroupVersionDocument {
    /// `/openapi/v3/<path>?hash=<hash>`.
    pub fn server_relative_url(&self) -> String {
        format!("/openapi/v3/{}?hash={}", self.path, self.hash)
    }

    /// `components.schemas` of the document.
    pub fn schemas(&self) -> &Map<String, Value> {
        &self.schemas
    }

    /// The schema of a kind served by this group/version.
    pub fn kind_schema(&self, kind: &str) -> Option<SchemaView<'_>> {
        SchemaView::reference(&self.schemas, self.kinds.get(kind)?)
    }
}

/// `api/v1` or `apis/<group>/<version>`: where a group/version's document
/// lives under `/openapi/v3/` (and its URL prefix without the leading `/`).
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The schema name of a kind that has no `k8s-openapi` type, built like
/// upstream names CRD schemas: the group reversed, the version, the kind
/// (`com.example.v1.Widget`).
pub fn custom_schema_name(group: &str, version: &str, kind: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').filter(|s| !s.is_empty()).rev().collect();
    parts.push(version);
    parts.push(kind);
    parts.join(".")
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{REF_PREFIX}{name}") })
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

/// Schemas of kinds that subresources take and return, which are not served
/// as resources themselves.
fn subresource_kind_schema(
    group: &str,
    version: &str,
    kind: &str,
) -> Option<fn(&mut SchemaGenerator) -> Schema> {
    match (group, version, kind) {
        ("autoscaling", "v1", "Scale") => Some(|g| g.subschema_for::<Scale>()),
        ("policy", "v1", "Eviction") => Some(|g| g.subschema_for::<Eviction>()),
        ("", "v1", "Binding") => Some(|g| g.subschema_for::<Binding>()),
        _ => None,
    }
}

/// The name a `$ref` schema points at.
fn ref_name(schema: &Schema) -> Option<String> {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(REF_PREFIX))
        .map(str::to_owned)
}

/// A custom resource's schema, as upstream publishes it: `apiVersion`,
/// `kind` and `metadata` (ObjectMeta) always declared.
fn custom_schema(schema: Option<&Value>) -> Value {
    let mut schema = match schema {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    if schema.get("type").is_none() {
        schema["type"] = "object".into();
    }
    let properties = schema
        .as_object_mut()
        .expect("an object")
        .entry("properties")
        .or_insert_with(|| json!({}));
    if let Some(properties) = properties.as_object_mut() {
        properties.entry("apiVersion").or_insert_with(|| json!({
            "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
            "type": "string",
        }));
        properties.entry("kind").or_insert_with(|| json!({
            "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.",
            "type": "string",
        }));
        properties.insert(
            "metadata".into(),
            json!({
                "allOf": [schema_ref(OBJECT_META)],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
    }
    schema
}

/// `RbacAuthorization`, `Apps`, `Core`: the group as operation ids spell it.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split(['.', '-'])
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": true},
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn pretty() -> Value {
    query_param(
        "pretty",
        "string",
        "If 'true', then the output is pretty printed.",
    )
}

fn dry_run() -> Value {
    query_param(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    )
}

fn field_manager() -> Value {
    query_param(
        "fieldManager",
        "string",
        "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
    )
}

fn field_validation() -> Value {
    query_param(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    )
}

fn force() -> Value {
    query_param(
        "force",
        "boolean",
        "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
    )
}

fn list_params(watch: bool) -> Vec<Value> {
    let mut params = vec![
        query_param(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion.",
        ),
        query_param(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server.",
        ),
        query_param(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query_param(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query_param(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call.",
        ),
        query_param(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
        ),
        query_param(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        ),
        query_param(
            "sendInitialEvents",
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`.",
        ),
        query_param(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call.",
        ),
    ];
    if watch {
        params.push(query_param("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion."));
    }
    params
}

fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query_param(
            "gracePeriodSeconds",
            "integer",
            "The duration in seconds before the object should be deleted.",
        ),
        query_param(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection will be performed.",
        ),
    ]
}

fn json_content(schema: Value) -> Value {
    json!({
        "application/json": {"schema": schema.clone()},
        "application/yaml": {"schema": schema},
    })
}

fn responses(codes: &[(&str, &str)], schema: &Value) -> Value {
    let mut responses = Map::new();
    for (code, description) in codes {
        responses.insert(
            (*code).into(),
            json!({"description": description, "content": json_content(schema.clone())}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(responses)
}

/// Builds the operations of one group/version.
struct PathsBuilder {
    prefix: String,
    group_version_id: String,
    paths: Map<String, Value>,
}

/// What one operation is about.
struct Operation<'a> {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    gvk: Value,
    parameters: Vec<Value>,
    body: Option<Value>,
    responses: Value,
    tag: &'a str,
}

impl PathsBuilder {
    fn path_item(&mut self, path: &str, path_params: Vec<Value>) -> &mut Map<String, Value> {
        let item = self.paths.entry(path.to_owned()).or_insert_with(|| {
            let mut params = path_params;
            params.push(pretty());
            json!({"parameters": params})
        });
        item.as_object_mut().expect("path items are objects")
    }

    fn add(&mut self, path: &str, path_params: Vec<Value>, op: Operation<'_>) {
        let mut operation = json!({
            "tags": [op.tag],
            "description": op.description,
            "operationId": op.id,
            "parameters": op.parameters,
            "responses": op.responses,
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": op.gvk,
        });
        if let Some(body) = op.body {
            operation["requestBody"] = body;
        }
        self.path_item(path, path_params)
            .insert(op.method.into(), operation);
    }

    fn resource(
        &mut self,
        r: &ResourceInfo,
        kind_name: &str,
        list_name: &str,
        sub_kinds: &BTreeMap<(String, String, String), String>,
    ) {
        let tag = self.group_version_id.clone();
        let gv = self.group_version_id.clone();
        let gv = gv.as_str();
        let namespaced = if r.namespaced { "Namespaced" } else { "" };
        let kind_ref = schema_ref(kind_name);
        let list_ref = schema_ref(list_name);
        let status_ref = schema_ref(STATUS);
        let kind_gvk = gvk(&r.group, &r.version, &r.kind);
        let collection = if r.namespaced {
            format!("{}/namespaces/{{namespace}}/{}", self.prefix, r.plural)
        } else {
            format!("{}/{}", self.prefix, r.plural)
        };
        let object = format!("{collection}/{{name}}");
        let ns_param = || {
            if r.namespaced {
                vec![path_param(
                    "namespace",
                    "object name and auth scope, such as for teams and projects",
                )]
            } else {
                Vec::new()
            }
        };
        let name_params = || {
            let mut p = vec![path_param("name", &format!("name of the {}", r.kind))];
            p.extend(ns_param());
            p
        };
        let write_params = || vec![dry_run(), field_manager(), field_validation()];
        let body = |schema: &Value| json!({"content": {"*/*": {"schema": schema.clone()}}, "required": true});
        let patch_body = || {
            let mut content = Map::new();
            for media in PATCH_CONTENT_TYPES {
                content.insert(media.into(), json!({"schema": schema_ref(PATCH)}));
            }
            json!({"content": content, "required": true})
        };
        let kind = &r.kind;

        // The collection.
        self.add(
            &collection,
            ns_param(),
            Operation {
                method: "get",
                action: "list",
                id: format!("list{gv}{namespaced}{kind}"),
                description: format!("list or watch objects of kind {kind}"),
                gvk: kind_gvk.clone(),
                parameters: list_params(true),
                body: None,
                responses: responses(&[("200", "OK")], &list_ref),
                tag: &tag,
            },
        );
        self.add(
            &collection,
            ns_param(),
            Operation {
                method: "post",
                action: "post",
                id: format!("create{gv}{namespaced}{kind}"),
                description: format!("create a {kind}"),
                gvk: kind_gvk.clone(),
                parameters: write_params(),
                body: Some(body(&kind_ref)),
                responses: responses(
                    &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                    &kind_ref,
                ),
                tag: &tag,
            },
        );
        let mut params = delete_params();
        params.extend(list_params(false));
        self.add(
            &collection,
            ns_param(),
            Operation {
                method: "delete",
                action: "deletecollection",
                id: format!("deletecollection{gv}{namespaced}{kind}"),
                description: format!("delete collection of {kind}"),
                gvk: kind_gvk.clone(),
                parameters: params,
                body: Some(json!({"content": {"*/*": {"schema": schema_ref(DELETE_OPTIONS)}}})),
                responses: responses(&[("200", "OK")], &status_ref),
                tag: &tag,
            },
        );
        if r.namespaced {
            let all = format!("{}/{}", self.prefix, r.plural);
            self.add(
                &all,
                Vec::new(),
                Operation {
                    method: "get",
                    action: "list",
                    id: format!("list{gv}{kind}ForAllNamespaces"),
                    description: format!("list or watch objects of kind {kind}"),
                    gvk: kind_gvk.clone(),
                    parameters: list_params(true),
                    body: None,
                    responses: responses(&[("200", "OK")], &list_ref),
                    tag: &tag,
                },
            );
        }

        // One object.
        self.add(
            &object,
            name_params(),
            Operation {
                method: "get",
                action: "get",
                id: format!("read{gv}{namespaced}{kind}"),
                description: format!("read the specified {kind}"),
                gvk: kind_gvk.clone(),
                parameters: Vec::new(),
                body: None,
                responses: responses(&[("200", "OK")], &kind_ref),
                tag: &tag,
            },
        );
        self.add(
            &object,
            name_params(),
            Operation {
                method: "put",
                action: "put",
                id: format!("replace{gv}{namespaced}{kind}"),
                description: format!("replace the specified {kind}"),
                gvk: kind_gvk.clone(),
                parameters: write_params(),
                body: Some(body(&kind_ref)),
                responses: responses(&[("200", "OK"), ("201", "Created")], &kind_ref),
                tag: &tag,
            },
        );
        let mut params = write_params();
        params.push(force());
        self.add(
            &object,
            name_params(),
            Operation {
                method: "patch",
                action: "patch",
                id: format!("patch{gv}{namespaced}{kind}"),
                description: format!("partially update the specified {kind}"),
                gvk: kind_gvk.clone(),
                parameters: params,
                body: Some(patch_body()),
                responses: responses(&[("200", "OK"), ("201", "Created")], &kind_ref),
                tag: &tag,
            },
        );
        self.add(
            &object,
            name_params(),
            Operation {
                method: "delete",
                action: "delete",
                id: format!("delete{gv}{namespaced}{kind}"),
                description: format!("delete a {kind}"),
                gvk: kind_gvk.clone(),
                parameters: delete_params(),
                body: Some(json!({"content": {"*/*": {"schema": schema_ref(DELETE_OPTIONS)}}})),
                responses: responses(&[("200", "OK"), ("202", "Accepted")], &kind_ref),
                tag: &tag,
            },
        );

        // Subresources.
        for sub in &r.subresources {
            let path = format!("{object}/{}", sub.name);
            let sub_key = (sub.group.clone(), sub.version.clone(), sub.kind.clone());
            let sub_schema = if (sub.group.as_str(), sub.version.as_str(), sub.kind.as_str())
                == (r.group.as_str(), r.version.as_str(), r.kind.as_str())
            {
                kind_ref.clone()
            } else {
                match sub_kinds.get(&sub_key) {
                    Some(name) => schema_ref(name),
                    None => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                }
            };
            let sub_gvk = gvk(&sub.group, &sub.version, &sub.kind);
            let suffix = capitalize(&sub.name);
            for verb in &sub.verbs {
                let (method, action, id_verb, codes, params, body_schema): (
                    _,
                    _,
                    _,
                    &[(&str, &str)],
                    _,
                    _,
                ) = match verb.as_str() {
                    "get" => ("get", "get", "read", &[("200", "OK")], Vec::new(), None),
                    "update" => (
                        "put",
                        "put",
                        "replace",
                        &[("200", "OK"), ("201", "Created")],
                        write_params(),
                        Some(body(&sub_schema)),
                    ),
                    "patch" => {
                        let mut p = write_params();
                        p.push(force());
                        (
                            "patch",
                            "patch",
                            "patch",
                            &[("200", "OK"), ("201", "Created")],
                            p,
                            Some(patch_body()),
                        )
                    }
                    "create" => (
                        "post",
                        "post",
                        "create",
                        &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                        write_params(),
                        Some(body(&sub_schema)),
                    ),
                    _ => continue,
                };
                self.add(
                    &path,
                    name_params(),
                    Operation {
                        method,
                        action,
                        id: format!("{id_verb}{gv}{namespaced}{kind}{suffix}"),
                        description: format!("{id_verb} {} of the specified {kind}", sub.name),
                        gvk: sub_gvk.clone(),
                        parameters: params,
                        body: body_schema,
                        responses: responses(codes, &sub_schema),
                        tag: &tag,
                    },
                );
            }
        }
    }
}

/// Every `$ref` target named in `value`.
fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if key == "$ref"
                    && let Some(name) = child.as_str().and_then(|r| r.strip_prefix(REF_PREFIX))
                {
                    out.push(name.to_owned());
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        _ => {}
    }
}

/// Adds an `x-kubernetes-group-version-kind` entry to a schema.
fn tag_gvk(schema: &mut Value, entry: Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let list = object
        .entry("x-kubernetes-group-version-kind")
        .or_insert_with(|| json!([]));
    if let Some(list) = list.as_array_mut()
        && !list.contains(&entry)
    {
        list.push(entry);
    }
}

fn content_hash(bytes: &[u8]) -> String {
    // Two differently seeded SipHash passes: 128 bits, stable across runs.
    let mut first = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut first);
    let mut second = std::collections::hash_map::DefaultHasher::new();
    0xC0FFEEu32.hash(&mut second);
    bytes.hash(&mut second);
    format!("{:016X}{:016X}", first.finish(), second.finish())
}

impl OpenApi {
    /// Builds the index and every group/version's document for `registry`;
    /// `server_version` goes into each document's `info.version`
    /// (e.g. `v1.33.0`).
    pub fn build(registry: &Registry, server_version: &str) -> OpenApi {
        let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
        // The meta types operations refer to.
        for add in [
            |g: &mut SchemaGenerator| g.subschema_for::<meta::ObjectMeta>(),
            |g| g.subschema_for::<meta::ListMeta>(),
            |g| g.subschema_for::<meta::Status>(),
            |g| g.subschema_for::<meta::DeleteOptions>(),
            |g| g.subschema_for::<meta::WatchEvent<Pod>>(),
            |g| g.subschema_for::<meta::Patch>(),
        ] as [fn(&mut SchemaGenerator) -> Schema; 6]
        {
            add(&mut generator);
        }

        // Every kind's schema name; custom schemas kept aside.
        let mut kind_names: BTreeMap<(String, String, String), String> = BTreeMap::new();
        let mut custom: Map<String, Value> = Map::new();
        let mut group_versions: Vec<(String, String)> = Vec::new();
        for group in registry.groups() {
            for version in registry.versions(group) {
                group_versions.push((group.to_owned(), version.clone()));
                for r in registry.resources(group, &version) {
                    let key = (r.group.clone(), r.version.clone(), r.kind.clone());
                    let name = match &r.schema {
                        Some(KindSchema::Typed(schema)) => ref_name(&schema(&mut generator)),
                        _ => None,
                    };
                    let name = name.unwrap_or_else(|| {
                        let name = custom_schema_name(&r.group, &r.version, &r.kind);
                        let json = match &r.schema {
                            Some(KindSchema::Json(json)) => Some(json.as_ref()),
                            _ => None,
                        };
                        custom.insert(name.clone(), custom_schema(json));
                        name
                    });
                    kind_names.insert(key, name);
                }
            }
        }
        // Kinds of subresources that are not served kinds themselves.
        let mut sub_kinds: BTreeMap<(String, String, String), String> = kind_names.clone();
        for (group, version) in &group_versions {
            for r in registry.resources(group, version) {
                for sub in &r.subresources {
                    let key = (sub.group.clone(), sub.version.clone(), sub.kind.clone());
                    if sub_kinds.contains_key(&key) {
                        continue;
                    }
                    if let Some(schema) =
                        subresource_kind_schema(&sub.group, &sub.version, &sub.kind)
                        && let Some(name) = ref_name(&schema(&mut generator))
                    {
                        sub_kinds.insert(key, name);
                    }
                }
            }
        }
        let mut definitions = generator.take_definitions(true);
        definitions.extend(custom);
        for ((group, version, kind), name) in &sub_kinds {
            if let Some(schema) = definitions.get_mut(name) {
                tag_gvk(schema, gvk(group, version, kind));
            }
        }
        if let Some(status) = definitions.get_mut(STATUS) {
            tag_gvk(status, gvk("", "v1", "Status"));
        }

        let mut documents = BTreeMap::new();
        for (group, version) in &group_versions {
            let resources = registry.resources(group, version);
            let path = group_version_path(group, version);
            let mut builder = PathsBuilder {
                prefix: format!("/{path}"),
                group_version_id: format!("{}{}", group_camel(group), capitalize(version)),
                paths: Map::new(),
            };
            let mut schemas = Map::new();
            let mut kinds = BTreeMap::new();
            for r in &resources {
                let kind_name =
                    kind_names[&(r.group.clone(), r.version.clone(), r.kind.clone())].clone();
                let list_name = match kind_name.rsplit_once('.') {
                    Some((prefix, _)) => format!("{prefix}.{}", r.list_kind),
                    None => r.list_kind.clone(),
                };
                schemas.insert(
                    list_name.clone(),
                    json!({
                        "description": format!("{} is a list of {}", r.list_kind, r.kind),
                        "type": "object",
                        "properties": {
                            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
                            "items": {"description": format!("List of {}.", r.plural), "type": "array", "items": schema_ref(&kind_name)},
                            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
                            "metadata": {"allOf": [schema_ref(LIST_META)], "description": "Standard list metadata."},
                        },
                        "required": ["items"],
                        "x-kubernetes-group-version-kind": [gvk(&r.group, &r.version, &r.list_kind)],
                    }),
                );
                kinds.insert(r.kind.clone(), kind_name.clone());
                builder.resource(r, &kind_name, &list_name, &sub_kinds);
            }
            // Everything the paths and kinds reach.
            let mut pending = Vec::new();
            collect_refs(&Value::Object(builder.paths.clone()), &mut pending);
            collect_refs(&Value::Object(schemas.clone()), &mut pending);
            pending.extend(kinds.values().cloned());
            pending.extend(
                [
                    OBJECT_META,
                    LIST_META,
                    STATUS,
                    DELETE_OPTIONS,
                    WATCH_EVENT,
                    PATCH,
                ]
                .map(String::from),
            );
            let mut seen: BTreeSet<String> = schemas.keys().cloned().collect();
            while let Some(name) = pending.pop() {
                if !seen.insert(name.clone()) {
                    continue;
                }
                if let Some(schema) = definitions.get(&name) {
                    collect_refs(schema, &mut pending);
                    schemas.insert(name, schema.clone());
                }
            }
            let document = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": server_version},
                "paths": builder.paths,
                "components": {"schemas": schemas},
            });
            let bytes = serde_json::to_vec(&document).expect("JSON values serialize");
            let hash = content_hash(&bytes);
            documents.insert(
                path.clone(),
                GroupVersionDocument {
                    path,
                    hash,
                    json: Bytes::from(bytes),
                    schemas,
                    kinds,
                },
            );
        }
        let mut index = Map::new();
        for document in documents.values() {
            index.insert(
                document.path.clone(),
                json!({"serverRelativeURL": document.server_relative_url()}),
            );
        }
        let index = serde_json::to_vec(&json!({ "paths": index })).expect("JSON values serialize");
        OpenApi {
            index: Bytes::from(index),
            documents,
        }
    }

    /// The `/openapi/v3` index, serialized.
    pub fn index(&self) -> &Bytes {
        &self.index
    }

    /// The document of `path` (`api/v1`, `apis/apps/v1`).
    pub fn document(&self, path: &str) -> Option<&GroupVersionDocument> {
        self.documents.get(path)
    }

    /// Every document, by path.
    pub fn documents(&self) -> impl Iterator<Item = &GroupVersionDocument> {
        self.documents.values()
    }

    /// The schema of a served kind.
    pub fn kind_schema(&self, group: &str, version: &str, kind: &str) -> Option<SchemaView<'_>> {
        self.document(&group_version_path(group, version))?
            .kind_schema(kind)
    }

    /// The schema of a served resource's kind.
    pub fn resource_schema(&self, resource: &ResourceInfo) -> Option<SchemaView<'_>> {
        self.kind_schema(&resource.group, &resource.version, &resource.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn built() -> (Registry, OpenApi) {
        let mut registry = Registry::builtin();
        registry.register(
            ResourceInfo::new("example.com", "v1", "Widget", "widgets", true).with_schema(
                KindSchema::Json(Arc::new(json!({
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                }))),
            ),
        );
        registry.register(ResourceInfo::new(
            "example.com",
            "v1",
            "Blob",
            "blobs",
            false,
        ));
        let openapi = OpenApi::build(&registry, "v1.33.0");
        (registry, openapi)
    }

    fn document(openapi: &OpenApi, path: &str) -> Value {
        serde_json::from_slice(&openapi.document(path).unwrap().json).unwrap()
    }

    #[test]
    fn index_lists_every_group_version() {
        let (registry, openapi) = built();
        let index: Value = serde_json::from_slice(openapi.index()).unwrap();
        let paths = index["paths"].as_object().unwrap();
        for group in registry.groups() {
            for version in registry.versions(group) {
                let path = group_version_path(group, &version);
                let url = paths[&path]["serverRelativeURL"].as_str().unwrap();
                assert!(
                    url.starts_with(&format!("/openapi/v3/{path}?hash=")),
                    "{url}"
                );
            }
        }
        assert!(paths.contains_key("api/v1") && paths.contains_key("apis/apps/v1"));
        // Stable: the same registry gives the same hashes.
        assert_eq!(
            OpenApi::build(&registry, "v1.33.0").index(),
            openapi.index()
        );
    }

    #[test]
    fn every_kind_has_a_patch_operation_with_field_validation() {
        let (registry, openapi) = built();
        for group in registry.groups() {
            for version in registry.versions(group) {
                let doc = document(&openapi, &group_version_path(group, &version));
                assert_eq!(doc["openapi"], "3.0.0");
                let schemas = doc["components"]["schemas"].as_object().unwrap();
                for r in registry.resources(group, &version) {
                    let expected = gvk(&r.group, &r.version, &r.kind);
                    let patch = doc["paths"]
                        .as_object()
                        .unwrap()
                        .values()
                        .filter_map(|item| item.get("patch"))
                        .find(|op| op["x-kubernetes-group-version-kind"] == expected)
                        .unwrap_or_else(|| panic!("no PATCH for {}", r.kind));
                    let params = patch["parameters"].as_array().unwrap();
                    for name in ["fieldValidation", "fieldManager", "dryRun", "force"] {
                        assert!(
                            params.iter().any(|p| p["name"] == name),
                            "{} lacks {name}",
                            r.kind
                        );
                    }
                    let content = patch["requestBody"]["content"].as_object().unwrap();
                    for media in PATCH_CONTENT_TYPES {
                        assert!(content.contains_key(media));
                    }
                    // kubectl explain finds the kind's schema by its gvk.
                    let tagged = schemas.values().any(|s| {
                        s["x-kubernetes-group-version-kind"]
                            .as_array()
                            .is_some_and(|l| l.contains(&expected))
                    });
                    assert!(tagged, "no schema tagged {expected}");
                }
                // Every reference resolves within the document.
                let mut refs = Vec::new();
                collect_refs(&doc, &mut refs);
                for name in refs {
                    assert!(schemas.contains_key(&name), "dangling $ref {name}");
                }
            }
        }
    }

    #[test]
    fn operations_look_like_upstream() {
        let (_, openapi) = built();
        let doc = document(&openapi, "api/v1");
        let pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"];
        assert_eq!(pods["get"]["operationId"], "listCoreV1NamespacedPod");
        assert_eq!(pods["get"]["x-kubernetes-action"], "list");
        assert_eq!(pods["post"]["operationId"], "createCoreV1NamespacedPod");
        assert_eq!(
            pods["post"]["requestBody"]["content"]["*/*"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Pod"
        );
        assert_eq!(pods["delete"]["x-kubernetes-action"], "deletecollection");
        let list_params: Vec<&str> = pods["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for name in [
            "labelSelector",
            "limit",
            "continue",
            "resourceVersion",
            "watch",
        ] {
            assert!(list_params.contains(&name), "{name}");
        }
        let pod = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
        assert_eq!(pod["patch"]["operationId"], "patchCoreV1NamespacedPod");
        assert_eq!(pod["get"]["operationId"], "readCoreV1NamespacedPod");
        assert_eq!(pod["put"]["operationId"], "replaceCoreV1NamespacedPod");
        assert_eq!(pod["delete"]["operationId"], "deleteCoreV1NamespacedPod");
        let path_params: Vec<&str> = pod["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(path_params, ["name", "namespace", "pretty"]);
        let status = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/status"];
        assert_eq!(
            status["patch"]["operationId"],
            "patchCoreV1NamespacedPodStatus"
        );
        let binding = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/binding"];
        assert_eq!(
            binding["post"]["operationId"],
            "createCoreV1NamespacedPodBinding"
        );
        assert!(doc["paths"]["/api/v1/pods"]["get"].is_object());
        assert!(doc["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
        let apps = document(&openapi, "apis/apps/v1");
        let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
        assert_eq!(
            scale["patch"]["x-kubernetes-group-version-kind"]["kind"],
            "Scale"
        );
        assert!(apps["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"].is_object());
        let rbac = document(&openapi, "apis/rbac.authorization.k8s.io/v1");
        assert_eq!(
            rbac["paths"]["/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"]["patch"]["operationId"],
            "patchRbacAuthorizationV1ClusterRole"
        );
        // Meta types are there; references beside descriptions are wrapped.
        let schemas = &doc["components"]["schemas"];
        for name in [
            OBJECT_META,
            STATUS,
            DELETE_OPTIONS,
            WATCH_EVENT,
            PATCH,
            LIST_META,
            "io.k8s.api.core.v1.PodList",
        ] {
            assert!(schemas[name].is_object(), "{name}");
        }
        assert_eq!(
            schemas["io.k8s.api.core.v1.Pod"]["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("{REF_PREFIX}{OBJECT_META}")
        );
    }

    #[test]
    fn kind_schemas_resolve() {
        let (_, openapi) = built();
        let pod = openapi.kind_schema("", "v1", "Pod").unwrap();
        let containers = pod.field("spec").unwrap().field("containers").unwrap();
        let image = containers.items().unwrap().field("image").unwrap();
        assert_eq!(image.type_name(), Some("string"));
        assert!(
            pod.field("metadata")
                .unwrap()
                .field("labels")
                .unwrap()
                .is_map()
        );
        let deploy = openapi.kind_schema("apps", "v1", "Deployment").unwrap();
        let strategy = deploy.field("spec").unwrap().field("strategy").unwrap();
        assert!(strategy.description().is_some());
        let max_surge = strategy
            .field("rollingUpdate")
            .unwrap()
            .field("maxSurge")
            .unwrap();
        assert!(max_surge.is_int_or_string());
        assert_eq!(
            pod.unknown_fields(
                &json!({"spec": {"foo": 1, "containers": [{"name": "c", "bar": 2}]}})
            ),
            ["spec.containers[0].bar", "spec.foo"]
        );
        // Custom resources: their schema, metadata as ObjectMeta.
        let widget = openapi.kind_schema("example.com", "v1", "Widget").unwrap();
        assert_eq!(
            widget.unknown_fields(
                &json!({"metadata": {"name": "w", "nme": 1}, "spec": {"size": 1, "colour": "red"}})
            ),
            ["metadata.nme", "spec.colour"]
        );
        let doc = document(&openapi, "apis/example.com/v1");
        assert_eq!(
            doc["components"]["schemas"]["com.example.v1.Widget"]["x-kubernetes-group-version-kind"]
                [0]["kind"],
            "Widget"
        );
        // Kinds without a schema take anything but still check metadata.
        let blob = openapi.kind_schema("example.com", "v1", "Blob").unwrap();
        assert_eq!(
            blob.unknown_fields(&json!({"metadata": {"nme": 1}, "data": {"x": 1}})),
            ["metadata.nme"]
        );
    }
}
