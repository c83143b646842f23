//! Profiles: the plugins of each extension point and score weights for one
//! `schedulerName`, built from a [`Registry`] and a configuration.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{PluginSetConfig, ProfileConfig};
use crate::framework::*;
use crate::registry::{BuildError, PluginSet, Registry};

/// The default plugins (multiPoint) and their score weights, as in
/// Kubernetes 1.33.
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Errors building a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// A plugin did not build: not registered, bad args, or refused by its
    /// factory.
    #[error(transparent)]
    Plugin(#[from] BuildError),
    /// No QueueSort or no Bind plugin.
    #[error("profile {0:?}: {1}")]
    Incomplete(String, &'static str),
}

/// One profile's plugins, ready to run.
pub struct Profile {
    /// The `spec.schedulerName` it serves.
    pub scheduler_name: String,
    /// Queue order.
    pub queue_sort: Arc<dyn QueueSort>,
    /// PreEnqueue plugins.
    pub pre_enqueue: Vec<Arc<dyn PreEnqueue>>,
    /// PreFilter plugins.
    pub pre_filter: Vec<Arc<dyn PreFilter>>,
    /// Filter plugins.
    pub filter: Vec<Arc<dyn Filter>>,
    /// PostFilter plugins.
    pub post_filter: Vec<Arc<dyn PostFilter>>,
    /// PreScore plugins.
    pub pre_score: Vec<Arc<dyn PreScore>>,
    /// Score plugins with their weights.
    pub score: Vec<(Arc<dyn Score>, i64)>,
    /// Reserve plugins.
    pub reserve: Vec<Arc<dyn Reserve>>,
    /// Permit plugins.
    pub permit: Vec<Arc<dyn Permit>>,
    /// PreBind plugins.
    pub pre_bind: Vec<Arc<dyn PreBind>>,
    /// Bind plugins.
    pub bind: Vec<Arc<dyn Bind>>,
    /// PostBind plugins.
    pub post_bind: Vec<Arc<dyn PostBind>>,
    /// Percentage of nodes to score (None: the scheduler-wide setting).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Events each plugin registered.
    pub events: HashMap<&'static str, Vec<ClusterEvent>>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("scheduler_name", &self.scheduler_name)
            .field("filter", &self.filter.iter().map(|p| p.name()).collect::<Vec<_>>())
            .field("score", &self.score.iter().map(|(p, w)| (p.name(), *w)).collect::<Vec<_>>())
            .finish()
    }
}

fn point_of<'a>(
    cfg: &'a Option<crate::config::Plugins>,
    f: impl Fn(&'a crate::config::Plugins) -> &'a PluginSetConfig,
) -> Option<&'a PluginSetConfig> {
    cfg.as_ref().map(f)
}

impl Profile {
    /// Builds the profile `cfg` from `registry`.
    pub fn build(cfg: &ProfileConfig, registry: &Registry, handle: &Handle) -> Result<Profile, ProfileError> {
        let plugins = &cfg.plugins;
        // multiPoint: defaults minus disabled, plus enabled.
        let mut multi: Vec<(String, Option<i64>)> = Vec::new();
        let mp = point_of(plugins, |p| &p.multi_point);
        let all_disabled = mp.is_some_and(|m| m.disabled.iter().any(|d| d.name == "*"));
        if !all_disabled {
            for (name, _) in DEFAULT_PLUGINS {
                // Defaults missing from the registry are left out: a registry
                // built from `Registry::empty()` gets only what it registers.
                if !registry.contains(name) {
                    continue;
                }
                if mp.is_some_and(|m| m.disabled.iter().any(|d| d.name == *name)) {
                    continue;
                }
                multi.push((name.to_string(), None));
            }
        }
        for e in mp.map(|m| m.enabled.as_slice()).unwrap_or_default() {
            if let Some(existing) = multi.iter_mut().find(|(n, _)| *n == e.name) {
                existing.1 = e.weight;
            } else {
                multi.push((e.name.clone(), e.weight));
            }
        }
        // Every plugin named anywhere is instantiated once.
        let mut names: Vec<String> = multi.iter().map(|(n, _)| n.clone()).collect();
        if let Some(p) = plugins {
            for set in p.points() {
                for e in &set.1.enabled {
                    if !names.contains(&e.name) {
                        names.push(e.name.clone());
                    }
                }
            }
        }
        let mut sets: HashMap<String, PluginSet> = HashMap::new();
        for name in &names {
            let args = cfg.plugin_config.iter().find(|c| c.name == *name).map(|c| &c.args);
            let set = registry.build(name, args, handle)?;
            sets.insert(name.clone(), set);
        }
        // Per extension point: multiPoint order minus disabled, plus enabled.
        let select = |point: &str, has: &dyn Fn(&PluginSet) -> bool| -> Vec<(String, Option<i64>)> {
            let pc = plugins.as_ref().and_then(|p| p.points().into_iter().find(|(n, _)| *n == point).map(|(_, s)| s));
            let disabled_all = pc.is_some_and(|c| c.disabled.iter().any(|d| d.name == "*"));
            let mut out: Vec<(String, Option<i64>)> = Vec::new();
            if !disabled_all {
                for (n, w) in &multi {
                    if pc.is_some_and(|c| c.disabled.iter().any(|d| d.name == *n)) {
                        continue;
                    }
                    if has(&sets[n]) {
                        out.push((n.clone(), *w));
                    }
                }
            }
            for e in pc.map(|c| c.enabled.as_slice()).unwrap_or_default() {
                if let Some(x) = out.iter_mut().find(|(n, _)| *n == e.name) {
                    if e.weight.is_some() {
                        x.1 = e.weight;
                    }
                } else if has(&sets[&e.name]) {
                    out.push((e.name.clone(), e.weight));
                }
            }
            out
        };
        macro_rules! point {
            ($point:literal, $field:ident) => {
                select($point, &|s: &PluginSet| s.$field.is_some())
                    .into_iter()
                    .map(|(n, _)| sets[&n].$field.clone().expect("present"))
                    .collect::<Vec<_>>()
            };
        }
        let queue_sort = point!("queueSort", queue_sort)
            .into_iter()
            .next()
            .ok_or(ProfileError::Incomplete(cfg.scheduler_name.clone(), "no QueueSort plugin"))?;
        let bind = point!("bind", bind);
        if bind.is_empty() {
            return Err(ProfileError::Incomplete(cfg.scheduler_name.clone(), "no Bind plugin"));
        }
        let score = select("score", &|s: &PluginSet| s.score.is_some())
            .into_iter()
            .map(|(n, w)| {
                let default = DEFAULT_PLUGINS.iter().find(|(d, _)| *d == n).map(|(_, w)| *w).unwrap_or(1).max(1);
                (sets[&n].score.clone().expect("present"), w.unwrap_or(default))
            })
            .collect();
        let mut events = HashMap::new();
        for set in sets.values() {
            events.insert(set.name, set.events.clone());
        }
        Ok(Profile {
            scheduler_name: cfg.scheduler_name.clone(),
            queue_sort,
            pre_enqueue: point!("preEnqueue", pre_enqueue),
            pre_filter: point!("preFilter", pre_filter),
            filter: point!("filter", filter),
            post_filter: point!("postFilter", post_filter),
            pre_score: point!("preScore", pre_score),
            score,
            reserve: point!("reserve", reserve),
            permit: point!("permit", permit),
            pre_bind: point!("preBind", pre_bind),
            bind,
            post_bind: point!("postBind", post_bind),
            percentage_of_nodes_to_score: cfg.percentage_of_nodes_to_score,
            events,
        })
    }

