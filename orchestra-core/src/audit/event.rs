//! Upstream's `audit.k8s.io/v1` `Event`, as one JSON line of the log.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Level, Stage};

/// The user a request was made by (`authentication.k8s.io/v1` `UserInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EventUser {
    /// The user name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The user's unique id.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The user's groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Further attributes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&crate::auth::UserInfo> for EventUser {
    fn from(user: &crate::auth::UserInfo) -> EventUser {
        EventUser {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        }
    }
}

/// The object a request was about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ObjectReference {
    /// The resource (plural).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The API group.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The API version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The object's resource version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// The subresource.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// One audit event: a request at one of its stages.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Event {
    /// Always `Event`.
    pub kind: &'static str,
    /// Always `audit.k8s.io/v1`.
    pub api_version: &'static str,
    /// The level the policy gave the request.
    pub level: Level,
    /// The request's id, shared by its events and returned to the client
    /// in the `Audit-Id` header.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage this event records.
    pub stage: Stage,
    /// The path and query of the request.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// The verb (`get`, `list`, `create`, ...; the HTTP method in lower
    /// case for non-resource requests).
    pub verb: String,
    /// The authenticated user (empty when authentication failed).
    pub user: EventUser,
    /// The user the request impersonated, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<EventUser>,
    /// The client's addresses: `X-Forwarded-For`, `X-Real-Ip`, then the
    /// connection's peer.
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    /// The client's `User-Agent`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object of a resource request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    /// The response's `Status` (the code alone for a success).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<serde_json::Value>,
    /// The request body (levels Request and RequestResponse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<serde_json::Value>,
    /// The response body (level RequestResponse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<serde_json::Value>,
    /// When the request arrived (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When the stage was reached.
    pub stage_timestamp: String,
    /// Annotations, among them the authorization decision
    /// (`authorization.k8s.io/decision`, `authorization.k8s.io/reason`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    /// An event of request `audit_id` at stage RequestReceived, received now.
    pub fn new(audit_id: impl Into<String>, verb: impl Into<String>, request_uri: impl Into<String>) -> Event {
        let now = now_micro();
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: audit_id.into(),
            stage: Stage::RequestReceived,
            request_uri: request_uri.into(),
            verb: verb.into(),
            user: EventUser::default(),
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: now.clone(),
            stage_timestamp: now,
            annotations: BTreeMap::new(),
        }
    }
}

/// The time now, RFC 3339 in UTC with microseconds (upstream's `MicroTime`).
pub(crate) fn now_micro() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    format!("{}.{:06}Z", now.strftime("%Y-%m-%dT%H:%M:%S"), now.subsec_microsecond())
}
