//! Output negotiation for reads: plain JSON, YAML, `meta.k8s.io` `Table`
//! (what `kubectl get` asks for) or `PartialObjectMetadata`, from the
//! `Accept` header and `includeObject`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::body;
use super::watch_objects::WatchObject;
use crate::api::table::{IncludeObject, Printer, Table, Timestamp, partial_object_metadata};
use crate::api::{ApiError, ResourceInfo};

/// The media types upstream lists in its 406 message.
const ACCEPTED: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// How a read is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Output {
    /// The object or list as JSON (also the answer to protobuf requests).
    #[default]
    Json,
    /// The object or list as YAML (not for watches).
    Yaml,
    /// A `meta.k8s.io` Table of the given version.
    Table {
        /// `v1` or `v1beta1`.
        version: &'static str,
        /// What each row's `object` holds.
        include: IncludeObject,
    },
    /// `PartialObjectMetadata` (or `…List`) of the given version.
    Metadata {
        /// `v1` or `v1beta1`.
        version: &'static str,
    },
}

fn meta_version(params: &[(String, String)]) -> Option<&'static str> {
    let get = |k: &str| params.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    if get("g") != Some("meta.k8s.io") {
        return None;
    }
    match get("v") {
        Some("v1") => Some("v1"),
        Some("v1beta1") => Some("v1beta1"),
        _ => None,
    }
}

/// Picks the output of a GET, a list or a watch from `Accept` (clauses in
/// order, the first one served wins) and `includeObject`. No acceptable
/// clause: 406 NotAcceptable, like upstream.
pub(crate) fn negotiate(headers: &HeaderMap, raw_query: Option<&str>, watch: bool) -> Result<Output, ApiError> {
    let accept = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>().join(",");
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
            })
            .collect();
        if params.iter().any(|(k, v)| k == "q" && v.parse::<f32>().ok() == Some(0.0)) {
            continue;
        }
        let as_ = params.iter().find(|(k, _)| k == "as").map(|(_, v)| v.as_str());
        let chosen = match (media.as_str(), as_) {
            ("application/json" | "application/*" | "*/*", Some("Table")) => {
                meta_version(&params).map(|version| Output::Table { version, include: IncludeObject::Metadata })
            }
            (
                "application/json" | "application/*" | "*/*",
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
            ) => meta_version(&params).map(|version| Output::Metadata { version }),
            ("application/json" | "application/*" | "*/*", None) => Some(Output::Json),
            // Protobuf is answered with JSON, which clients accept.
            ("application/vnd.kubernetes.protobuf", None) => Some(Output::Json),
            ("application/yaml", None) if !watch => Some(Output::Yaml),
            _ => None,
        };
        if let Some(Output::Table { version, .. }) = chosen {
            return Ok(Output::Table { version, include: include_object(raw_query)? });
        }
        if let Some(output) = chosen {
            return Ok(output);
        }
    }
    Err(ApiError::not_acceptable(ACCEPTED))
}

fn include_object(raw_query: Option<&str>) -> Result<IncludeObject, ApiError> {
    let value = raw_query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "includeObject")
        .map(|(_, v)| super::route::percent_decode(v))
        .unwrap_or_default();
    IncludeObject::parse(&value).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Unable to convert to Table as requested: includeObject: Invalid value: {value:?}: must be 'Metadata', 'Object', 'None', or empty"
        ))
    })
}

/// The printer of a kind: its own, or Name and Age.
pub(crate) fn printer_of(resource: &ResourceInfo) -> Printer {
    resource.printer.clone().unwrap_or_else(Printer::default_printer)
}

fn content_type(output: Output, list: bool) -> &'static str {
    match output {
        Output::Json => "application/json",
        Output::Yaml => "application/yaml",
        Output::Table { version: "v1", .. } => "application/json;as=Table;v=v1;g=meta.k8s.io",
        Output::Table { .. } => "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        Output::Metadata { version: "v1" } if list => {
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
        }
        Output::Metadata { version: "v1" } => "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        Output::Metadata { .. } if list => "application/json;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io",
        Output::Metadata { .. } => "application/json;as=PartialObjectMetadata;v=v1beta1;g=meta.k8s.io",
    }
}

