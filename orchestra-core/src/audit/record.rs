//! One request's audit record, as the API server fills it: begun when the
//! request arrives, noted once the user and the authorization decision are
//! known, finished with the response.

use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;

use super::event::now_micro;
use super::{Auditor, Event, EventUser, Level, ObjectReference, RequestAuditConfig, Stage, carries_secrets};
use crate::auth::{Attributes, Decision};

/// The response header naming the request's audit id.
const AUDIT_ID_HEADER: &str = "audit-id";

/// Subresources served as long-running requests (upstream's
/// `--long-running-request-regexp` defaults).
const LONG_RUNNING_SUBRESOURCES: [&str; 5] = ["attach", "exec", "log", "portforward", "proxy"];

/// A request's audit record; a request extension, so that the handlers
/// can note what they learn.
#[derive(Clone)]
pub(crate) struct Record(Arc<Inner>);

struct Inner {
    auditor: Auditor,
    state: Mutex<State>,
}

struct State {
    /// The fields every event of the request shares.
    event: Event,
    /// What the policy says, once the request's attributes are known.
    config: Option<RequestAuditConfig>,
    /// The request body, for the object's name and `requestObject`.
    request_body: Option<Bytes>,
    long_running: bool,
    /// A path that is not an API path.
    path: String,
}

impl Record {
    /// Starts the record of `request` and attaches it to the request.
    pub(crate) fn begin(auditor: &Auditor, request: &mut Request) -> Record {
        let headers = request.headers();
        let audit_id = headers
            .get(AUDIT_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|id| !id.is_empty() && id.len() <= 128)
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let uri = request.uri();
        let request_uri = uri.path_and_query().map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
        let mut event = Event::new(audit_id, request.method().as_str().to_ascii_lowercase(), request_uri);
        event.user_agent =
            headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        event.source_ips = source_ips(request);
        let path = request.uri().path().to_owned();
        let state = State { event, config: None, request_body: None, long_running: false, path };
        let record = Record(Arc::new(Inner { auditor: auditor.clone(), state: Mutex::new(state) }));
        request.extensions_mut().insert(record.clone());
        record
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the request's attributes (its user empty when authentication
    /// failed) and the authorization decision, and logs RequestReceived.
    pub(crate) fn note(extensions: &http::Extensions, attributes: &Attributes, decision: Option<&Decision>) {
        let Some(record) = extensions.get::<Record>() else { return };
        let mut state = record.state();
        let mut config = record.0.auditor.policy.evaluate(attributes);
        if carries_secrets(attributes) {
            config.level = config.level.min(Level::Metadata);
        }
        let event = &mut state.event;
        event.verb = attributes.verb.clone();
        event.user = EventUser::from(&attributes.user);
        if attributes.resource_request {
            event.object_ref = Some(ObjectReference {
                resource: attributes.resource.clone(),
                namespace: attributes.namespace.clone(),
                name: attributes.name.clone(),
                api_group: attributes.api_group.clone(),
                api_version: api_version(&attributes.path).to_owned(),
                subresource: attributes.subresource.clone(),
                ..Default::default()
            });
        }
        match decision {
            Some(Decision::Deny(reason)) => annotate(event, "forbid", reason),
            Some(_) => annotate(event, "allow", ""),
            None => {}
        }
        state.long_running = attributes.verb == "watch"
            || (attributes.resource_request && LONG_RUNNING_SUBRESOURCES.contains(&attributes.subresource.as_str()));
        state.config = Some(config);
        state.event.stage_timestamp = now_micro();
        record.emit(&state, Stage::RequestReceived);
    }

    /// Keeps the request body, when the policy logs the request at all.
    pub(crate) fn request_body(extensions: &http::Extensions, body: &Bytes) {
        let Some(record) = extensions.get::<Record>() else { return };
        let mut state = record.state();
        if state.config.as_ref().is_some_and(|c| c.level >= Level::Metadata) {
            state.request_body = Some(body.clone());
        }
    }

    /// Adds annotations to the events still to come (admission's, known
    /// once the handler is done: they annotate the ResponseComplete event).
    pub(crate) fn annotate(&self, annotations: Vec<(String, String)>) {
        let mut state = self.state();
        for (key, value) in annotations {
            state.event.annotations.entry(key).or_insert(value);
        }
    }

    /// Logs a panic of the handler.
    pub(crate) fn panicked(&self) {
        let mut state = self.state();
        self.ensure_noted(&mut state);
        state.event.response_status = Some(serde_json::json!({
            "metadata": {}, "status": "Failure", "code": 500, "message": "APIServer panic'd",
        }));
        state.event.stage_timestamp = now_micro();
        self.emit(&state, Stage::Panic);
    }

    /// Logs the response (ResponseStarted and, when its body ends,
    /// ResponseComplete for long-running requests; ResponseComplete for the
    /// others) and adds the `Audit-Id` header.
    pub(crate) async fn finish(self, mut response: Response) -> Response {
        let (level, long_running, omit_managed_fields) = {
            let mut state = self.state();
            if let Ok(value) = http::HeaderValue::from_str(&state.event.audit_id) {
                response.headers_mut().insert(AUDIT_ID_HEADER, value);
            }
            self.ensure_noted(&mut state);
            let config = state.config.as_ref().expect("noted");
            (config.level, state.long_running, config.omit_managed_fields)
        };
        if level == Level::None {
            return response;
        }
        let code = response.status().as_u16();
        {
            let mut state = self.state();
            let body = state.request_body.take();
            let object = body.as_deref().and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok());
            if let (Some(object), Some(reference)) = (&object, state.event.object_ref.as_mut()) {
                let meta = &object["metadata"];
                let text = |field: &str| meta[field].as_str().unwrap_or_default().to_owned();
                if reference.name.is_empty() {
                    reference.name = text("name");
                }
                if reference.namespace.is_empty() {
                    reference.namespace = text("namespace");
                }
            }
            if level >= Level::Request {
                state.event.request_object = object.map(|o| trimmed(o, omit_managed_fields));
            }
            state.event.response_status = Some(serde_json::json!({"metadata": {}, "code": code}));
        }
        if (long_running && code < 300) || code == 101 {
            {
                let mut state = self.state();
                state.event.stage_timestamp = now_micro();
                self.emit(&state, Stage::ResponseStarted);
            }
            let guard = CompleteOnDrop(self);
            return response.map(|body| {
                use http_body_util::BodyExt as _;
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _logged_when_the_stream_ends = &guard;
                    frame
                }))
            });
        }
        let json = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if json && (level == Level::RequestResponse || code >= 400) {
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
            if let Ok(object) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                let mut state = self.state();
                if object["kind"] == "Status" {
                    let mut status = object.clone();
                    if let Some(map) = status.as_object_mut() {
                        map.remove("kind");
                        map.remove("apiVersion");
                        map.insert("code".into(), code.into());
                    }
                    state.event.response_status = Some(status);
                }
                if level == Level::RequestResponse {
                    state.event.response_object = Some(trimmed(object, omit_managed_fields));
                }
            }
            response = Response::from_parts(parts, axum::body::Body::from(bytes));
        }
        let mut state = self.state();
        state.event.stage_timestamp = now_micro();
        self.emit(&state, Stage::ResponseComplete);
        response
    }

    /// Evaluates the policy for a request the handlers never described
    /// (a path that is not the API's), and logs its RequestReceived.
    fn ensure_noted(&self, state: &mut State) {
        if state.config.is_some() {
            return;
        }
        let attributes = Attributes { verb: state.event.verb.clone(), path: state.path.clone(), ..Default::default() };
        state.config = Some(self.0.auditor.policy.evaluate(&attributes));
        self.emit(state, Stage::RequestReceived);
    }

    fn emit(&self, state: &State, stage: Stage) {
        let Some(config) = &state.config else { return };
        if config.level == Level::None || config.omit_stages.contains(&stage) {
            return;
        }
        let mut event = state.event.clone();
        event.stage = stage;
        event.level = config.level;
        self.0.auditor.emit(&event);
    }
}

