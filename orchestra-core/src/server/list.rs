//! Lists of stored objects: selectors, pagination with continue tokens,
//! `resourceVersion` semantics, and the JSON of a list written as it is read.

use std::time::Duration;

use orchestra_store::{Error as StoreError, KeyRange, KeyValue, RangeRequest, Revision, Store};
use serde_json::{Value, json};

use super::codec::{decode_served, raw};
use super::objects::{Target, parse_revision, store_error};
use super::route::Query;
use super::state::State;
use crate::api::{ApiError, FieldSelector, LabelSelector};

/// A list: items, the revision it was read at, and the continuation.
pub(crate) struct Listed<T = Value> {
    pub items: Vec<T>,
    pub revision: Revision,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

fn encode_continue(revision: Revision, last_key: &str) -> String {
    let hex: String = last_key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{revision}-{hex}")
}

fn decode_continue(token: &str) -> Result<(Revision, String), ApiError> {
    let invalid = || ApiError::bad_request("continue key is not valid");
    let (revision, hex) = token.split_once('-').ok_or_else(invalid)?;
    let revision = revision.parse().map_err(|_| invalid())?;
    if hex.len() % 2 != 0 {
        return Err(invalid());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    Ok((revision, String::from_utf8(bytes).map_err(|_| invalid())?))
}

/// The revision a list reads at, from `resourceVersion` and `resourceVersionMatch`.
async fn list_revision(state: &State, query: &Query) -> Result<Revision, ApiError> {
    let Some(rv) = query.resource_version.as_deref() else {
        return Ok(0);
    };
    let requested = parse_revision(rv)?;
    match query.resource_version_match.as_deref() {
        Some("Exact") if requested == 0 => {
            Err(ApiError::bad_request("resourceVersionMatch=Exact requires a non-zero resourceVersion"))
        }
        Some("Exact") => Ok(requested),
        None | Some("NotOlderThan") => {
            // Served from the latest state, which must be at least `requested`.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
            loop {
                let current = state.store.status().await.map_err(ApiError::internal)?.revision;
                if current >= requested {
                    return Ok(0);
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(ApiError {
                        code: 504,
                        reason: "Timeout",
                        message: format!("Too large resource version: {requested}, current: {current}"),
                        details: None,
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Some(other) => Err(ApiError::bad_request(format!("unsupported resourceVersionMatch {other:?}"))),
    }
}

/// Reads a (possibly paginated) list with selectors applied.
pub(crate) async fn list_items(state: &State, target: &Target, query: &Query) -> Result<Listed, ApiError> {
    list_with(state, target, query, |kv, labels, fields| {
        let object = decode_served(&target.resource, kv)?;
        Ok((labels.matches_object(&object) && fields.matches_object(&object)).then_some(object))
    })
    .await
}

/// Reads a (possibly paginated) list: `accept` turns each stored object
/// into an item, or `None` if the selectors leave it out.
async fn list_with<T>(
    state: &State,
    target: &Target,
    query: &Query,
    mut accept: impl FnMut(&KeyValue, &LabelSelector, &FieldSelector) -> Result<Option<T>, ApiError>,
) -> Result<Listed<T>, ApiError> {
    let labels = LabelSelector::parse(query.label_selector.as_deref().unwrap_or(""))?;
    let fields = FieldSelector::parse(query.field_selector.as_deref().unwrap_or(""))?
        .for_kind(&target.resource.group, &target.resource.kind)?;
    let collection = KeyRange::prefix(target.resource.storage_collection(target.namespace.as_deref()));
    let limit = query.limit.unwrap_or(0);
    let mut request = match &query.continue_token {
        Some(token) => {
            let (revision, last_key) = decode_continue(token)?;
            RangeRequest::new(collection.after(&last_key)).at_revision(revision)
        }
        None => RangeRequest::new(collection).at_revision(list_revision(state, query).await?),
    }
    .with_limit(limit);
    let error_target = target.error_target("");
    let mut listed = Listed { items: Vec::new(), revision: 0, continue_token: None, remaining: None };
    loop {
        let response = target.store(state).range(request.clone()).await.map_err(|e| match e {
            StoreError::Compacted { .. } if query.continue_token.is_some() => ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ),
            other => store_error(other, &error_target),
        })?;
        listed.revision = response.revision;
        for (i, kv) in response.kvs.iter().enumerate() {
            if let Some(item) = accept(kv, &labels, &fields)? {
                listed.items.push(item);
            }
            let full = limit > 0 && listed.items.len() >= limit;
            let more_after = i + 1 < response.kvs.len() || response.more;
            if full && more_after {
                listed.continue_token = Some(encode_continue(response.revision, &kv.key));
                if labels.is_empty() && fields.is_empty() {
                    listed.remaining = Some(response.count - (i + 1));
                }
                return Ok(listed);
            }
        }
        match request.next_page(&response) {
            Some(next) => request = next,
            None => return Ok(listed),
        }
    }
}

/// Reads every key under `prefix`, page by page at one revision, handing
/// each to `each`; returns that revision. The server's own caches (the
/// namespaces', RBAC's) fill themselves with it before they watch.
pub(crate) async fn list_prefix(
    store: &dyn Store,
    prefix: &str,
    mut each: impl FnMut(&KeyValue),
) -> Result<Revision, StoreError> {
    let mut request = RangeRequest::new(KeyRange::prefix(prefix));
    loop {
        let response = store.range(request.clone()).await?;
        response.kvs.iter().for_each(&mut each);
        match request.next_page(&response) {
            Some(next) => request = next,
            None => return Ok(response.revision),
        }
    }
}

/// The list's own `metadata`.
fn list_metadata<T>(listed: &Listed<T>) -> Value {
    let mut metadata = json!({"resourceVersion": listed.revision.to_string()});
    if let Some(token) = &listed.continue_token {
        metadata["continue"] = token.clone().into();
    }
    if let Some(remaining) = listed.remaining {
        metadata["remainingItemCount"] = remaining.into();
    }
    metadata
}

/// GET of a collection (not a watch).
pub(crate) async fn list(state: &State, target: &Target, query: &Query) -> Result<Value, ApiError> {
    let listed = list_items(state, target, query).await?;
    Ok(json!({
        "apiVersion": target.resource.api_version(),
        "kind": target.resource.list_kind,
        "metadata": list_metadata(&listed),
        "items": listed.items,
    }))
}

/// GET of a collection as JSON, serialized as it is read: each item's
/// stored bytes are served with their resource version spliced in
/// ([`raw`]) rather than decoded and encoded again, where the kind allows.
/// The bytes are those [`list`]'s value serializes to.
pub(crate) async fn list_json(state: &State, target: &Target, query: &Query) -> Result<Vec<u8>, ApiError> {
    let raw = raw::is_servable(&target.resource);
    let text =
        |out: &mut Vec<u8>, value: &str| serde_json::to_writer(out, value).expect("writing to a Vec cannot fail");
    // The keys in the order a JSON map sorts them, as `list` gives them;
    // items are written as they are read.
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"{\"apiVersion\":");
    text(&mut out, &target.resource.api_version());
    out.extend_from_slice(b",\"items\":[");
    let listed = list_with(state, target, query, |kv, labels, fields| {
        let start = out.len();
        if *out.last().expect("the list has begun") != b'[' {
            out.push(b',');
        }
        if raw && fields.is_empty() {
            if !raw::labels_match(kv, labels)? {
                out.truncate(start);
                return Ok(None);
            }
            raw::write_stamped(kv, &mut out)?;
        } else {
            let object = decode_served(&target.resource, kv)?;
            if !(labels.matches_object(&object) && fields.matches_object(&object)) {
                out.truncate(start);
                return Ok(None);
            }
            serde_json::to_writer(&mut out, &object).expect("JSON values serialize");
        }
        Ok(Some(()))
    })
    .await?;
    out.extend_from_slice(b"],\"kind\":");
    text(&mut out, &target.resource.list_kind);
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &list_metadata(&listed)).expect("JSON values serialize");
    out.push(b'}');
    Ok(out)
}
