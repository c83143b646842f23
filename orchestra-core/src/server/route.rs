//! Request paths and query parameters, parsed.

use std::sync::Arc;

use crate::api::{ApiError, Registry, ResourceInfo};

/// What a request path addresses.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// `/metrics`.
    Metrics,
    /// `/api`: the core group's versions.
    CoreVersions,
    /// `/apis`: the named groups.
    Groups,
    /// `/openapi/v3` (empty path) or `/openapi/v3/<api/v1 | apis/<g>/<v>>`.
    OpenApiV3 { path: String },
    /// `/openapi/v2`: the Swagger 2.0 document.
    OpenApiV2,
    /// `/api/v1` or `/apis/<group>/<version>`: its resources.
    GroupVersion { group: String, version: String },
    /// A resource collection, in one namespace or across all (`namespace: None`).
    Collection { resource: Arc<ResourceInfo>, namespace: Option<String> },
    /// One object, or one of its subresources.
    Object { resource: Arc<ResourceInfo>, namespace: Option<String>, name: String, subresource: Option<String> },
}

impl Route {
    /// Parses `path` against the resources of `registry`.
    pub(crate) fn parse(path: &str, registry: &Registry) -> Result<Route, ApiError> {
        let trimmed = path.trim_end_matches('/');
        let segments: Vec<&str> = trimmed.split('/').filter(|s| !s.is_empty()).collect();
        let not_found = || ApiError::no_route(path);
        let (group, version, rest) = match segments.as_slice() {
            ["version"] => return Ok(Route::Version),
            ["healthz" | "livez" | "readyz", ..] => return Ok(Route::Health),
            ["metrics"] => return Ok(Route::Metrics),
            ["api"] => return Ok(Route::CoreVersions),
            ["apis"] => return Ok(Route::Groups),
            ["openapi", "v2"] => return Ok(Route::OpenApiV2),
            ["openapi", "v3", rest @ ..] => {
                return Ok(Route::OpenApiV3 { path: rest.join("/") });
            }
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(not_found()),
        };
        let resource = |plural: &str| registry.get(group, version, plural).ok_or_else(not_found);
        let owned = |s: &str| s.to_owned();
        // `/namespaces/<ns>/<resource>...`: a namespaced resource, unless the
        // third segment is a subresource of the namespace itself.
        let namespaced = match rest {
            ["namespaces", _, plural, ..] => registry.get(group, version, plural).filter(|r| r.namespaced),
            _ => None,
        };
        Ok(match (rest, namespaced) {
            ([], _) => {
                if !registry.serves(group, version) {
                    return Err(not_found());
                }
                Route::GroupVersion { group: group.into(), version: version.into() }
            }
            (["namespaces", ns, _, tail @ ..], Some(resource)) => {
                let namespace = Some(owned(ns));
                match tail {
                    [] => Route::Collection { resource, namespace },
                    [name] => Route::Object { resource, namespace, name: owned(name), subresource: None },
                    [name, sub] => {
                        Route::Object { resource, namespace, name: owned(name), subresource: Some(owned(sub)) }
                    }
                    _ => return Err(not_found()),
                }
            }
            ([plural, tail @ ..], _) => {
                let resource = resource(plural)?;
                match tail {
                    [] => Route::Collection { resource, namespace: None },
                    _ if resource.namespaced => return Err(not_found()),
                    [name] => Route::Object { resource, namespace: None, name: owned(name), subresource: None },
                    [name, sub] => {
                        Route::Object { resource, namespace: None, name: owned(name), subresource: Some(owned(sub)) }
                    }
                    _ => return Err(not_found()),
                }
            }
        })
    }
}

/// The query parameters the API understands.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout_seconds: Option<u64>,
    pub dry_run: bool,
    pub field_manager: Option<String>,
    pub force: bool,
    pub field_validation: Option<String>,
    pub pretty: bool,
}

/// Parses a boolean the way Go's `strconv.ParseBool` does.
fn parse_bool(name: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "1" | "t" | "T" | "true" | "True" | "TRUE" => Ok(true),
        "0" | "f" | "F" | "false" | "False" | "FALSE" => Ok(false),
        _ => Err(ApiError::bad_request(format!("invalid boolean for {name}: {value:?}"))),
    }
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ApiError> {
    value.parse().map_err(|_| ApiError::bad_request(format!("invalid value for {name}: {value:?}")))
}

