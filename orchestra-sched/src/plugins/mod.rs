//! The built-in plugins, one per file, each with `NAME`, a factory and
//! table-driven tests.

pub mod balanced_allocation;
pub mod default_binder;
pub mod default_preemption;
pub mod helpers;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod queue_sort;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use crate::registry::Registry;

/// Registers every built-in plugin.
pub fn register_all(r: &mut Registry) {
    r.register(queue_sort::NAME, |_, _| Ok(queue_sort::factory()));
    r.register(node_name::NAME, |_, _| Ok(node_name::factory()));
    r.register(node_unschedulable::NAME, |_, _| Ok(node_unschedulable::factory()));
    r.register(node_affinity::NAME, |_, _| Ok(node_affinity::factory()));
    r.register(taint_toleration::NAME, |_, _| Ok(taint_toleration::factory()));
    r.register(node_ports::NAME, |_, _| Ok(node_ports::factory()));
    r.register(node_resources_fit::NAME, |a, _| node_resources_fit::factory(a));
    r.register(balanced_allocation::NAME, |a, _| balanced_allocation::factory(a));
    r.register(image_locality::NAME, |_, _| Ok(image_locality::factory()));
    r.register(inter_pod_affinity::NAME, |a, h| inter_pod_affinity::factory(a, h.namespaces.clone()));
    r.register(pod_topology_spread::NAME, |_, _| Ok(pod_topology_spread::factory()));
    r.register(volume_restrictions::NAME, |_, h| Ok(volume_restrictions::factory(h)));
    r.register(volume_binding::NAME, volume_binding::factory);
    r.register(volume_zone::NAME, |_, h| Ok(volume_zone::factory(h)));
    r.register(default_preemption::NAME, |_, h| Ok(default_preemption::factory(h)));
    r.register(default_binder::NAME, |_, h| Ok(default_binder::factory(h)));
}