/// Converts a GET's object or a list into the negotiated shape.
fn convert(value: Value, output: Output, printer: &Printer, list: bool) -> Value {
    let now = Timestamp::now();
    match output {
        Output::Json | Output::Yaml => value,
        Output::Table { version, include } => {
            let table = Table::new(&**printer, now).include(include);
            let table = if list {
                let items = value["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                table.metadata_from(&value["metadata"]).rows(items)
            } else {
                table.metadata_from(&value["metadata"]).rows([&value])
            };
            table.to_json(&format!("meta.k8s.io/{version}"))
        }
        Output::Metadata { version } => {
            let api_version = format!("meta.k8s.io/{version}");
            if list {
                let items: Vec<Value> = value["items"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                    .iter()
                    .map(|item| partial_object_metadata(item, &api_version))
                    .collect();
                json!({"kind": "PartialObjectMetadataList", "apiVersion": api_version,
                    "metadata": value["metadata"], "items": items})
            } else {
                partial_object_metadata(&value, &api_version)
            }
        }
    }
}

/// Answers a GET of one object (`list: false`) or of a collection,
/// printing Tables with `printer` (see [`printer_of`]).
pub(crate) fn respond(result: Result<Value, ApiError>, output: Output, printer: &Printer, list: bool) -> Response {
    let value = match result {
        Ok(value) => convert(value, output, printer, list),
        Err(error) => return body::error(&error),
    };
    if output != Output::Yaml {
        return body::json_with_type(200, &value, content_type(output, list));
    }
    match serde_yaml::to_string(&value) {
        Ok(text) => {
            let mut response = Response::new(Body::from(text));
            *response.status_mut() = StatusCode::OK;
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
            response
        }
        Err(e) => body::error(&ApiError::internal(e)),
    }
}

/// Encodes watch events in the negotiated shape: each object as a one-row
/// Table (column definitions only in the first event) or as
/// `PartialObjectMetadata`; `ERROR` Status objects as they are.
pub(crate) struct WatchEncoder {
    output: Output,
    printer: Printer,
    headers_sent: bool,
}

impl WatchEncoder {
    /// An encoder for watch events of `resource`.
    pub(crate) fn new(output: Output, resource: &Arc<ResourceInfo>) -> WatchEncoder {
        WatchEncoder { output, printer: printer_of(resource), headers_sent: false }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(&self) -> &'static str {
        content_type(self.output, false)
    }

    /// One event line: `{"type": kind, "object": …}\n`.
    pub(crate) fn encode(&mut self, kind: &str, object: &Value) -> Bytes {
        match self.output {
            Output::Json | Output::Yaml => {
                event_line(kind, &serde_json::to_vec(object).expect("JSON values serialize"))
            }
            _ if kind == "ERROR" => event_line(kind, &serde_json::to_vec(object).expect("JSON values serialize")),
            _ => self.encode_shaped(kind, object),
        }
    }

    /// One event line for an object of a watch event: JSON watchers share
    /// its encoding.
    pub(crate) fn encode_shared(&mut self, kind: &str, object: &WatchObject) -> Bytes {
        match self.output {
            Output::Json | Output::Yaml => event_line(kind, object.json()),
            _ => self.encode_shaped(kind, &object.value),
        }
    }

    fn encode_shaped(&mut self, kind: &str, object: &Value) -> Bytes {
        let object = match self.output {
            Output::Json | Output::Yaml => object.clone(),
            Output::Metadata { version } => partial_object_metadata(object, &format!("meta.k8s.io/{version}")),
            Output::Table { version, include } => {
                let mut table =
                    Table::new(&*self.printer, Timestamp::now()).include(include).metadata_from(&object["metadata"]);
                if self.headers_sent {
                    table = table.without_headers();
                }
                if kind != "BOOKMARK" {
                    self.headers_sent = true;
                    table = table.rows([object]);
                }
                table.to_json(&format!("meta.k8s.io/{version}"))
            }
        };
        event_line(kind, &serde_json::to_vec(&object).expect("JSON values serialize"))
    }
}

/// `{"type":"<kind>","object":<object>}` and a newline. `kind` is one of
/// the watch event types, which need no escaping.
pub(crate) fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    const TBL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    #[test]
    fn negotiation() {
        let table = |version, include| Ok(Output::Table { version, include });
        // (Accept, query, watch, expected output or status code)
        type Case<'a> = (&'a str, Option<&'a str>, bool, Result<Output, u16>);
        let cases: Vec<Case<'_>> = vec![
            ("", None, false, Ok(Output::Json)),
            (TBL, None, false, table("v1", IncludeObject::Metadata)),
            (TBL, Some("includeObject=Object&limit=500"), false, table("v1", IncludeObject::Object)),
            (TBL, Some("includeObject=None"), true, table("v1", IncludeObject::None)),
            (
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
                None,
                false,
                table("v1beta1", IncludeObject::Metadata),
            ),
            ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None, false, Ok(Output::Json)),
            ("application/json;as=Table;v=v2;g=meta.k8s.io", None, false, Err(406)),
            ("application/vnd.kubernetes.protobuf,application/json", None, false, Ok(Output::Json)),
            ("application/yaml", None, false, Ok(Output::Yaml)),
            ("application/yaml", None, true, Err(406)),
            ("text/html", None, false, Err(406)),
            ("*/*", None, false, Ok(Output::Json)),
            (
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                None,
                false,
                Ok(Output::Metadata { version: "v1" }),
            ),
            (TBL, Some("includeObject=Bogus"), false, Err(400)),
        ];
        for (header, query, watch, expected) in cases {
            let got = negotiate(&accept(header), query, watch).map_err(|e| e.code);
            assert_eq!(got, expected, "{header} {query:?}");
        }
    }

    #[test]
    fn watch_tables_carry_headers_once() {
        let pods = Arc::new(crate::api::ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>());
        let mut encoder = WatchEncoder::new(Output::Table { version: "v1", include: IncludeObject::Metadata }, &pods);
        let pod = json!({"metadata": {"name": "p", "resourceVersion": "5"}, "spec": {"containers": [{"name": "c"}]}});
        let decode = |b: Bytes| serde_json::from_slice::<Value>(&b).unwrap();
        let first = decode(encoder.encode("ADDED", &pod));
        assert_eq!(first["type"], "ADDED");
        assert_eq!(first["object"]["kind"], "Table");
        assert_eq!(first["object"]["metadata"]["resourceVersion"], "5");
        assert_eq!(first["object"]["columnDefinitions"][0]["name"], "Name");
        assert_eq!(first["object"]["rows"][0]["cells"][0], "p");
        let second = decode(encoder.encode("MODIFIED", &pod));
        assert!(second["object"]["columnDefinitions"].is_null());
        assert_eq!(second["object"]["rows"].as_array().unwrap().len(), 1);
        let status = json!({"kind": "Status", "code": 410});
        assert_eq!(decode(encoder.encode("ERROR", &status))["object"], status);
        assert_eq!(encoder.content_type(), "application/json;as=Table;v=v1;g=meta.k8s.io");
    }
}
