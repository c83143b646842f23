//! PodDisruptionBudget arithmetic for the `pods/eviction` subresource.
//!
//! There is no disruption controller yet, so a budget's numbers come from
//! one of two places:
//!
//! * **a maintained status** — when `status.observedGeneration` equals
//!   `metadata.generation`, some controller keeps the status current, and
//!   the eviction follows upstream exactly: it is refused when
//!   `status.disruptionsAllowed` is 0, and otherwise the server decrements
//!   `disruptionsAllowed` and records the pod in `status.disruptedPods`
//!   (see [`record_disruption`]) so the controller does not count it as
//!   healthy before it is gone;
//! * **computed on the fly** — otherwise, from the live pods of the
//!   namespace that the selector matches: expected = those not in a
//!   terminal phase, healthy = those `Ready=True` and not being deleted.
//!   Nothing is written back (a pod being deleted is no longer healthy, so
//!   the next eviction sees the disruption anyway).
//!
//! All functions are pure over `serde_json::Value`s.

use serde_json::{Value, json};

use super::LabelSelector;

/// A budget's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Pods the budget expects.
    pub expected: i64,
    /// Pods healthy now.
    pub current_healthy: i64,
    /// Pods that must stay healthy.
    pub desired_healthy: i64,
    /// Evictions allowed now.
    pub disruptions_allowed: i64,
}

/// What the budget says about evicting one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The eviction may go ahead; with `record` the budget's maintained
    /// status must be updated with [`record_disruption`] first.
    Allowed {
        /// True if the status must record the disruption.
        record: bool,
    },
    /// The budget forbids it (429); the message is the `DisruptionBudget` cause.
    Blocked(String),
    /// The budget's status is invalid (403 Forbidden with this message).
    Forbidden(String),
}

/// Upstream's cap on `status.disruptedPods`.
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// True if the pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .is_some_and(|c| c["status"] == "True")
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn deleting(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_some()
}

/// Pods that may be evicted whatever the budgets say (upstream's
/// `canIgnorePDB`): `Succeeded`, `Failed` or `Pending`, or already being
/// deleted.
pub fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || deleting(pod)
}

/// The budget's `spec.selector`. A null selector selects nothing, an empty
/// one everything (policy/v1); an invalid one selects nothing.
fn selector(pdb: &Value) -> LabelSelector {
    LabelSelector::from_json(pdb.pointer("/spec/selector")).unwrap_or_else(|_| LabelSelector::nothing())
}

/// True if the budget's `spec.selector` selects the pod. A null selector
/// selects nothing, an empty one everything (policy/v1).
pub fn selects(pdb: &Value, pod: &Value) -> bool {
    selector(pdb).matches_object(pod)
}

/// An int-or-percent scaled against `total`, rounding up like upstream.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// The budget computed from the live pods it selects (`pods` may hold
/// others; they are filtered).
pub fn compute(pdb: &Value, pods: &[Value]) -> Budget {
    let selector = selector(pdb);
    let selected: Vec<&Value> =
        pods.iter().filter(|p| selector.matches_object(p) && !matches!(phase(p), "Succeeded" | "Failed")).collect();
    let expected = selected.len() as i64;
    let current_healthy = selected.iter().filter(|p| pod_ready(p) && !deleting(p)).count() as i64;
    let desired_healthy = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected).unwrap_or(0)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    Budget {
        expected,
        current_healthy,
        desired_healthy,
        disruptions_allowed: (current_healthy - desired_healthy).max(0),
    }
}

/// True if a controller keeps the budget's status current.
pub fn status_maintained(pdb: &Value) -> bool {
    let observed = pdb.pointer("/status/observedGeneration").and_then(Value::as_i64);
    let generation = pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    observed == Some(generation)
}

/// The budget's numbers: from its status when maintained, else computed.
pub fn budget(pdb: &Value, pods: &[Value]) -> Budget {
    if !status_maintained(pdb) {
        return compute(pdb, pods);
    }
    let n = |field: &str| pdb.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0);
    Budget {
        expected: n("expectedPods"),
        current_healthy: n("currentHealthy"),
        desired_healthy: n("desiredHealthy"),
        disruptions_allowed: n("disruptionsAllowed"),
    }
}

fn denied_message(pdb: &Value, budget: &Budget) -> String {
    let name = pdb.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if budget.current_healthy <= budget.desired_healthy {
        format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            budget.desired_healthy, budget.current_healthy
        )
    } else {
        format!("The disruption budget {name} does not allow evicting pods currently")
    }
}

/// Upstream's decision for evicting `pod` (not ignorable, see
/// [`can_ignore_budget`]) under the one budget that selects it.
pub fn verdict(pdb: &Value, pod: &Value, pods: &[Value]) -> Verdict {
    let maintained = status_maintained(pdb);
    let budget = budget(pdb, pods);
    if !pod_ready(pod) {
        let policy = pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str);
        if policy == Some("AlwaysAllow")
            || (budget.current_healthy >= budget.desired_healthy && budget.desired_healthy > 0)
        {
            return Verdict::Allowed { record: false };
        }
    }
    if maintained {
        if budget.disruptions_allowed < 0 {
            return Verdict::Forbidden("pdb disruptions allowed is negative".into());
        }
        let disrupted = pdb.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
        if disrupted > MAX_DISRUPTED_PODS {
            return Verdict::Forbidden(
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller".into(),
            );
        }
    }
    if budget.disruptions_allowed == 0 {
        return Verdict::Blocked(denied_message(pdb, &budget));
    }
    Verdict::Allowed { record: maintained }
}

