//! Scheduler configuration in the shape of `KubeSchedulerConfiguration`
//! (`kubescheduler.config.k8s.io/v1`), from YAML/JSON or built in code.

use serde::{Deserialize, Serialize};

/// A plugin named in a configuration, with an optional score weight.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginRef {
    /// Registry name (`*` in `disabled` means all).
    pub name: String,
    /// Score weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// Enabled and disabled plugins of one extension point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginSetConfig {
    /// Added (after the multiPoint ones).
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    /// Removed (`*`: all defaults).
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// Plugins per extension point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct Plugins {
    #[serde(default)]
    pub multi_point: PluginSetConfig,
    #[serde(default)]
    pub pre_enqueue: PluginSetConfig,
    #[serde(default)]
    pub queue_sort: PluginSetConfig,
    #[serde(default)]
    pub pre_filter: PluginSetConfig,
    #[serde(default)]
    pub filter: PluginSetConfig,
    #[serde(default)]
    pub post_filter: PluginSetConfig,
    #[serde(default)]
    pub pre_score: PluginSetConfig,
    #[serde(default)]
    pub score: PluginSetConfig,
    #[serde(default)]
    pub reserve: PluginSetConfig,
    #[serde(default)]
    pub permit: PluginSetConfig,
    #[serde(default)]
    pub pre_bind: PluginSetConfig,
    #[serde(default)]
    pub bind: PluginSetConfig,
    #[serde(default)]
    pub post_bind: PluginSetConfig,
}

impl Plugins {
    /// Extension points by their configuration name.
    pub fn points(&self) -> Vec<(&'static str, &PluginSetConfig)> {
        vec![
            ("preEnqueue", &self.pre_enqueue),
            ("queueSort", &self.queue_sort),
            ("preFilter", &self.pre_filter),
            ("filter", &self.filter),
            ("postFilter", &self.post_filter),
            ("preScore", &self.pre_score),
            ("score", &self.score),
            ("reserve", &self.reserve),
            ("permit", &self.permit),
            ("preBind", &self.pre_bind),
            ("bind", &self.bind),
            ("postBind", &self.post_bind),
        ]
    }
}

/// Arguments for one plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Its arguments (plugin-specific).
    #[serde(default)]
    pub args: serde_json::Value,
}

/// One profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileConfig {
    /// The `spec.schedulerName` it serves.
    pub scheduler_name: String,
    /// Plugin selection (None: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    /// Plugin arguments.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
    /// Overrides the scheduler-wide percentage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig::named("default-scheduler")
    }
}

impl ProfileConfig {
    /// A default profile serving `scheduler_name`.
    pub fn named(scheduler_name: &str) -> ProfileConfig {
        ProfileConfig {
            scheduler_name: scheduler_name.into(),
            plugins: None,
            plugin_config: Vec::new(),
            percentage_of_nodes_to_score: None,
        }
    }
    /// Enables `name` at every extension point it implements (multiPoint).
    pub fn enable(mut self, name: &str, weight: Option<i64>) -> Self {
        self.plugins
            .get_or_insert_with(Plugins::default)
            .multi_point
            .enabled
            .push(PluginRef { name: name.into(), weight });
        self
    }
    /// Disables `name` everywhere (`*`: every default).
    pub fn disable(mut self, name: &str) -> Self {
        self.plugins
            .get_or_insert_with(Plugins::default)
            .multi_point
            .disabled
            .push(PluginRef { name: name.into(), weight: None });
        self
    }
    /// Sets a plugin's arguments.
    pub fn args(mut self, name: &str, args: serde_json::Value) -> Self {
        self.plugin_config.push(PluginConfig { name: name.into(), args });
        self
    }
}

/// The whole scheduler configuration: a `KubeSchedulerConfiguration`
/// ([`from_yaml`](Self::from_yaml), [`from_file`](Self::from_file)), or
/// built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use orchestra_sched::config::LeaderElectionConfig;
/// use orchestra_sched::config::{ProfileConfig, SchedulerConfiguration};
///
/// let config = SchedulerConfiguration::default()
///     .with_parallelism(4)
///     .with_pod_initial_backoff_seconds(2)
///     .with_leader_election(LeaderElectionConfig { leader_elect: true, ..Default::default() })
///     .with_profiles(vec![ProfileConfig::named("default-scheduler").disable("ImageLocality")]);
/// assert_eq!(config.pod_max_backoff_seconds, 10);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SchedulerConfiguration {
    /// `kubescheduler.config.k8s.io/v1` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `KubeSchedulerConfiguration` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Threads used to filter and score (default 2).
    #[serde(default = "default_parallelism")]
    pub parallelism: usize,
    /// Percentage of nodes to find feasible before scoring; 0/None: adaptive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Backoff after the first failure, in seconds (default 1).
    #[serde(default = "one")]
    pub pod_initial_backoff_seconds: u64,
    /// Largest backoff, in seconds (default 10).
    #[serde(default = "ten")]
    pub pod_max_backoff_seconds: u64,
    /// Profiles; at least one.
    #[serde(default = "default_profiles")]
    pub profiles: Vec<ProfileConfig>,
    /// Leader election.
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
}

