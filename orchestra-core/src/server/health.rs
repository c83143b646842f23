//! `/healthz`, `/livez` and `/readyz`, with upstream's named checks
//! (`/readyz/etcd`), `?verbose` listings and `?exclude=<check>`.

use axum::response::Response;

use super::body;
use super::state::State;

/// The checks of every endpoint: `ping` (the server answers) and `etcd` (the
/// store answers a status request).
const CHECKS: [&str; 2] = ["ping", "etcd"];

async fn run(state: &State, check: &str) -> Result<(), String> {
    match check {
        "ping" => Ok(()),
        "etcd" => state.store.status().await.map(drop).map_err(|e| e.to_string()),
        other => Err(format!("no such check {other:?}")),
    }
}

/// Answers a health request for `path` (`/readyz`, `/livez/etcd`, …).
pub(crate) async fn check(state: &State, path: &str, query: Option<&str>) -> Response {
    let mut segments = path.trim_matches('/').split('/');
    let endpoint = segments.next().unwrap_or("healthz");
    let parameters: Vec<(&str, &str)> = query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    let verbose = parameters.iter().any(|(k, _)| *k == "verbose");
    let excluded: Vec<&str> = parameters.iter().filter(|(k, _)| *k == "exclude").map(|(_, v)| *v).collect();
    if let Some(single) = segments.next() {
        if !CHECKS.contains(&single) {
            return body::text_with_type(404, format!("404 page not found: {path}\n"), "text/plain; charset=utf-8");
        }
        return match run(state, single).await {
            Ok(()) => body::text(200, "ok"),
            Err(error) => {
                tracing::warn!(check = single, %error, "health check failed");
                body::text_with_type(
                    500,
                    format!("internal server error: {single} check failed\n"),
                    "text/plain; charset=utf-8",
                )
            }
        };
    }
    let mut report = String::new();
    let mut healthy = true;
    for check in CHECKS {
        if excluded.contains(&check) {
            report.push_str(&format!("[+]{check} excluded: ok\n"));
            continue;
        }
        match run(state, check).await {
            Ok(()) => report.push_str(&format!("[+]{check} ok\n")),
            Err(error) => {
                tracing::warn!(check, %error, "health check failed");
                healthy = false;
                report.push_str(&format!("[-]{check} failed: reason withheld\n"));
            }
        }
    }
    match (healthy, verbose) {
        (true, false) => body::text(200, "ok"),
        (true, true) => {
            body::text_with_type(200, format!("{report}{endpoint} check passed\n"), "text/plain; charset=utf-8")
        }
        (false, _) => {
            body::text_with_type(500, format!("{report}{endpoint} check failed\n"), "text/plain; charset=utf-8")
        }
    }
}
