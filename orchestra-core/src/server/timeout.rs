//! The deadline of a request that is not long-running: the server's request
//! timeout, shortened by the client's `timeout` query parameter (what
//! `kubectl --request-timeout` sends), as upstream's `WithRequestDeadline`.

use std::time::Duration;

use crate::api::ApiError;

/// The message of upstream's 400 for an unparseable `timeout`.
const INVALID: &str = "invalid timeout specified in the request URL";

/// How long the request may take: `limit`, or the client's shorter
/// positive `timeout`. `None`: no limit.
pub(crate) fn deadline(query: Option<&str>, limit: Option<Duration>) -> Result<Option<Duration>, ApiError> {
    let Some(value) = query.and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("timeout="))) else {
        return Ok(limit);
    };
    let value = super::route::percent_decode(value);
    if value.is_empty() {
        return Ok(limit);
    }
    let requested = parse_go_duration(&value)
        .ok_or_else(|| ApiError::bad_request(format!("{INVALID} - time: invalid duration {value:?}")))?;
    Ok(match (requested, limit) {
        (None, limit) => limit,
        (Some(requested), Some(limit)) if requested >= limit => Some(limit),
        (Some(requested), _) => Some(requested),
    })
}

/// Parses a Go `time.Duration` string (`32s`, `1m30s`, `1.5h`, `250ms`), as
/// kube-apiserver's duration flags and `?timeout=` take them. `Some(None)`
/// for zero or negative durations, `None` if it does not parse.
///
/// ```
/// use std::time::Duration;
/// use orchestra_core::server::parse_go_duration;
///
/// assert_eq!(parse_go_duration("2m0s"), Some(Some(Duration::from_secs(120))));
/// assert_eq!(parse_go_duration("0"), Some(None));
/// assert_eq!(parse_go_duration("2 minutes"), None);
/// ```
pub fn parse_go_duration(text: &str) -> Option<Option<Duration>> {
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(None);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * seconds;
    }
    if negative || total <= 0.0 {
        return Some(None);
    }
    Duration::try_from_secs_f64(total).ok().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_may_shorten_the_deadline_not_lengthen_it() {
        let minute = Some(Duration::from_secs(60));
        for (query, limit, expected) in [
            (None, minute, minute),
            (Some("limit=5"), minute, minute),
            (Some("timeout=32s"), minute, Some(Duration::from_secs(32))),
            (Some("limit=1&timeout=1m30s"), minute, minute),
            (Some("timeout=1.5s"), minute, Some(Duration::from_millis(1500))),
            (Some("timeout=250ms"), None, Some(Duration::from_millis(250))),
            (Some("timeout=0"), minute, minute),
            (Some("timeout="), minute, minute),
            (Some("timeout=0s"), minute, minute),
            (Some("timeout=-5s"), minute, minute),
            (Some("timeout=2h"), None, Some(Duration::from_secs(7200))),
            (Some("timeout=1%2E5s"), minute, Some(Duration::from_millis(1500))),
        ] {
            assert_eq!(deadline(query, limit).unwrap(), expected, "{query:?}");
        }
        for bad in ["timeout=5", "timeout=5x", "timeout=s", "timeout=1..2s"] {
            let error = deadline(Some(bad), minute).unwrap_err();
            assert_eq!(error.code, 400, "{bad}");
            assert!(error.message.starts_with("invalid timeout specified in the request URL"), "{}", error.message);
        }
    }
}
