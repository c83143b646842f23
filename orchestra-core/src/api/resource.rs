//! What the API server knows about a kind: its resource description.

use std::sync::Arc;

use k8s_openapi::schemars::{JsonSchema, Schema, SchemaGenerator};
use k8s_openapi::{ListableResource, Resource};
use serde_json::Value;

/// Where a kind's OpenAPI v3 schema comes from: the one source for OpenAPI
/// documents, `kubectl explain`, strict field validation, strategic merge
/// patch and server-side apply.
#[derive(Debug, Clone)]
pub enum KindSchema {
    /// A Rust type's `schemars::JsonSchema` implementation (the built-in
    /// `k8s-openapi` kinds). Nested types are `$ref`s into the generator's
    /// definitions, named like upstream (`io.k8s.api.core.v1.PodSpec`).
    Typed(fn(&mut SchemaGenerator) -> Schema),
    /// A schema given as JSON (custom resources: the CRD version's
    /// `openAPIV3Schema`), self-contained.
    Json(Arc<serde_json::Value>),
}

/// A subresource served under an object, e.g. `pods/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubresourceInfo {
    /// Name after the object name in the path, e.g. `status`.
    pub name: String,
    /// Group, version and kind of what it takes and returns.
    pub group: String,
    /// Version of the response kind.
    pub version: String,
    /// Kind of the response.
    pub kind: String,
    /// Verbs it supports.
    pub verbs: Vec<String>,
}

/// Checks that an object decodes as a kind's type; the error is the decoder's.
pub type DecodeCheck = fn(&serde_json::Value) -> Result<(), String>;

/// One served resource: group, version, kind, names, scope and subresources.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for the core group).
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Kind of the list, e.g. `PodList`.
    pub list_kind: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// True for namespaced kinds.
    pub namespaced: bool,
    /// Short names, e.g. `po`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Subresources served.
    pub subresources: Vec<SubresourceInfo>,
    /// Verbs served on the resource ([`RESOURCE_VERBS`] unless set with
    /// [`ResourceInfo::verbs`]; `["create"]` for the access reviews).
    pub verbs: Vec<String>,
    /// Checks that an object decodes as the kind's type (a type error is a
    /// 400, like upstream's JSON decoding errors).
    pub decode_check: Option<DecodeCheck>,
    /// The kind's own validation (422 with causes).
    pub validate: Option<fn(&serde_json::Value) -> Vec<super::FieldError>>,
    /// The kind's schema, if known.
    pub schema: Option<KindSchema>,
    /// How `kubectl get` prints the kind (server-side Table); `None`: Name, Age.
    pub printer: Option<super::table::Printer>,
    /// Set for custom resources: what the CRD says beyond names (schema
    /// handling, scale paths, the storage version).
    pub custom: Option<Arc<super::crd::CustomResource>>,
    /// Set for kinds kept in another kind's storage (`events.k8s.io/v1`
    /// Events live with `core/v1` Events).
    pub storage: Option<super::conversion::StorageConversion>,
    /// How long an object lives after its last write (Events: one hour, as
    /// upstream's `--event-ttl`); `None`: until deleted.
    pub ttl: Option<std::time::Duration>,
}

/// Whether a `k8s-openapi` scope type is namespaced.
///
/// ```
/// use k8s_openapi::Resource;
/// use k8s_openapi::api::core::v1::{Node, Pod};
/// use orchestra_core::api::Scope;
///
/// fn namespaced<K: Resource>() -> bool
/// where
///     K::Scope: Scope,
/// {
///     <K::Scope as Scope>::NAMESPACED
/// }
///
/// assert!(namespaced::<Pod>());
/// assert!(!namespaced::<Node>());
/// ```
pub trait Scope {
    /// True for namespaced kinds.
    const NAMESPACED: bool;
}

impl Scope for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// The verbs every collection resource supports.
pub const RESOURCE_VERBS: [&str; 8] =
    ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

impl ResourceInfo {
    /// Describes a `k8s-openapi` type.
    pub fn of<K>() -> ResourceInfo
    where
        K: Resource + ListableResource + serde::de::DeserializeOwned + JsonSchema,
        K::Scope: Scope,
    {
        ResourceInfo {
            group: K::GROUP.into(),
            version: K::VERSION.into(),
            kind: K::KIND.into(),
            list_kind: K::LIST_KIND.into(),
            plural: K::URL_PATH_SEGMENT.into(),
            singular: K::KIND.to_ascii_lowercase(),
            namespaced: K::Scope::NAMESPACED,
            short_names: Vec::new(),
            categories: Vec::new(),
            subresources: Vec::new(),
            verbs: RESOURCE_VERBS.iter().map(|v| v.to_string()).collect(),
            decode_check: Some(|value| K::deserialize(value).map(drop).map_err(|e| e.to_string())),
            validate: None,
            schema: Some(KindSchema::Typed(|generator| generator.subschema_for::<K>())),
            printer: super::table::builtin(K::GROUP, K::KIND),
            custom: None,
            storage: None,
            ttl: None,
        }
    }

