//! Prometheus metrics of the API server, served on `/metrics` in the
//! OpenMetrics text format, named and labelled like kube-apiserver's.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// What a request was about, as metric labels.
#[derive(Debug, Clone, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`, …
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural), empty for non-resource paths.
    pub resource: String,
    /// Subresource, if any.
    pub subresource: String,
    /// `resource` (one object), `namespace` or `cluster` (collections).
    pub scope: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    #[prometheus(flatten)]
    request: RequestLabels,
    code: String,
}

/// Request latency buckets (seconds), kube-apiserver's.
const LATENCY_BUCKETS: [f64; 20] =
    [0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 60.0];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The API server's metrics registry.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<CodeLabels, Counter>,
    latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    long_running: Family<RequestLabels, Gauge>,
    /// The request counters (by code) and the latency histogram of each
    /// label set seen: handles on the families' metrics, so that a request
    /// finds both in one lookup without building a label set with a code.
    handles: RwLock<HashMap<RequestLabels, Handles, foldhash::fast::RandomState>>,
}

/// A label set's metrics (see [`Metrics::observe`]).
struct Handles {
    latency: Histogram,
    /// The counter of each response code seen, in the order first seen.
    requests: Vec<(u16, Counter)>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The API server's metrics, registered and at zero.
    pub fn new() -> Metrics {
        let requests = Family::<CodeLabels, Counter>::default();
        let latency = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let long_running = Family::<RequestLabels, Gauge>::default();
        let mut registry = Registry::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource, scope and HTTP response code.",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, group, version, resource, subresource and scope (for watches, the time to the response headers).",
            latency.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests (watches) broken out by verb, group, version, resource, scope and subresource.",
            long_running.clone(),
        );
        Metrics { registry: Mutex::new(registry), requests, latency, long_running, handles: RwLock::default() }
    }

    /// Records a finished request (or a watch whose response has started).
    pub fn observe(&self, labels: &RequestLabels, code: u16, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        {
            let handles = self.handles.read().unwrap_or_else(|e| e.into_inner());
            if let Some(found) = handles.get(labels)
                && let Some((_, counter)) = found.requests.iter().find(|(seen, _)| *seen == code)
            {
                counter.inc();
                found.latency.observe(seconds);
                return;
            }
        }
        // First request of this label set or code: the families make the metrics.
        let mut handles = self.handles.write().unwrap_or_else(|e| e.into_inner());
        let found = handles
            .entry(labels.clone())
            .or_insert_with(|| Handles { latency: self.latency.get_or_create(labels).clone(), requests: Vec::new() });
        let index = found.requests.iter().position(|(seen, _)| *seen == code).unwrap_or_else(|| {
            let counter = self.requests.get_or_create(&CodeLabels { request: labels.clone(), code: code.to_string() });
            found.requests.push((code, counter.clone()));
            found.requests.len() - 1
        });
        found.requests[index].1.inc();
        found.latency.observe(seconds);
    }

    /// Counts a long-running request (a watch) until the guard is dropped.
    pub fn long_running(&self, labels: &RequestLabels) -> LongRunningGuard {
        let gauge = self.long_running.get_or_create_owned(labels);
        gauge.inc();
        LongRunningGuard(gauge)
    }

    /// Adds a metric of the embedding program to `/metrics`.
    pub fn register(&self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).register(name, help, metric);
    }

    /// Every metric in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String cannot fail");
        text
    }
}

/// Holds one long-running request in `apiserver_longrunning_requests`.
#[derive(Debug)]
pub struct LongRunningGuard(Gauge);

impl Drop for LongRunningGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_latencies_and_watches() {
        let metrics = Metrics::new();
        let list = RequestLabels {
            verb: "LIST".into(),
            version: "v1".into(),
            resource: "pods".into(),
            scope: "namespace".into(),
            ..Default::default()
        };
        metrics.observe(&list, 200, Duration::from_millis(3));
        metrics.observe(&list, 200, Duration::from_millis(30));
        let watch = RequestLabels { verb: "WATCH".into(), ..list.clone() };
        let guard = metrics.long_running(&watch);
        let text = metrics.render();
        assert!(
            text.contains(r#"apiserver_request_total{verb="LIST",group="",version="v1",resource="pods",subresource="",scope="namespace",code="200"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_duration_seconds_bucket{le="0.005",verb="LIST""#)
                || text.contains(r#"le="0.005""#)
        );
        assert!(text.contains(r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="pods",subresource="",scope="namespace"} 1"#), "{text}");
        drop(guard);
        assert!(metrics.render().contains(r#"scope="namespace"} 0"#));
    }

    #[test]
    fn every_code_and_label_set_counts_apart_after_the_first_request() {
        let metrics = Metrics::new();
        let get =
            RequestLabels { verb: "GET".into(), version: "v1".into(), resource: "pods".into(), ..Default::default() };
        let post = RequestLabels { verb: "POST".into(), ..get.clone() };
        for (labels, code) in [(&get, 200), (&get, 404), (&get, 200), (&post, 201), (&get, 200), (&post, 201)] {
            metrics.observe(labels, code, Duration::from_millis(1));
        }
        let text = metrics.render();
        let total = |verb: &str, code: u16| {
            format!(
                r#"apiserver_request_total{{verb="{verb}",group="",version="v1",resource="pods",subresource="",scope="",code="{code}"}}"#
            )
        };
        for (line, count) in [(total("GET", 200), 3), (total("GET", 404), 1), (total("POST", 201), 2)] {
            assert!(text.contains(&format!("{line} {count}")), "{line} {count} in {text}");
        }
        assert!(text.contains(r#"apiserver_request_duration_seconds_count{verb="GET",group="",version="v1",resource="pods",subresource="",scope=""} 4"#), "{text}");
    }
}