impl Query {
    /// Parses a raw query string (percent-encoded).
    pub(crate) fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
        let mut query = Query::default();
        let Some(raw) = raw else { return Ok(query) };
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "labelSelector" => query.label_selector = Some(value),
                "fieldSelector" => query.field_selector = Some(value),
                "limit" => query.limit = Some(parse_number(key, &value)?).filter(|l| *l > 0),
                "continue" => query.continue_token = Some(value).filter(|v| !v.is_empty()),
                "resourceVersion" => query.resource_version = Some(value).filter(|v| !v.is_empty()),
                "resourceVersionMatch" => query.resource_version_match = Some(value).filter(|v| !v.is_empty()),
                "watch" => query.watch = parse_bool(key, &value)?,
                "allowWatchBookmarks" => query.allow_watch_bookmarks = parse_bool(key, &value)?,
                "sendInitialEvents" => query.send_initial_events = Some(parse_bool(key, &value)?),
                "timeoutSeconds" => query.timeout_seconds = Some(parse_number(key, &value)?),
                "dryRun" => query.dry_run = value == "All",
                "fieldManager" => query.field_manager = Some(value),
                "force" => query.force = parse_bool(key, &value)?,
                "fieldValidation" => query.field_validation = Some(value),
                "pretty" => query.pretty = parse_bool(key, &value).unwrap_or(false),
                // `timeout` shortens the request's deadline (see `timeout.rs`);
                // anything unknown is ignored, like upstream.
                _ => {}
            }
        }
        Ok(query)
    }
}

pub(crate) use crate::api::escape::percent_decode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = Registry::builtin();
        assert!(
            matches!(Route::parse("/api/v1/namespaces/default/pods", &r), Ok(Route::Collection { namespace: Some(ns), .. }) if ns == "default")
        );
        assert!(matches!(Route::parse("/api/v1/pods", &r), Ok(Route::Collection { namespace: None, .. })));
        assert!(
            matches!(Route::parse("/api/v1/namespaces/kube-system", &r), Ok(Route::Object { name, subresource: None, .. }) if name == "kube-system")
        );
        assert!(
            matches!(Route::parse("/api/v1/namespaces/x/status", &r), Ok(Route::Object { subresource: Some(s), .. }) if s == "status")
        );
        assert!(
            matches!(Route::parse("/api/v1/namespaces/d/pods/p/binding", &r), Ok(Route::Object { subresource: Some(s), .. }) if s == "binding")
        );
        assert!(matches!(Route::parse("/apis/apps/v1/namespaces/d/deployments/x/scale", &r), Ok(Route::Object { .. })));
        assert!(matches!(Route::parse("/api/v1/nodes/n1", &r), Ok(Route::Object { namespace: None, .. })));
        assert!(matches!(Route::parse("/apis/apps/v1", &r), Ok(Route::GroupVersion { .. })));
        assert!(matches!(Route::parse("/version/", &r), Ok(Route::Version)));
        assert!(matches!(Route::parse("/openapi/v3", &r), Ok(Route::OpenApiV3 { path }) if path.is_empty()));
        assert!(
            matches!(Route::parse("/openapi/v3/apis/apps/v1", &r), Ok(Route::OpenApiV3 { path }) if path == "apis/apps/v1")
        );
        assert!(matches!(Route::parse("/openapi/v2", &r), Ok(Route::OpenApiV2)));
        assert!(Route::parse("/openapi/v2/api/v1", &r).is_err());
        assert!(Route::parse("/openapi/v1", &r).is_err());
        assert!(Route::parse("/api/v1/pods/p", &r).is_err(), "namespaced objects need a namespace");
        assert!(Route::parse("/api/v1/widgets", &r).is_err());
        assert!(Route::parse("/apis/nope/v1", &r).is_err());
    }

    #[test]
    fn queries() {
        let q =
            Query::parse(Some("labelSelector=app%3Dweb&limit=500&watch=True&timeoutSeconds=5&timeout=32s")).unwrap();
        assert_eq!(q.label_selector.as_deref(), Some("app=web"));
        assert_eq!(q.limit, Some(500));
        assert!(q.watch);
        assert_eq!(q.timeout_seconds, Some(5));
        assert!(Query::parse(Some("watch=yes")).is_err());
        assert_eq!(percent_decode("a%2Cb+c%"), "a,b c%");
    }
}
