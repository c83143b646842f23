//! `certificates.k8s.io/v1` CertificateSigningRequests: validation and
//! the write rules upstream's registry strategies enforce.
//!
//! - On create the server sets `spec.username`, `uid`, `groups` and
//!   `extra` from the requesting user ([`stamp_requestor`]) and drops any
//!   `status`.
//! - The main resource changes metadata only; `status` changes the
//!   certificate and conditions other than approval; `approval` changes the
//!   `Approved` and `Denied` conditions only ([`prepare_update`]).
//! - An issued certificate never changes, approval and denial are never
//!   withdrawn ([`validate_update`]), a certificate is only issued for an
//!   approved request ([`validate`]).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::error::FieldError;

/// The API group.
pub const GROUP: &str = "certificates.k8s.io";
/// The resource (plural).
pub const RESOURCE: &str = "certificatesigningrequests";
/// Client certificates for the API server, issued by the cluster CA.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Node client certificates for the API server (`system:node:<name>`).
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Node serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// The shortest validity a request may ask for (`spec.expirationSeconds`).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// Every usage `spec.usages` may list (upstream's `KeyUsage` values).
pub const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The condition types only the `approval` subresource sets.
const APPROVAL_CONDITIONS: [&str; 2] = ["Approved", "Denied"];

/// Whether `group`/`plural` is this resource.
pub fn is_csr(group: &str, plural: &str) -> bool {
    group == GROUP && plural == RESOURCE
}

/// Whether the request has a condition of type `kind` with status `True`.
///
/// ```
/// use orchestra_core::api::certificates::has_condition;
/// use serde_json::json;
///
/// let csr = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}});
/// assert!(has_condition(&csr, "Approved"));
/// assert!(!has_condition(&csr, "Denied"));
/// ```
pub fn has_condition(csr: &Value, kind: &str) -> bool {
    conditions(csr).iter().any(|c| c["type"] == kind && c["status"] == "True")
}