    /// The default profile (`default-scheduler`) from the built-in registry.
    pub fn default_profile() -> Profile {
        Profile::build(&ProfileConfig::default(), &Registry::default(), &Handle::default())
            .expect("default profile builds")
    }

    /// Runs every Filter (minus those whose PreFilter skipped) on one node.
    pub fn run_filters(
        &self,
        state: &CycleState,
        pod: &crate::node_info::PodInfo,
        node: &crate::node_info::NodeInfo,
    ) -> Status {
        Self::run_active_filters(&self.active_filters(state), state, pod, node)
    }

    /// The Filter plugins a cycle runs: those whose PreFilter did not skip.
    pub fn active_filters(&self, state: &CycleState) -> Vec<&Arc<dyn Filter>> {
        self.filter.iter().filter(|f| !state.skip_filter.contains(f.name())).collect()
    }

    /// Runs `filters` (from [`active_filters`](Self::active_filters)) in
    /// order; the first failure, named after its plugin.
    pub fn run_active_filters(
        filters: &[&Arc<dyn Filter>],
        state: &CycleState,
        pod: &crate::node_info::PodInfo,
        node: &crate::node_info::NodeInfo,
    ) -> Status {
        for f in filters {
            let s = f.filter(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(f.name());
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerConfiguration;

    #[test]
    fn default_profile_has_upstream_plugins() {
        let p = Profile::default_profile();
        let filters: Vec<_> = p.filter.iter().map(|f| f.name()).collect();
        assert_eq!(
            filters,
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity"
            ]
        );
        let scores: Vec<_> = p.score.iter().map(|(f, w)| (f.name(), *w)).collect();
        assert_eq!(
            scores,
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1)
            ]
        );
        assert_eq!(p.post_filter.len(), 1);
        assert_eq!(p.reserve.iter().map(|r| r.name()).collect::<Vec<_>>(), ["VolumeBinding"]);
        assert_eq!(p.pre_bind.iter().map(|r| r.name()).collect::<Vec<_>>(), ["VolumeBinding"]);
    }

    #[test]
    fn yaml_disables_and_reweights() {
        let cfg = SchedulerConfiguration::from_yaml(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: no-scoring
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: ImageLocality, weight: 5}]
    filter:
      disabled: [{name: NodePorts}]
"#,
        )
        .unwrap();
        assert_eq!(cfg.profiles.len(), 2);
        let p = Profile::build(&cfg.profiles[1], &Registry::default(), &Handle::default()).unwrap();
        assert_eq!(p.score.iter().map(|(f, w)| (f.name(), *w)).collect::<Vec<_>>(), [("ImageLocality", 5)]);
        assert!(p.filter.iter().all(|f| f.name() != "NodePorts"));
    }

    #[test]
    fn unknown_plugin_is_an_error() {
        let cfg = SchedulerConfiguration::from_yaml(
            "profiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled: [{name: Nope}]\n",
        )
        .unwrap();
        assert!(matches!(
            Profile::build(&cfg.profiles[0], &Registry::default(), &Handle::default()),
            Err(ProfileError::Plugin(BuildError::UnknownPlugin(name))) if name == "Nope"
        ));
    }
}
