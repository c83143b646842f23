//! Discovery: `/version`, and the group and resource lists in both the
//! aggregated (apidiscovery.k8s.io v2 / v2beta1) and the legacy shapes.

use axum::http::{HeaderMap, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::body;
use crate::api::{Registry, ResourceInfo};

/// The Kubernetes version the server reports (kubectl picks its matching client by it).
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// `/version`.
pub(crate) fn version() -> Response {
    let (major, minor) = KUBERNETES_VERSION;
    body::json(
        200,
        &json!({
            "major": major,
            "minor": minor,
            "gitVersion": format!("v{major}.{minor}.0-orchestra.{}", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
    )
}

/// Which aggregated discovery version the client accepts, if any.
fn aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        if params.contains(&"g=apidiscovery.k8s.io") && params.contains(&"as=APIGroupDiscoveryList") {
            if params.contains(&"v=v2") {
                return Some("v2");
            }
            if params.contains(&"v=v2beta1") {
                return Some("v2beta1");
            }
        }
    }
    None
}

fn discovery_resource(info: &ResourceInfo) -> Value {
    let mut resource = json!({
        "resource": info.plural,
        "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": info.verbs,
    });
    if !info.short_names.is_empty() {
        resource["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        resource["categories"] = json!(info.categories);
    }
    if !info.subresources.is_empty() {
        resource["subresources"] = info
            .subresources
            .iter()
            .map(|s| {
                json!({
                    "subresource": s.name,
                    "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                    "verbs": s.verbs,
                })
            })
            .collect();
    }
    resource
}

fn discovery_group(registry: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = registry
        .versions(group)
        .iter()
        .map(|version| {
            let resources: Vec<Value> =
                registry.resources(group, version).iter().map(|r| discovery_resource(r)).collect();
            json!({"version": version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": versions})
}

fn aggregated_list(version: &'static str, items: Vec<Value>) -> Response {
    let content_type = match version {
        "v2" => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        _ => "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
    };
    body::json_with_type(
        200,
        &json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": format!("apidiscovery.k8s.io/{version}"),
            "metadata": {},
            "items": items,
        }),
        content_type,
    )
}

/// `/api`.
pub(crate) fn core_versions(registry: &Registry, headers: &HeaderMap) -> Response {
    if let Some(version) = aggregated(headers) {
        return aggregated_list(version, vec![discovery_group(registry, "")]);
    }
    body::json(
        200,
        &json!({
            "kind": "APIVersions",
            "versions": registry.versions(""),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }),
    )
}

/// `/apis`.
pub(crate) fn groups(registry: &Registry, headers: &HeaderMap) -> Response {
    let named: Vec<&str> = registry.groups().filter(|g| !g.is_empty()).collect();
    if let Some(version) = aggregated(headers) {
        return aggregated_list(version, named.iter().map(|g| discovery_group(registry, g)).collect());
    }
    let groups: Vec<Value> = named
        .iter()
        .map(|group| {
            let versions: Vec<Value> = registry
                .versions(group)
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    body::json(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/api/v1`, `/apis/<group>/<version>`: the legacy resource list.
pub(crate) fn group_version(registry: &Registry, group: &str, version: &str) -> Response {
    let mut resources = Vec::new();
    for info in registry.resources(group, version) {
        let mut entry = json!({
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": info.verbs,
        });
        if !info.short_names.is_empty() {
            entry["shortNames"] = json!(info.short_names);
        }
        if !info.categories.is_empty() {
            entry["categories"] = json!(info.categories);
        }
        resources.push(entry);
        for sub in &info.subresources {
            let mut entry = json!({
                "name": format!("{}/{}", info.plural, sub.name),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            if sub.group != info.group || sub.version != info.version {
                entry["group"] = json!(sub.group);
                entry["version"] = json!(sub.version);
            }
            resources.push(entry);
        }
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    body::json(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