/// Lease-based leader election settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Whether to elect a leader before scheduling.
    #[serde(default)]
    pub leader_elect: bool,
    /// Lease name (default `kube-scheduler`).
    #[serde(default = "lease_name")]
    pub resource_name: String,
    /// Lease namespace (default `kube-system`).
    #[serde(default = "lease_ns")]
    pub resource_namespace: String,
    /// Lease duration in seconds (default 15).
    #[serde(default = "fifteen")]
    pub lease_duration_seconds: u64,
    /// How long a leader keeps failing to renew before it steps down, in
    /// seconds (default 10; below the duration).
    #[serde(default = "ten")]
    pub renew_deadline_seconds: u64,
    /// Renew period in seconds (default 2; must be below the duration).
    #[serde(default = "two")]
    pub retry_period_seconds: u64,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            leader_elect: false,
            resource_name: lease_name(),
            resource_namespace: lease_ns(),
            lease_duration_seconds: 15,
            renew_deadline_seconds: 10,
            retry_period_seconds: 2,
        }
    }
}

fn lease_name() -> String {
    "kube-scheduler".into()
}
fn lease_ns() -> String {
    "kube-system".into()
}
fn fifteen() -> u64 {
    15
}
fn two() -> u64 {
    2
}
fn one() -> u64 {
    1
}
fn ten() -> u64 {
    10
}
fn default_parallelism() -> usize {
    2
}
fn default_profiles() -> Vec<ProfileConfig> {
    vec![ProfileConfig::default()]
}

impl Default for SchedulerConfiguration {
    fn default() -> Self {
        SchedulerConfiguration {
            api_version: None,
            kind: None,
            parallelism: 2,
            percentage_of_nodes_to_score: None,
            pod_initial_backoff_seconds: 1,
            pod_max_backoff_seconds: 10,
            profiles: default_profiles(),
            leader_election: LeaderElectionConfig::default(),
        }
    }
}

/// A configuration that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("scheduler configuration: {0}")]
pub struct ConfigError(String);

impl SchedulerConfiguration {
    /// Parses YAML (JSON is YAML too).
    pub fn from_yaml(text: &str) -> Result<SchedulerConfiguration, ConfigError> {
        serde_yaml::from_str(text).map_err(|e| ConfigError(e.to_string()))
    }
    /// Reads a YAML or JSON file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<SchedulerConfiguration, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError(e.to_string()))?;
        SchedulerConfiguration::from_yaml(&text)
    }
    /// Sets [`parallelism`](Self::parallelism).
    pub fn with_parallelism(mut self, parallelism: usize) -> Self {
        self.parallelism = parallelism;
        self
    }
    /// Sets [`percentage_of_nodes_to_score`](Self::percentage_of_nodes_to_score).
    pub fn with_percentage_of_nodes_to_score(mut self, percentage: impl Into<Option<i32>>) -> Self {
        self.percentage_of_nodes_to_score = percentage.into();
        self
    }
    /// Sets [`pod_initial_backoff_seconds`](Self::pod_initial_backoff_seconds).
    pub fn with_pod_initial_backoff_seconds(mut self, seconds: u64) -> Self {
        self.pod_initial_backoff_seconds = seconds;
        self
    }
    /// Sets [`pod_max_backoff_seconds`](Self::pod_max_backoff_seconds).
    pub fn with_pod_max_backoff_seconds(mut self, seconds: u64) -> Self {
        self.pod_max_backoff_seconds = seconds;
        self
    }
    /// Replaces the profiles.
    pub fn with_profiles(mut self, profiles: Vec<ProfileConfig>) -> Self {
        self.profiles = profiles;
        self
    }
    /// Sets [`leader_election`](Self::leader_election).
    pub fn with_leader_election(mut self, leader_election: LeaderElectionConfig) -> Self {
        self.leader_election = leader_election;
        self
    }
}
