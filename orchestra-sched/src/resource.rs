//! Resource quantities as the scheduler counts them: CPU in millicores,
//! memory and ephemeral storage in bytes, extended resources as integers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use orchestra_core::api::quantity;

/// CPU assumed for a container without a CPU request when scoring (100m).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container without a memory request when scoring (200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A set of resource amounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Pod count (allocatable only).
    pub allowed_pod_number: i64,
    /// Extended and hugepages resources by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// Adds every amount of `other`.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }
    /// Subtracts every amount of `other`.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }
    /// Each amount the maximum of `self` and `other`.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }
    /// The amount of the named resource (`cpu` in millicores).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pod_number,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }
    /// Sets the named resource from a quantity.
    pub fn set_quantity(&mut self, name: &str, q: &Quantity) {
        match name {
            "cpu" => self.milli_cpu = quantity::milli_value(q),
            "memory" => self.memory = quantity::value(q),
            "ephemeral-storage" => self.ephemeral_storage = quantity::value(q),
            "pods" => self.allowed_pod_number = quantity::value(q),
            other => {
                if is_scalar_resource(other) {
                    self.scalar.insert(other.to_owned(), quantity::value(q));
                }
            }
        }
    }
    /// A resource set from a quantity map (requests, limits, allocatable).
    pub fn from_map(map: Option<&BTreeMap<String, Quantity>>) -> Resource {
        let mut r = Resource::default();
        if let Some(map) = map {
            for (k, v) in map {
                r.set_quantity(k, v);
            }
        }
        r
    }
}

/// Whether `name` is an extended resource (domain-prefixed, not kubernetes.io),
/// a hugepages resource or an attachable-volumes resource.
pub fn is_scalar_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests."))
}

fn container_requests(c: &Container) -> Resource {
    Resource::from_map(c.resources.as_ref().and_then(|r| r.requests.as_ref()).or_else(|| {
        // Requests default to limits when only limits are set.
        c.resources.as_ref().and_then(|r| r.limits.as_ref())
    }))
}

/// The pod's effective request as Kubernetes computes it: the sum over
/// regular containers (and restartable init containers, i.e. sidecars), at
/// least the largest init container plus the sidecars started before it,
/// plus the pod overhead. With `non_zero`, containers without a CPU or memory
/// request count the scoring defaults (100m, 200Mi).
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resource {
    let Some(spec) = pod.spec.as_ref() else { return Resource::default() };
    let fix = |mut r: Resource, c: &Container| {
        if non_zero {
            let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            let has = |n: &str| req.is_some_and(|m| m.contains_key(n));
            if !has("cpu") && r.milli_cpu == 0 {
                r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
            }
            if !has("memory") && r.memory == 0 {
                r.memory = DEFAULT_MEMORY_REQUEST;
            }
        }
        r
    };
    let mut reqs = Resource::default();
    for c in &spec.containers {
        reqs.add(&fix(container_requests(c), c));
    }
    let mut restartable = Resource::default();
    let mut init_max = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = fix(container_requests(c), c);
        if c.restart_policy.as_deref() == Some("Always") {
            reqs.add(&r);
            restartable.add(&r);
            init_max.set_max(&restartable);
        } else {
            let mut tmp = r.clone();
            tmp.add(&restartable);
            init_max.set_max(&tmp);
        }
    }
    reqs.set_max(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resource::from_map(Some(overhead)));
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        // (name, quantity, amount counted)
        let cases = [
            ("cpu", "1", 1000),
            ("cpu", "100m", 100),
            ("cpu", "1.5", 1500),
            ("memory", "1Gi", 1 << 30),
            ("memory", "1.5", 2),
            ("ephemeral-storage", "2k", 2000),
            ("pods", "110", 110),
            ("example.com/gpu", "1e3", 1000),
            ("hugepages-2Mi", "0.5Ki", 512),
            ("memory", "nonsense", 0),
        ];
        for (name, q, want) in cases {
            let mut r = Resource::default();
            r.set_quantity(name, &Quantity(q.into()));
            assert_eq!(r.get(name), want, "{name}={q}");
        }
    }

    #[test]
    fn init_containers_and_overhead() {
        use crate::testing::PodBuilder;
        let cases = [
            // (containers cpu, init cpu, sidecar cpu, overhead cpu, expected)
            (vec!["1", "1"], vec!["3"], vec![], None, 3000),
            (vec!["1", "1"], vec!["1"], vec![], None, 2000),
            (vec!["1"], vec!["1"], vec!["1"], None, 2000),
            (vec!["1"], vec![], vec![], Some("250m"), 1250),
        ];
        for (containers, init, sidecars, overhead, want) in cases {
            let mut b = PodBuilder::new("p");
            for c in containers {
                b = b.container_cpu(c);
            }
            for c in sidecars {
                b = b.sidecar_cpu(c);
            }
            for c in init {
                b = b.init_cpu(c);
            }
            if let Some(o) = overhead {
                b = b.overhead_cpu(o);
            }
            assert_eq!(pod_requests(&b.build(), false).milli_cpu, want);
        }
    }
}
