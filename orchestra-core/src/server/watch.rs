//! Watch: a chunked stream of `{"type": ..., "object": ...}` lines.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use orchestra_store::{EventKind, KeyRange, KeyValue, Revision, WatchRequest};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::body;
use super::list::list_items;
use super::objects::{Target, store_error};
use super::route::Query;
use super::state::State;
use super::watch_objects::{WatchObject, WatchObjects};
use crate::api::{ApiError, FieldSelector, LabelSelector};

/// How long a watch without `timeoutSeconds` stays open (upstream: 30 to 60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Filters and shapes store events into watch events.
struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
    /// The resource watched (custom resources show their served version).
    resource: Arc<crate::api::ResourceInfo>,
    /// Its identity in the shared event objects.
    resource_id: Arc<str>,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches_object(object) && self.fields.matches_object(object)
    }

    /// True if every object matches (no selector): the previous version of
    /// a changed object need not be decoded to know it matched.
    fn matches_all(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    super::table::event_line(kind, &serde_json::to_vec(object).expect("JSON values serialize"))
}

fn bookmark(target: &Target, revision: Revision, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": target.resource.kind, "apiVersion": target.resource.api_version(), "metadata": metadata})
}

/// Serves a watch request; events are shaped as negotiated (`output`).
pub(crate) async fn watch(state: Arc<State>, target: Target, query: Query, output: super::table::Output) -> Response {
    match start(state, target, query, output).await {
        Ok(response) => response,
        Err(error) => body::error(&error),
    }
}

async fn start(
    state: Arc<State>,
    target: Target,
    query: Query,
    output: super::table::Output,
) -> Result<Response, ApiError> {
    let mut encoder = super::table::WatchEncoder::new(output, &target.resource);
    let content_type = encoder.content_type();
    let filter = Filter {
        labels: LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))?,
        fields: FieldSelector::parse(query.field_selector.as_deref().unwrap_or(""))?
            .for_kind(&target.resource.group, &target.resource.kind)?,
        resource: target.resource.clone(),
        resource_id: WatchObjects::resource_id(&target.resource),
    };
    let requested = match query.resource_version.as_deref() {
        None | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<Revision>().map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?,
        ),
    };
    let initial_events = match query.send_initial_events {
        Some(true) => {
            if query.resource_version_match.as_deref() != Some("NotOlderThan") || !query.allow_watch_bookmarks {
                return Err(ApiError::invalid(
                    &target.error_target(""),
                    vec![crate::api::FieldError::invalid(
                        "resourceVersionMatch",
                        query.resource_version_match.as_deref().unwrap_or(""),
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks",
                    )],
                ));
            }
            true
        }
        Some(false) => false,
        // Without sendInitialEvents, "unset or 0" means: the current state first.
        None => requested.is_none(),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut from = requested.map(|r| r + 1).unwrap_or(0);
    let mut initial = Vec::new();
    if initial_events {
        let mut list_query = query.clone();
        list_query.limit = None;
        list_query.continue_token = None;
        list_query.resource_version_match = None;
        let listed = list_items(&state, &target, &list_query).await?;
        from = listed.revision + 1;
        initial = listed.items.iter().map(|item| encoder.encode("ADDED", item)).collect();
        if query.send_initial_events == Some(true) {
            initial.push(encoder.encode("BOOKMARK", &bookmark(&target, listed.revision, true)));
        }
    }
    let range = KeyRange::prefix(target.resource.storage_collection(target.namespace.as_deref()));
    let mut request = WatchRequest::new(range).from_revision(from);
    if query.allow_watch_bookmarks {
        request = request.with_progress_notify(state.options.bookmark_interval);
    }
    let timeout = query.timeout_seconds.map(Duration::from_secs).unwrap_or(DEFAULT_TIMEOUT);
    let watch = state.store.watch(request).await;
    tokio::spawn(async move {
        let mut stream = match watch {
            Ok(stream) => stream,
            Err(e) => {
                let error = store_error(e, &target.error_target(""));
                let _ = tx.send(line("ERROR", &error.to_json())).await;
                return;
            }
        };
        for item in initial {
            if tx.send(item).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let response = tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                next = stream.next() => match next {
                    Some(response) => response,
                    None => return,
                },
            };
            let response = match response {
                Ok(response) => response,
                Err(e) => {
                    let error = store_error(e, &target.error_target(""));
                    let _ = tx.send(line("ERROR", &error.to_json())).await;
                    return;
                }
            };
            if response.is_progress_notify() {
                if query.allow_watch_bookmarks
                    && tx.send(encoder.encode("BOOKMARK", &bookmark(&target, response.revision, false))).await.is_err()
                {
                    return;
                }
                continue;
            }
            for event in response.events {
                let Some((kind, object)) = to_event(&state.watch_objects, &filter, &event) else {
                    continue;
                };
                if tx.send(encoder.encode_shared(kind, &object)).await.is_err() {
                    return;
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// The watch event (type, object) of a store event, or `None` if the
/// filter hides it.
fn to_event(
    objects: &WatchObjects,
    filter: &Filter,
    event: &orchestra_store::Event,
) -> Option<(&'static str, Arc<WatchObject>)> {
    let object = |stored: &KeyValue, revision| objects.get(&filter.resource_id, &filter.resource, stored, revision);
    match event.kind {
        EventKind::Put => {
            let new = object(&event.kv, event.kv.mod_revision)?;
            let old_matched = match &event.prev_kv {
                Some(_) if filter.matches_all() => true,
                Some(prev) => object(prev, prev.mod_revision).is_some_and(|old| filter.matches(&old.value)),
                None => false,
            };
            match (old_matched, filter.matches(&new.value)) {
                (true, true) => Some(("MODIFIED", new)),
                (false, true) => Some(("ADDED", new)),
                (true, false) => Some(("DELETED", new)),
                (false, false) => None,
            }
        }
        EventKind::Delete => {
            let old = object(event.prev_kv.as_ref()?, event.kv.mod_revision)?;
            filter.matches(&old.value).then_some(("DELETED", old))
        }
    }
}
