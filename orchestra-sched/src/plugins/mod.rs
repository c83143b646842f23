//! The built-in plugins, one per file. Each module has the same shape: the
//! plugin's registry name `NAME`, its arguments type `Args` (decoded from the
//! profile's `pluginConfig`; [`NoArgs`](crate::registry::NoArgs) for plugins
//! without options) and its factory
//! `new(args: Args, handle: &Handle) -> Result<PluginSet, PluginError>`,
//! listed in the table [`BUILT_IN`] that [`Registry::default()`] is made of.

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

use std::sync::LazyLock;

use crate::registry::{Factory, Registry};

/// Every built-in plugin: its name and its factory.
pub static BUILT_IN: LazyLock<Vec<(&'static str, Factory)>> = LazyLock::new(|| {
    vec![
        (queue_sort::NAME, Factory::new(queue_sort::new)),
        (node_name::NAME, Factory::new(node_name::new)),
        (node_unschedulable::NAME, Factory::new(node_unschedulable::new)),
        (node_affinity::NAME, Factory::new(node_affinity::new)),
        (taint_toleration::NAME, Factory::new(taint_toleration::new)),
        (node_ports::NAME, Factory::new(node_ports::new)),
        (node_resources_fit::NAME, Factory::new(node_resources_fit::new)),
        (balanced_allocation::NAME, Factory::new(balanced_allocation::new)),
        (image_locality::NAME, Factory::new(image_locality::new)),
        (inter_pod_affinity::NAME, Factory::new(inter_pod_affinity::new)),
        (pod_topology_spread::NAME, Factory::new(pod_topology_spread::new)),
        (volume_restrictions::NAME, Factory::new(volume_restrictions::new)),
        (volume_binding::NAME, Factory::new(volume_binding::new)),
        (volume_zone::NAME, Factory::new(volume_zone::new)),
        (default_preemption::NAME, Factory::new(default_preemption::new)),
        (default_binder::NAME, Factory::new(default_binder::new)),
    ]
});

/// Every built-in plugin ([`BUILT_IN`]), the registry a
/// [`SchedulerBuilder`](crate::scheduler::SchedulerBuilder) starts from.
impl Default for Registry {
    fn default() -> Registry {
        BUILT_IN.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::framework::Handle;
    use crate::profile::DEFAULT_PLUGINS;
    use crate::registry::BuildError;

    #[test]
    fn the_table_has_every_default_plugin() {
        let names: HashSet<&str> = BUILT_IN.iter().map(|(name, _)| *name).collect();
        assert_eq!(names.len(), BUILT_IN.len(), "a name listed twice");
        for (name, _) in DEFAULT_PLUGINS {
            assert!(names.contains(name), "{name} is in the default profile but not in BUILT_IN");
        }
        let registry = Registry::default();
        for (name, _) in BUILT_IN.iter() {
            assert!(registry.contains(name), "{name}");
        }
    }

    #[test]
    fn every_built_in_builds_with_its_default_args_under_its_name() {
        for (name, factory) in BUILT_IN.iter() {
            let set = factory.build(name, None, &Handle::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(set.name, *name);
        }
    }

    #[test]
    fn built_in_args() {
        use serde_json::json;
        // (plugin, args, Ok or the BuildError variant)
        let cases = [
            (node_resources_fit::NAME, json!({"scoringStrategy": {"type": "MostAllocated"}}), "Ok"),
            (node_resources_fit::NAME, json!({"scoringStrategy": {"type": "Bogus"}}), "Args"),
            (node_resources_fit::NAME, json!({"ignoredResources": "example.com/gpu"}), "Args"),
            (
                node_resources_fit::NAME,
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}}),
                "Plugin",
            ),
            (balanced_allocation::NAME, json!({"resources": [{"name": "cpu", "weight": 1}]}), "Ok"),
            (balanced_allocation::NAME, json!({"resources": [{"weight": 1}]}), "Args"),
            (inter_pod_affinity::NAME, json!({"hardPodAffinityWeight": 100}), "Ok"),
            (inter_pod_affinity::NAME, json!({"hardPodAffinityWeight": 101}), "Plugin"),
            (inter_pod_affinity::NAME, json!({"hardPodAffinityWeight": "1"}), "Args"),
            (volume_binding::NAME, json!({"bindTimeoutSeconds": 30}), "Ok"),
            (volume_binding::NAME, json!({"bindTimeoutSeconds": -1}), "Args"),
            // Upstream's own args for plugins without options here load.
            (pod_topology_spread::NAME, json!({"kind": "PodTopologySpreadArgs", "defaultingType": "System"}), "Ok"),
            (default_preemption::NAME, json!({"minCandidateNodesPercentage": 10}), "Ok"),
        ];
        let registry = Registry::default();
        for (plugin, args, want) in cases {
            let got = match registry.build(plugin, Some(&args), &Handle::default()) {
                Ok(_) => "Ok",
                Err(e @ BuildError::Args { .. }) | Err(e @ BuildError::Plugin { .. }) => {
                    assert_eq!(e.plugin(), plugin);
                    assert!(e.to_string().contains(plugin), "{e}");
                    if matches!(e, BuildError::Args { .. }) { "Args" } else { "Plugin" }
                }
                Err(e) => panic!("{plugin} {args}: {e}"),
            };
            assert_eq!(got, want, "{plugin} {args}");
        }
    }
}
