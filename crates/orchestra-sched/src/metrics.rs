//! Scheduler metrics in the Prometheus text format: attempts by result,
//! attempt and end-to-end latency, queue sizes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of attempts: result (scheduled, unschedulable, error) and profile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// scheduled, unschedulable or error.
    pub result: String,
    /// The profile's schedulerName.
    pub profile: String,
}

/// Labels of the queue-size gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// active, backoff, unschedulable, gated.
    pub queue: String,
}

/// The scheduler's metrics.
pub struct Metrics {
    registry: Registry,
    /// `scheduler_schedule_attempts_total`.
    pub attempts: Family<AttemptLabels, Counter>,
    /// `scheduler_scheduling_attempt_duration_seconds`.
    pub attempt_duration: Family<AttemptLabels, Histogram>,
    /// `scheduler_pod_scheduling_sli_duration_seconds` (first enqueue to bound).
    pub e2e_duration: Histogram,
    /// `scheduler_pending_pods`.
    pub pending: Family<QueueLabels, Gauge>,
    /// `scheduler_preemption_attempts_total`.
    pub preemption_attempts: Counter,
    /// `scheduler_preemption_victims_total`.
    pub preemption_victims: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("scheduler");
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register("schedule_attempts", "Scheduling attempts by result", attempts.clone());
        let attempt_duration =
            Family::<AttemptLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 16)));
        registry.register(
            "scheduling_attempt_duration_seconds",
            "Scheduling attempt latency (algorithm and assume)",
            attempt_duration.clone(),
        );
        let e2e_duration = Histogram::new(exponential_buckets(0.001, 2.0, 18));
        registry.register(
            "pod_scheduling_sli_duration_seconds",
            "End-to-end latency from first enqueue to bound",
            e2e_duration.clone(),
        );
        let pending = Family::<QueueLabels, Gauge>::default();
        registry.register("pending_pods", "Pending pods by queue", pending.clone());
        let preemption_attempts = Counter::default();
        registry.register("preemption_attempts", "Preemption attempts", preemption_attempts.clone());
        let preemption_victims = Counter::default();
        registry.register("preemption_victims", "Pods preempted", preemption_victims.clone());
        Metrics { registry, attempts, attempt_duration, e2e_duration, pending, preemption_attempts, preemption_victims }
    }

    /// Counts an attempt.
    pub fn attempt(&self, result: &str, profile: &str, seconds: f64) {
        let l = AttemptLabels { result: result.into(), profile: profile.into() };
        self.attempts.get_or_create(&l).inc();
        self.attempt_duration.get_or_create(&l).observe(seconds);
    }

    /// Sets the queue sizes.
    pub fn queue_sizes(&self, s: crate::queue::QueueSizes) {
        for (q, v) in [("active", s.active), ("backoff", s.backoff), ("unschedulable", s.unschedulable), ("gated", s.gated)] {
            self.pending.get_or_create(&QueueLabels { queue: q.into() }).set(v as i64);
        }
    }

    /// Attempts counted with `result` over all profiles.
    pub fn attempts_with(&self, result: &str) -> u64 {
        let text = self.encode();
        text.lines()
            .filter(|l| l.starts_with("scheduler_schedule_attempts_total{") && l.contains(&format!("result=\"{result}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding to a String");
        out
    }
}
