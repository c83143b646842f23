//! Scheduler metrics in the Prometheus text format: attempts by result,
//! attempt and end-to-end latency, queue sizes, preemption attempts and
//! victims.
//!
//! As upstream, an attempt counts as `scheduled` only once its binding
//! succeeded (its latency runs from the start of the scheduling cycle to
//! the binding); attempts that fail in the scheduling or the binding cycle
//! count as `unschedulable` (rejected by a plugin) or `error`.

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
    /// `scheduler_schedule_attempts_total{result, profile}`.
    pub attempts: Family<AttemptLabels, Counter>,
    /// `scheduler_scheduling_attempt_duration_seconds`.
    pub attempt_duration: Family<AttemptLabels, Histogram>,
    /// `scheduler_pod_scheduling_sli_duration_seconds` (first enqueue to bound).
    pub e2e_duration: Histogram,
    /// `scheduler_pending_pods`.
    pub pending: Family<QueueLabels, Gauge>,
    /// `scheduler_preemption_attempts_total`: DefaultPreemption runs.
    pub preemption_attempts: Counter,
    /// `scheduler_preemption_victims`: victims of each nomination (a
    /// histogram, as upstream's).
    pub preemption_victims: Histogram,
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
        let attempt_duration = Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
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
        // Upstream's buckets: more than 64 victims is rare.
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register("preemption_victims", "Number of selected preemption victims", preemption_victims.clone());
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
        for (q, v) in
            [("active", s.active), ("backoff", s.backoff), ("unschedulable", s.unschedulable), ("gated", s.gated)]
        {
            self.pending.get_or_create(&QueueLabels { queue: q.into() }).set(v as i64);
        }
    }

    /// Attempts counted with `result` over all profiles.
    pub fn attempts_with(&self, result: &str) -> u64 {
        let text = self.encode();
        text.lines()
            .filter(|l| {
                l.starts_with("scheduler_schedule_attempts_total{") && l.contains(&format!("result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// The value of one sample of the exposition, named as it is written
    /// there (`scheduler_preemption_attempts_total`,
    /// `scheduler_pending_pods{queue="gated"}`); None when absent.
    pub fn sample(&self, series: &str) -> Option<f64> {
        let text = self.encode();
        text.lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            if name == series { value.parse().ok() } else { None }
        })
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding to a String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueSizes;

    #[test]
    fn attempts_are_counted_by_result_and_profile() {
        let m = Metrics::new();
        m.attempt("scheduled", "default-scheduler", 0.01);
        m.attempt("scheduled", "bin-packing", 0.02);
        m.attempt("unschedulable", "default-scheduler", 0.5);
        assert_eq!(
            (m.attempts_with("scheduled"), m.attempts_with("unschedulable"), m.attempts_with("error")),
            (2, 1, 0)
        );
        assert_eq!(
            m.sample(r#"scheduler_schedule_attempts_total{result="scheduled",profile="bin-packing"}"#),
            Some(1.0)
        );
        assert_eq!(
            m.sample(r#"scheduler_scheduling_attempt_duration_seconds_count{result="unschedulable",profile="default-scheduler"}"#),
            Some(1.0)
        );
        assert_eq!(
            m.sample(r#"scheduler_scheduling_attempt_duration_seconds_sum{result="unschedulable",profile="default-scheduler"}"#),
            Some(0.5)
        );
    }

    #[test]
    fn queue_sizes_are_gauges() {
        let m = Metrics::new();
        m.queue_sizes(QueueSizes { active: 3, backoff: 2, unschedulable: 1, gated: 4 });
        let got: Vec<_> = ["active", "backoff", "unschedulable", "gated"]
            .iter()
            .map(|q| m.sample(&format!("scheduler_pending_pods{{queue=\"{q}\"}}")))
            .collect();
        assert_eq!(got, [Some(3.0), Some(2.0), Some(1.0), Some(4.0)]);
        // Gauges follow the queue down, too.
        m.queue_sizes(QueueSizes { active: 0, backoff: 0, unschedulable: 0, gated: 1 });
        assert_eq!(m.sample(r#"scheduler_pending_pods{queue="active"}"#), Some(0.0));
        assert_eq!(m.sample(r#"scheduler_pending_pods{queue="gated"}"#), Some(1.0));
    }

    #[test]
    fn preemption_attempts_and_victims() {
        let m = Metrics::new();
        assert_eq!(m.sample("scheduler_preemption_attempts_total"), Some(0.0));
        m.preemption_attempts.inc();
        m.preemption_attempts.inc();
        m.preemption_victims.observe(3.0);
        assert_eq!(m.sample("scheduler_preemption_attempts_total"), Some(2.0));
        assert_eq!(m.sample("scheduler_preemption_victims_count"), Some(1.0));
        assert_eq!(m.sample("scheduler_preemption_victims_sum"), Some(3.0));
        // Upstream's buckets: 1, 2, 4, ... 64.
        assert_eq!(m.sample(r#"scheduler_preemption_victims_bucket{le="2.0"}"#), Some(0.0));
        assert_eq!(m.sample(r#"scheduler_preemption_victims_bucket{le="4.0"}"#), Some(1.0));
        assert_eq!(m.sample(r#"scheduler_preemption_victims_bucket{le="64.0"}"#), Some(1.0));
    }

    #[test]
    fn text_exposition_names_every_metric() {
        let m = Metrics::new();
        m.attempt("scheduled", "default-scheduler", 0.001);
        m.e2e_duration.observe(0.002);
        m.queue_sizes(QueueSizes::default());
        m.preemption_victims.observe(1.0);
        let text = m.encode();
        for line in [
            "# TYPE scheduler_schedule_attempts counter",
            "# HELP scheduler_schedule_attempts Scheduling attempts by result.",
            "# TYPE scheduler_scheduling_attempt_duration_seconds histogram",
            "# TYPE scheduler_pod_scheduling_sli_duration_seconds histogram",
            "# TYPE scheduler_pending_pods gauge",
            "# TYPE scheduler_preemption_attempts counter",
            "# TYPE scheduler_preemption_victims histogram",
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 1"#,
            "scheduler_pod_scheduling_sli_duration_seconds_count 1",
            "scheduler_preemption_attempts_total 0",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
        }
        assert_eq!(m.sample("scheduler_no_such_metric"), None);
    }
}
