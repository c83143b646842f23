//! Resource quantities, pod requests, QoS class and node admission.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use orchestra_core::api::quantity::{self, ParsedQuantity};

use super::config::Resources;

/// A quantity in thousandths, rounded up (`Quantity.MilliValue()`); 0 if
/// it is negative or does not parse.
pub fn milli_value(q: &Quantity) -> u64 {
    quantity::milli_value(q).max(0) as u64
}

/// A quantity as an integer, rounded up (`Quantity.Value()`); 0 if it is
/// negative or does not parse.
pub fn int_value(q: &Quantity) -> u64 {
    quantity::value(q).max(0) as u64
}

/// The requests of one container: requests, defaulting to limits.
pub fn container_requests(c: &Container) -> Resources {
    let resources = c.resources.as_ref();
    let get = |name: &str| {
        resources
            .and_then(|r| r.requests.as_ref().and_then(|m| m.get(name)))
            .or_else(|| resources.and_then(|r| r.limits.as_ref().and_then(|m| m.get(name))))
    };
    Resources {
        cpu_millis: get("cpu").map(milli_value).unwrap_or(0),
        memory_bytes: get("memory").map(int_value).unwrap_or(0),
        ephemeral_storage_bytes: get("ephemeral-storage").map(int_value).unwrap_or(0),
        pods: 0,
    }
}

fn add(a: &mut Resources, b: &Resources) {
    a.cpu_millis += b.cpu_millis;
    a.memory_bytes += b.memory_bytes;
    a.ephemeral_storage_bytes += b.ephemeral_storage_bytes;
}

fn max(a: &mut Resources, b: &Resources) {
    a.cpu_millis = a.cpu_millis.max(b.cpu_millis);
    a.memory_bytes = a.memory_bytes.max(b.memory_bytes);
    a.ephemeral_storage_bytes = a.ephemeral_storage_bytes.max(b.ephemeral_storage_bytes);
}

/// The effective requests of a pod: the sum of its containers (and sidecars),
/// at least its largest init container, plus overhead; `pods` is 1.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources { pods: 1, ..Resources::default() };
    let Some(spec) = pod.spec.as_ref() else { return total };
    for c in &spec.containers {
        add(&mut total, &container_requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_max = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut total, &r);
            add(&mut sidecars, &r);
            max(&mut init_max, &sidecars);
        } else {
            let mut with = r;
            add(&mut with, &sidecars);
            max(&mut init_max, &with);
        }
    }
    max(&mut total, &init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        add(
            &mut total,
            &Resources {
                cpu_millis: overhead.get("cpu").map(milli_value).unwrap_or(0),
                memory_bytes: overhead.get("memory").map(int_value).unwrap_or(0),
                ephemeral_storage_bytes: 0,
                pods: 0,
            },
        );
    }
    total
}

/// The pod's QoS class: `Guaranteed`, `Burstable` or `BestEffort`.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else { return "BestEffort" };
    let all: Vec<&Container> = spec.containers.iter().chain(spec.init_containers.iter().flatten()).collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let empty = BTreeMap::new();
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref()).unwrap_or(&empty);
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref()).unwrap_or(&empty);
        for name in ["cpu", "memory"] {
            let set = |q: Option<&Quantity>| q.and_then(|q| ParsedQuantity::try_from(q).ok()).filter(|q| !q.is_zero());
            let (req, lim) = (set(requests.get(name)), set(limits.get(name)));
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Why a pod does not fit: the kubelet's `OutOf<resource>` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `OutOfcpu`, `OutOfmemory`, `OutOfephemeral-storage` or `OutOfpods`.
    pub reason: String,
    /// `Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1000`.
    pub message: String,
}

/// Node admission: does a pod requesting `request` fit in `allocatable`
/// given what admitted pods already use?
pub fn admit(request: &Resources, used: &Resources, allocatable: &Resources) -> Result<(), Rejection> {
    let checks = [
        ("pods", request.pods, used.pods, allocatable.pods),
        ("cpu", request.cpu_millis, used.cpu_millis, allocatable.cpu_millis),
        ("memory", request.memory_bytes, used.memory_bytes, allocatable.memory_bytes),
        (
            "ephemeral-storage",
            request.ephemeral_storage_bytes,
            used.ephemeral_storage_bytes,
            allocatable.ephemeral_storage_bytes,
        ),
    ];
    for (name, requested, used, capacity) in checks {
        if requested > 0 && used + requested > capacity {
            let message = if name == "pods" {
                "Node didn't have enough resource: pods".to_string()
            } else {
                format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                )
            };
            return Err(Rejection { reason: format!("OutOf{name}"), message: format!("Pod was rejected: {message}") });
        }
    }
    Ok(())
}

/// Adds `b` to `a` (admitted pods' usage).
pub fn accumulate(a: &mut Resources, b: &Resources) {
    add(a, b);
    a.pods += b.pods;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map =
            |kv: &[(&str, &str)]| (!kv.is_empty()).then(|| kv.iter().map(|(k, v)| (k.to_string(), q(v))).collect());
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec { containers, init_containers: Some(init), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(milli_value(&q("500m")), 500);
        assert_eq!(milli_value(&q("2")), 2000);
        assert_eq!(milli_value(&q("0.1")), 100);
        assert_eq!(int_value(&q("1Gi")), 1 << 30);
        assert_eq!(int_value(&q("128M")), 128_000_000);
        assert_eq!(int_value(&q("1e3")), 1000);
        assert_eq!(int_value(&q("12x")), 0);
        assert_eq!(milli_value(&q("-1")), 0);
    }

    #[test]
    fn requests_take_the_larger_of_init_and_app() {
        let p = pod(
            vec![container(&[("cpu", "100m")], &[]), container(&[], &[("cpu", "200m"), ("memory", "64Mi")])],
            vec![container(&[("cpu", "1")], &[])],
        );
        let r = pod_requests(&p);
        assert_eq!((r.cpu_millis, r.memory_bytes, r.pods), (1000, 64 << 20, 1));
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&pod(vec![container(&[], &[])], vec![])), "BestEffort");
        assert_eq!(qos_class(&pod(vec![container(&[("cpu", "1")], &[])], vec![])), "Burstable");
        let g = container(&[("cpu", "1"), ("memory", "1Gi")], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(qos_class(&pod(vec![g.clone()], vec![])), "Guaranteed");
        assert_eq!(qos_class(&pod(vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])], vec![])), "Guaranteed");
        assert_eq!(qos_class(&pod(vec![g, container(&[], &[])], vec![])), "Burstable");
    }

    #[test]
    fn admission_reports_like_the_kubelet() {
        let alloc = Resources { cpu_millis: 1000, memory_bytes: 1 << 30, ephemeral_storage_bytes: 0, pods: 110 };
        let used = Resources { cpu_millis: 500, pods: 1, ..Default::default() };
        let fits = Resources { cpu_millis: 500, pods: 1, ..Default::default() };
        assert!(admit(&fits, &used, &alloc).is_ok());
        let big = Resources { cpu_millis: 2000, pods: 1, ..Default::default() };
        let r = admit(&big, &used, &alloc).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1000"
        );
        let mem = Resources { memory_bytes: 2 << 30, pods: 1, ..Default::default() };
        assert_eq!(admit(&mem, &used, &alloc).unwrap_err().reason, "OutOfmemory");
    }
}