/// The budget after one eviction of `pod_name` at `now` (maintained status
/// only): `disruptionsAllowed` decremented, the pod in `disruptedPods`, and
/// the `DisruptionAllowed` condition False when none is left.
pub fn record_disruption(pdb: &Value, pod_name: &str, now: &str) -> Value {
    let mut pdb = pdb.clone();
    let allowed = pdb.pointer("/status/disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0) - 1;
    let status = &mut pdb["status"];
    status["disruptionsAllowed"] = allowed.into();
    if !status["disruptedPods"].is_object() {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod_name] = now.into();
    if allowed == 0 {
        let condition = json!({
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": "",
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "lastTransitionTime": now,
        });
        let conditions = pdb["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions: Vec<Value> = conditions.into_iter().filter(|c| c["type"] != "DisruptionAllowed").collect();
        conditions.push(condition);
        pdb["status"]["conditions"] = conditions.into();
    }
    pdb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn pdb(spec: Value) -> Value {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        json!({"metadata": {"name": "b", "generation": 1}, "spec": spec})
    }

    #[test]
    fn budgets() {
        let pods = vec![pod("a", true), pod("b", true), pod("c", false)];
        let cases = [
            (json!({"minAvailable": 2}), 3, 2, 2, 0),
            (json!({"minAvailable": 1}), 3, 2, 1, 1),
            (json!({"minAvailable": "50%"}), 3, 2, 2, 0),
            (json!({"maxUnavailable": 1}), 3, 2, 2, 0),
            (json!({"maxUnavailable": 2}), 3, 2, 1, 1),
            (json!({"maxUnavailable": "34%"}), 3, 2, 1, 1),
            (json!({}), 3, 2, 0, 2),
        ];
        for (spec, expected, healthy, desired, allowed) in cases {
            let b = compute(&pdb(spec.clone()), &pods);
            assert_eq!(
                (b.expected, b.current_healthy, b.desired_healthy, b.disruptions_allowed),
                (expected, healthy, desired, allowed),
                "{spec}"
            );
        }
    }

    #[test]
    fn selectors() {
        let p = pod("a", true);
        let with = |s: Value| json!({"spec": {"selector": s}});
        assert!(selects(&with(json!({})), &p));
        assert!(!selects(&json!({"spec": {}}), &p));
        assert!(selects(&with(json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]})), &p));
        assert!(!selects(&with(json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})), &p));
        assert!(!selects(&with(json!({"matchLabels": {"app": "db"}})), &p));
    }

    #[test]
    fn verdicts() {
        let pods = vec![pod("a", true), pod("b", true)];
        let strict = pdb(json!({"minAvailable": 2}));
        assert_eq!(
            verdict(&strict, &pods[0], &pods),
            Verdict::Blocked("The disruption budget b needs 2 healthy pods and has 2 currently".into())
        );
        let loose = pdb(json!({"minAvailable": 1}));
        assert_eq!(verdict(&loose, &pods[0], &pods), Verdict::Allowed { record: false });
        // An unready pod with AlwaysAllow, or with the budget satisfied.
        let unready = pod("c", false);
        let mut always = strict.clone();
        always["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow".into();
        assert_eq!(verdict(&always, &unready, &pods), Verdict::Allowed { record: false });
        assert_eq!(verdict(&strict, &unready, &pods), Verdict::Allowed { record: false });
        // A maintained status wins over the live pods.
        let mut maintained = loose.clone();
        maintained["status"] = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2});
        assert!(matches!(verdict(&maintained, &pods[0], &pods), Verdict::Blocked(_)));
        maintained["status"]["disruptionsAllowed"] = 1.into();
        assert_eq!(verdict(&maintained, &pods[0], &pods), Verdict::Allowed { record: true });
        let recorded = record_disruption(&maintained, "a", "2024-01-01T00:00:00Z");
        assert_eq!(recorded["status"]["disruptionsAllowed"], 0);
        assert_eq!(recorded["status"]["disruptedPods"]["a"], "2024-01-01T00:00:00Z");
        assert_eq!(recorded["status"]["conditions"][0]["status"], "False");
        maintained["status"]["disruptionsAllowed"] = (-1).into();
        assert!(matches!(verdict(&maintained, &pods[0], &pods), Verdict::Forbidden(_)));
    }

    #[test]
    fn ignorable_pods() {
        let mut p = pod("a", true);
        assert!(!can_ignore_budget(&p));
        for phase in ["Pending", "Succeeded", "Failed"] {
            p["status"]["phase"] = phase.into();
            assert!(can_ignore_budget(&p));
        }
        let deleting =
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Running"}});
        assert!(can_ignore_budget(&deleting));
    }
}