    /// Describes a kind from its names (custom resources, user kinds).
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
        ResourceInfo {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            subresources: Vec::new(),
            verbs: RESOURCE_VERBS.iter().map(|v| v.to_string()).collect(),
            decode_check: None,
            validate: None,
            schema: None,
            printer: None,
            custom: None,
            storage: None,
            ttl: None,
        }
    }

    /// Sets the kind's validation.
    pub fn validated_by(mut self, validate: fn(&serde_json::Value) -> Vec<super::FieldError>) -> ResourceInfo {
        self.validate = Some(validate);
        self
    }

    /// Sets the kind's schema.
    pub fn with_schema(mut self, schema: KindSchema) -> ResourceInfo {
        self.schema = Some(schema);
        self
    }

    /// Sets the verbs served (discovery; other verbs get 405).
    pub fn verbs(mut self, verbs: &[&str]) -> ResourceInfo {
        self.verbs = verbs.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Sets the short names.
    pub fn short_names(mut self, names: &[&str]) -> ResourceInfo {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Puts the resource in the `all` category (`kubectl get all`).
    pub fn in_all(mut self) -> ResourceInfo {
        self.categories.push("all".into());
        self
    }

    /// Sets how the kind is printed as a Table (e.g. a CRD's
    /// [`TableColumns`](super::table::TableColumns)).
    pub fn with_printer(mut self, printer: super::table::Printer) -> ResourceInfo {
        self.printer = Some(printer);
        self
    }

    /// Keeps the kind's objects in another kind's storage, converted on
    /// every write and read.
    pub fn stored_as(mut self, conversion: super::conversion::StorageConversion) -> ResourceInfo {
        self.storage = Some(conversion);
        self
    }

    /// Lets the store expire each object `ttl` after its last write.
    pub fn expiring_after(mut self, ttl: std::time::Duration) -> ResourceInfo {
        self.ttl = Some(ttl);
        self
    }

    /// The form an object of this kind is stored in.
    pub fn to_storage(&self, object: Value) -> Value {
        match &self.storage {
            Some(conversion) => conversion.stored(object),
            None => object,
        }
    }

    /// Turns a stored object into this kind's served form.
    pub fn from_storage(&self, object: &mut Value) {
        if let Some(conversion) = &self.storage {
            conversion.served(object, &self.api_version(), &self.kind);
        }
    }

    /// Adds a `status` subresource.
    pub fn with_status(self) -> ResourceInfo {
        let (group, version, kind) = (self.group.clone(), self.version.clone(), self.kind.clone());
        self.with_subresource("status", &group, &version, &kind, &["get", "patch", "update"])
    }

    /// Adds a `scale` subresource (autoscaling/v1 Scale).
    pub fn with_scale(self) -> ResourceInfo {
        self.with_subresource("scale", "autoscaling", "v1", "Scale", &["get", "patch", "update"])
    }

    /// Adds any subresource.
    pub fn with_subresource(
        mut self,
        name: &str,
        group: &str,
        version: &str,
        kind: &str,
        verbs: &[&str],
    ) -> ResourceInfo {
        self.subresources.push(SubresourceInfo {
            name: name.into(),
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
        });
        self
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// True if the resource serves `name` as a subresource.
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.name == name)
    }

    /// The store prefix of every object of the resource:
    /// `/registry/<group>/<plural>/` (`/registry/<plural>/` for the core group).
    /// Kinds [stored as](ResourceInfo::stored_as) another use its prefix.
    pub fn storage_prefix(&self) -> String {
        self.storage_path(&[])
    }

    /// The store key of one object (`namespace` is ignored for cluster-scoped kinds).
    pub fn storage_key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => self.storage_path(&[ns, "/", name]),
            _ => self.storage_path(&[name]),
        }
    }

    /// The store prefix of the objects of one namespace, or of all of them.
    pub fn storage_collection(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => self.storage_path(&[ns, "/"]),
            _ => self.storage_prefix(),
        }
    }

    /// [`storage_prefix`](Self::storage_prefix) followed by `parts`, in one
    /// allocation (every request computes a key).
    fn storage_path(&self, parts: &[&str]) -> String {
        let (group, plural) = match &self.storage {
            Some(conversion) => (conversion.group, conversion.plural),
            None => (self.group.as_str(), self.plural.as_str()),
        };
        let parts_len: usize = parts.iter().map(|part| part.len()).sum();
        let mut path = String::with_capacity("/registry/".len() + group.len() + 1 + plural.len() + 1 + parts_len);
        path.push_str("/registry/");
        if !group.is_empty() {
            path.push_str(group);
            path.push('/');
        }
        path.push_str(plural);
        path.push('/');
        parts.iter().for_each(|part| path.push_str(part));
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, core::v1::Pod};

    #[test]
    fn describes_openapi_types() {
        let pod = ResourceInfo::of::<Pod>();
        assert_eq!((pod.group.as_str(), pod.plural.as_str(), pod.list_kind.as_str()), ("", "pods", "PodList"));
        assert!(pod.namespaced);
        assert_eq!(pod.storage_key(Some("default"), "web"), "/registry/pods/default/web");
        let node = ResourceInfo::of::<Node>();
        assert!(!node.namespaced);
        assert_eq!(node.storage_key(Some("ignored"), "n1"), "/registry/nodes/n1");
        let deploy = ResourceInfo::of::<Deployment>();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.storage_collection(Some("prod")), "/registry/apps/deployments/prod/");
    }
}
