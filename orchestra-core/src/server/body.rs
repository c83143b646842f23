//! Reading request bodies and writing responses.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::api::ApiError;

/// Largest request body accepted (upstream: 3 MiB), checked before decoding.
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Reads the whole body, refusing more than [`MAX_BODY_BYTES`] with 413.
pub(crate) async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, ApiError> {
    if let Some(length) = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        && length > MAX_BODY_BYTES
    {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
            ApiError::too_large(MAX_BODY_BYTES)
        } else {
            ApiError::bad_request(format!("failed to read the request body: {e}"))
        }
    })
}

/// The media type of the request body, without parameters.
pub(crate) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// The text formats an object body may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// JSON (also when no media type is given).
    Json,
    /// YAML.
    Yaml,
}

/// The text format of an object body of media type `media`; `None` for
/// protobuf and for media types objects are not accepted in.
pub(crate) fn object_format(media: &str) -> Option<Format> {
    match media {
        "" | "application/json" | "*/*" => Some(Format::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" => Some(Format::Yaml),
        _ => None,
    }
}

/// Decodes a JSON, YAML or Kubernetes protobuf object body.
pub(crate) fn decode_object(bytes: &[u8], headers: &HeaderMap) -> Result<Value, ApiError> {
    let media = content_type(headers);
    let value: Value = match object_format(&media) {
        Some(Format::Json) => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}")))?,
        Some(Format::Yaml) => serde_yaml::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded as YAML: {e}")))?,
        None if media == super::protobuf::MEDIA_TYPE => super::protobuf::decode(bytes)?,
        None => return Err(ApiError::unsupported_media_type(&media)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    Ok(value)
}

/// A JSON response.
pub(crate) fn json(status: u16, value: &Value) -> Response {
    json_with_type(status, value, "application/json")
}

/// A JSON response with a specific content type.
pub(crate) fn json_with_type(status: u16, value: &Value, content_type: &'static str) -> Response {
    json_bytes(status, serde_json::to_vec(value).expect("JSON values serialize"), content_type)
}

/// A response of JSON already serialized.
pub(crate) fn json_bytes(status: u16, body: Vec<u8>, content_type: &'static str) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The `Status` response of an error.
pub(crate) fn error(error: &ApiError) -> Response {
    json(error.code, &error.to_json())
}

/// Adds each admission warning as a `Warning: 299 - "<text>"` header
/// (RFC 7234's warn-text: quotes and backslashes escaped), as upstream
/// sends them and kubectl prints them.
pub(crate) fn add_warnings(response: &mut Response, warnings: &[String]) {
    for warning in warnings {
        let text = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_bytes(format!("299 - \"{text}\"").as_bytes()) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
}

/// A plain-text response.
pub(crate) fn text(status: u16, body: &'static str) -> Response {
    text_with_type(status, body, "text/plain; charset=utf-8")
}

/// A text response with a specific content type.
pub(crate) fn text_with_type(status: u16, body: impl Into<Body>, content_type: &'static str) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