/// Logs ResponseComplete of a long-running request when its body is
/// dropped: after its last frame, or when the client went away.
struct CompleteOnDrop(Record);

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.event.stage_timestamp = now_micro();
        self.0.emit(&state, Stage::ResponseComplete);
    }
}

fn annotate(event: &mut Event, decision: &str, reason: &str) {
    event.annotations.insert("authorization.k8s.io/decision".into(), decision.into());
    if !reason.is_empty() {
        event.annotations.insert("authorization.k8s.io/reason".into(), reason.into());
    }
}

/// The API version of a resource path: `v1` for `/api/v1/...`, `v1` for
/// `/apis/apps/v1/...`.
fn api_version(path: &str) -> &str {
    let mut segments = path.trim_start_matches('/').split('/');
    match segments.next() {
        Some("api") => segments.next().unwrap_or_default(),
        Some("apis") => segments.nth(1).unwrap_or_default(),
        _ => "",
    }
}

/// `object` without `metadata.managedFields` (of itself and of a list's
/// items) when the policy omits them.
fn trimmed(mut object: serde_json::Value, omit_managed_fields: bool) -> serde_json::Value {
    if omit_managed_fields {
        let strip = |o: &mut serde_json::Value| {
            if let Some(meta) = o.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("managedFields");
            }
        };
        strip(&mut object);
        if let Some(items) = object.get_mut("items").and_then(|i| i.as_array_mut()) {
            items.iter_mut().for_each(strip);
        }
    }
    object
}

/// The client's addresses: `X-Forwarded-For`, `X-Real-Ip`, then the
/// connection's peer, without repeats.
fn source_ips(request: &Request) -> Vec<String> {
    let headers = request.headers();
    let mut ips: Vec<String> = Vec::new();
    let forwarded = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let real = headers.get("x-real-ip").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let peer =
        request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip().to_string());
    for ip in forwarded.split(',').chain([real]).map(str::trim).map(str::to_owned).chain(peer) {
        if !ip.is_empty() && ip.parse::<std::net::IpAddr>().is_ok() && !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_and_managed_fields() {
        for (path, version) in [("/api/v1/pods", "v1"), ("/apis/apps/v1/deployments", "v1"), ("/healthz", "")] {
            assert_eq!(api_version(path), version, "{path}");
        }
        let object = serde_json::json!({"metadata": {"name": "a", "managedFields": []}, "items": [{"metadata": {"managedFields": []}}]});
        assert_eq!(
            trimmed(object.clone(), true),
            serde_json::json!({"metadata": {"name": "a"}, "items": [{"metadata": {}}]})
        );
        assert_eq!(trimmed(object.clone(), false), object);
    }
}