fn conditions(csr: &Value) -> &[Value] {
    csr.pointer("/status/conditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// Sets `spec.username`, `uid`, `groups` and `extra` from the user creating
/// the request, whatever the client sent, and drops `status`.
///
/// ```
/// use std::collections::BTreeMap;
/// use orchestra_core::api::certificates::stamp_requestor;
/// use serde_json::json;
///
/// let mut csr = json!({"spec": {"username": "forged", "groups": ["system:masters"]}, "status": {"certificate": "x"}});
/// stamp_requestor(&mut csr, "alice", "", &["devs".to_owned()], &BTreeMap::new());
/// assert_eq!(csr["spec"]["username"], "alice");
/// assert_eq!(csr["spec"]["groups"], json!(["devs"]));
/// assert!(csr.get("status").is_none());
/// ```
pub fn stamp_requestor(
    csr: &mut Value,
    username: &str,
    uid: &str,
    groups: &[String],
    extra: &BTreeMap<String, Vec<String>>,
) {
    if !csr.get("spec").is_some_and(Value::is_object) {
        csr["spec"] = json!({});
    }
    let spec = csr["spec"].as_object_mut().expect("made an object");
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    spec.insert("username".into(), username.into());
    if !uid.is_empty() {
        spec.insert("uid".into(), uid.into());
    }
    if !groups.is_empty() {
        spec.insert("groups".into(), json!(groups));
    }
    if !extra.is_empty() {
        spec.insert("extra".into(), json!(extra));
    }
    if let Some(object) = csr.as_object_mut() {
        object.remove("status");
    }
}

/// Merges an update of the request (`subresource` `None`, `status` or
/// `approval`) into the stored `old`, keeping what that write may not
/// change, and stamps new conditions' times.
pub fn prepare_update(old: &Value, new: &Value, subresource: Option<&str>) -> Value {
    let mut merged = old.clone();
    match subresource {
        None => merged["metadata"] = new.get("metadata").cloned().unwrap_or_else(|| json!({})),
        Some("status") => {
            let mut status = new.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
            let kept = keep_conditions(old, &status, |kind| !APPROVAL_CONDITIONS.contains(&kind));
            status["conditions"] = kept.into();
            set_status(&mut merged, status);
        }
        Some("approval") => {
            let mut status = old.get("status").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
            let new_status = new.get("status").cloned().unwrap_or_default();
            let kept = keep_conditions(old, &new_status, |kind| APPROVAL_CONDITIONS.contains(&kind));
            status["conditions"] = kept.into();
            set_status(&mut merged, status);
        }
        Some(_) => {}
    }
    merged
}

/// The conditions of `new_status` whose type `may_change` allows, and the
/// other ones of `old`, with times stamped on the new or changed ones.
fn keep_conditions(old: &Value, new_status: &Value, may_change: impl Fn(&str) -> bool) -> Vec<Value> {
    let now = super::meta::now_rfc3339();
    let mut kept: Vec<Value> =
        conditions(old).iter().filter(|c| !may_change(c["type"].as_str().unwrap_or_default())).cloned().collect();
    let new_conditions = new_status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    for mut condition in new_conditions {
        let kind = condition["type"].as_str().unwrap_or_default().to_owned();
        if !may_change(&kind) {
            continue;
        }
        let before = conditions(old).iter().find(|c| c["type"] == kind.as_str());
        if let Some(fields) = condition.as_object_mut() {
            if fields.get("lastUpdateTime").is_none_or(Value::is_null) {
                fields.insert("lastUpdateTime".into(), now.clone().into());
            }
            let transition = match before {
                Some(before) if before["status"] == fields["status"] => before.get("lastTransitionTime").cloned(),
                _ => None,
            };
            if fields.get("lastTransitionTime").is_none_or(Value::is_null) {
                fields.insert("lastTransitionTime".into(), transition.unwrap_or_else(|| now.clone().into()));
            }
        }
        kept.push(condition);
    }
    kept
}

fn set_status(csr: &mut Value, mut status: Value) {
    if let Some(fields) = status.as_object_mut()
        && fields.get("conditions").and_then(Value::as_array).is_some_and(Vec::is_empty)
    {
        fields.remove("conditions");
    }
    csr["status"] = status;
}

/// Checks a request as upstream's validation does: the request is a PEM
/// certificate request with a valid signature (`parse` checks that: it is
/// [`crate::tls::csr::parse_request`] in the server), the signer name is a
/// qualified name, usages are known and not repeated, the validity is at
/// least ten minutes, conditions are well-formed, and a certificate only
/// comes with approval.
pub fn validate_with(csr: &Value, parse: impl Fn(&str) -> Result<(), String>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = csr.get("spec").cloned().unwrap_or_default();
    match spec.get("request").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        None => errors.push(FieldError::required("spec.request")),
        Some(request) => {
            let pem = base64_decode(request).and_then(|bytes| String::from_utf8(bytes).ok());
            match pem {
                None => errors.push(FieldError::invalid("spec.request", "", "not base64-encoded PEM data")),
                Some(pem) => {
                    if let Err(e) = parse(&pem) {
                        errors.push(FieldError::invalid("spec.request", "", e));
                    }
                }
            }
        }
    }
    match spec.get("signerName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        None => errors.push(FieldError::required("spec.signerName")),
        Some(signer) => errors.extend(validate_signer_name(signer)),
    }
    let usages = spec.get("usages").and_then(Value::as_array).cloned().unwrap_or_default();
    if usages.is_empty() {
        errors.push(FieldError::required("spec.usages"));
    }
    let mut seen = Vec::new();
    for (i, usage) in usages.iter().enumerate() {
        let usage = usage.as_str().unwrap_or_default();
        let field = format!("spec.usages[{i}]");
        if !USAGES.contains(&usage) {
            errors.push(not_supported(&field, usage, USAGES));
        } else if seen.contains(&usage) {
            errors.push(duplicate(&field, usage));
        }
        seen.push(usage);
    }
    if let Some(seconds) = spec.get("expirationSeconds").and_then(Value::as_i64)
        && seconds < MIN_EXPIRATION_SECONDS
    {
        errors.push(FieldError::invalid(
            "spec.expirationSeconds",
            &seconds.to_string(),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errors.extend(validate_conditions(csr));
    if let Some(certificate) = csr.pointer("/status/certificate").and_then(Value::as_str).filter(|c| !c.is_empty()) {
        if !has_condition(csr, "Approved") || has_condition(csr, "Denied") || has_condition(csr, "Failed") {
            errors.push(FieldError {
                reason: "FieldValueForbidden",
                field: "status.certificate".into(),
                message: "Forbidden: certificate issuance not allowed in the current state".into(),
            });
        }
        let pem = base64_decode(certificate).and_then(|bytes| String::from_utf8(bytes).ok()).unwrap_or_default();
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            errors.push(FieldError::invalid(
                "status.certificate",
                "",
                "must contain at least one CERTIFICATE PEM block",
            ));
        }
    }
    errors
}

/// [`validate_with`] with the server's parser: what the registry runs.
#[cfg(feature = "tls")]
pub fn validate(csr: &Value) -> Vec<FieldError> {
    validate_with(csr, |pem| crate::tls::csr::parse_request(pem).map(|_| ()).map_err(|e| e.to_string()))
}

/// What an update may not do: change an issued certificate or withdraw
/// approval or denial.
pub fn validate_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let certificate = |csr: &Value| csr.pointer("/status/certificate").and_then(Value::as_str).unwrap_or("").to_owned();
    let before = certificate(old);
    if !before.is_empty() && certificate(new) != before {
        errors.push(FieldError::invalid(
            "status.certificate",
            "",
            "updates may not modify existing certificate content",
        ));
    }
    for kind in APPROVAL_CONDITIONS {
        if has_condition(old, kind) && !has_condition(new, kind) {
            errors.push(FieldError {
                reason: "FieldValueForbidden",
                field: "status.conditions".into(),
                message: format!("Forbidden: updates may not remove a condition of type {kind:?}"),
            });
        }
    }
    errors
}

fn validate_conditions(csr: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, condition) in conditions(csr).iter().enumerate() {
        let field = format!("status.conditions[{i}]");
        let kind = condition["type"].as_str().unwrap_or_default();
        if kind.is_empty() {
            errors.push(FieldError::required(format!("{field}.type")));
        }
        let status = condition["status"].as_str().unwrap_or_default();
        if APPROVAL_CONDITIONS.contains(&kind) || kind == "Failed" {
            if seen.contains(&kind) {
                errors.push(duplicate(&format!("{field}.type"), kind));
            }
            if APPROVAL_CONDITIONS.contains(&kind) && status != "True" {
                errors.push(not_supported(&format!("{field}.status"), status, &["True"]));
            }
        }
        if status.is_empty() {
            errors.push(FieldError::required(format!("{field}.status")));
        } else if !["True", "False", "Unknown"].contains(&status) {
            errors.push(not_supported(&format!("{field}.status"), status, &["False", "True", "Unknown"]));
        }
        seen.push(kind);
    }
    if has_condition(csr, "Approved") && has_condition(csr, "Denied") {
        errors.push(FieldError::invalid(
            "status.conditions",
            "",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    errors
}

/// Upstream's signer name rule: `<domain>/<path>`, the domain a DNS
/// subdomain, the path non-empty.
fn validate_signer_name(signer: &str) -> Vec<FieldError> {
    let field = "spec.signerName";
    let Some((domain, path)) = signer.split_once('/') else {
        return vec![FieldError::invalid(
            field,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )];
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let mut errors = Vec::new();
    if domain.len() > 253 || !domain.split('.').all(label_ok) {
        errors.push(FieldError::invalid(field, signer, "the domain part must be a valid DNS subdomain"));
    }
    let path_ok = |segment: &str| {
        !segment.is_empty()
            && segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && segment.starts_with(|c: char| c.is_ascii_alphanumeric())
            && segment.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if path.is_empty() || path.len() > 571 || !path.split('/').all(path_ok) {
        errors.push(FieldError::invalid(field, signer, "the path part must be a valid qualified name"));
    }
    errors
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        reason: "FieldValueNotSupported",
        field: field.to_owned(),
        message: format!("Unsupported value: {value:?}: supported values: {}", list.join(", ")),
    }
}

fn duplicate(field: &str, value: &str) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field: field.to_owned(),
        message: format!("Duplicate value: {value:?}"),
    }
}

/// Standard base64, as `[]byte` fields are written in JSON.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0u32);
    let trimmed = text.trim_end_matches('=');
    if text.len() - trimmed.len() > 2 {
        return None;
    }
    for byte in trimmed.bytes().filter(|b| !b.is_ascii_whitespace()) {
        let value = ALPHABET.iter().position(|&c| c == byte)? as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in text.as_bytes().chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..4 {
                out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
            }
        }
        out
    }

    fn valid() -> Value {
        json!({
            "metadata": {"name": "c"},
            "spec": {"request": b64("PEM"), "signerName": KUBE_APISERVER_CLIENT, "usages": ["client auth", "digital signature"]},
        })
    }

    fn parse_ok(pem: &str) -> Result<(), String> {
        if pem == "PEM" { Ok(()) } else { Err("cannot parse the certificate request".into()) }
    }

    #[test]
    fn base64_round_trips() {
        for text in ["", "a", "ab", "abc", "abcd", "-----BEGIN CERTIFICATE-----\n"] {
            assert_eq!(base64_decode(&b64(text)).unwrap(), text.as_bytes(), "{text:?}");
        }
        assert!(base64_decode("!!!!").is_none());
    }

    #[test]
    fn validation() {
        let edit = |f: fn(&mut Value)| {
            let mut csr = valid();
            f(&mut csr);
            csr
        };
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("valid", valid(), vec![]),
            ("no request", edit(|c| c["spec"]["request"] = "".into()), vec!["spec.request: Required"]),
            ("unparsable request", edit(|c| c["spec"]["request"] = b64("x").into()), vec!["spec.request: Invalid"]),
            (
                "no signer",
                edit(|c| c["spec"].as_object_mut().unwrap().retain(|k, _| k != "signerName")),
                vec!["spec.signerName: Required"],
            ),
            (
                "signer without path",
                edit(|c| c["spec"]["signerName"] = "example.com".into()),
                vec!["spec.signerName: Invalid"],
            ),
            (
                "signer bad domain",
                edit(|c| c["spec"]["signerName"] = "Example_.com/x".into()),
                vec!["spec.signerName: Invalid"],
            ),
            ("no usages", edit(|c| c["spec"]["usages"] = json!([])), vec!["spec.usages: Required"]),
            (
                "unknown usage",
                edit(|c| c["spec"]["usages"] = json!(["fly"])),
                vec!["spec.usages[0]: Unsupported value: \"fly\""],
            ),
            (
                "repeated usage",
                edit(|c| c["spec"]["usages"] = json!(["any", "any"])),
                vec!["spec.usages[1]: Duplicate"],
            ),
            (
                "too short",
                edit(|c| c["spec"]["expirationSeconds"] = 599.into()),
                vec!["spec.expirationSeconds: Invalid"],
            ),
            ("ten minutes", edit(|c| c["spec"]["expirationSeconds"] = 600.into()), vec![]),
            (
                "approved and denied",
                edit(
                    |c| c["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}),
                ),
                vec!["status.conditions: Invalid"],
            ),
            (
                "approved twice",
                edit(
                    |c| c["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Approved", "status": "True"}]}),
                ),
                vec!["status.conditions[1].type: Duplicate"],
            ),
            (
                "approval not true",
                edit(|c| c["status"] = json!({"conditions": [{"type": "Approved", "status": "False"}]})),
                vec!["status.conditions[0].status: Unsupported"],
            ),
            (
                "certificate without approval",
                edit(|c| c["status"] = json!({"certificate": b64("-----BEGIN CERTIFICATE-----\n")})),
                vec!["status.certificate: Forbidden"],
            ),
            (
                "certificate not PEM",
                edit(|c| {
                    c["status"] =
                        json!({"certificate": b64("x"), "conditions": [{"type": "Approved", "status": "True"}]})
                }),
                vec!["status.certificate: Invalid"],
            ),
        ];
        for (name, csr, want) in cases {
            let got: Vec<String> =
                validate_with(&csr, parse_ok).iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
            assert_eq!(got.len(), want.len(), "{name}: {got:?}");
            for (got, want) in got.iter().zip(&want) {
                assert!(got.starts_with(want), "{name}: {got} does not start with {want}");
            }
        }
    }

    #[test]
    fn writes_change_only_their_part() {
        let approved = json!({"type": "Approved", "status": "True", "reason": "r", "lastUpdateTime": "t0", "lastTransitionTime": "t0"});
        let failed = json!({"type": "Failed", "status": "True", "reason": "bad"});
        let old =
            json!({"metadata": {"name": "c"}, "spec": {"username": "alice"}, "status": {"conditions": [approved]}});
        let forged = json!({"metadata": {"name": "c", "labels": {"a": "b"}}, "spec": {"username": "mallory"},
            "status": {"certificate": "Y2VydA==", "conditions": [failed, {"type": "Denied", "status": "True"}]}});

        let main = prepare_update(&old, &forged, None);
        assert_eq!(main["metadata"]["labels"]["a"], "b");
        assert_eq!(main["spec"], old["spec"], "spec never changes");
        assert_eq!(main["status"], old["status"], "status only through its subresources");

        let status = prepare_update(&old, &forged, Some("status"));
        assert_eq!(status["spec"], old["spec"]);
        assert_eq!(status["status"]["certificate"], "Y2VydA==");
        let types: Vec<_> =
            status["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].clone()).collect();
        assert_eq!(types, ["Approved", "Failed"], "status keeps approval and adds Failed, never Denied");
        assert!(status["status"]["conditions"][1]["lastUpdateTime"].is_string(), "stamped");

        let approval = prepare_update(&old, &forged, Some("approval"));
        assert!(approval["status"].get("certificate").is_none(), "approval never issues");
        let types: Vec<_> =
            approval["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].clone()).collect();
        assert_eq!(types, ["Denied"], "approval replaces the approval conditions only");
        assert!(
            validate_update(&old, &approval)[0].message.contains("may not remove a condition of type \"Approved\"")
        );

        let issued = json!({"status": {"certificate": "Y2VydA=="}});
        assert!(
            validate_update(&issued, &json!({"status": {"certificate": "b3RoZXI="}}))[0]
                .message
                .contains("may not modify")
        );
        assert!(validate_update(&issued, &issued).is_empty());
    }
}
