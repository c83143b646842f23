//! The plugin registry: a factory for each plugin, by name.
//!
//! Every plugin, built in or not, is registered the same way: under its name,
//! with a factory of the shape
//!
//! ```text
//! fn(args: Args, handle: &Handle) -> Result<PluginSet, PluginError>
//! ```
//!
//! where `Args` is the plugin's own arguments type (`serde::Deserialize` and
//! `Default`), decoded by the registry from the `args` of the profile's
//! `pluginConfig` entry for the plugin, or `Args::default()` when there is
//! none, and [`Handle`] gives the API client, the listers and the metrics the
//! scheduler keeps. A plugin without options takes [`NoArgs`].
//!
//! [`Registry::default()`] holds the built-in plugins (the table
//! [`plugins::BUILT_IN`](crate::plugins::BUILT_IN)); [`Registry::empty()`]
//! none. A custom plugin goes next to them:
//!
//! ```
//! use std::sync::Arc;
//!
//! use orchestra_sched::framework::{CycleState, Filter, Handle, Plugin, Status};
//! use orchestra_sched::node_info::{NodeInfo, PodInfo};
//! use orchestra_sched::registry::{BuildError, PluginError, PluginSet, Registry};
//!
//! /// Filter: nodes running fewer than `max` pods.
//! struct MaxPods {
//!     max: usize,
//! }
//!
//! impl MaxPods {
//!     const NAME: &'static str = "MaxPods";
//! }
//!
//! impl Plugin for MaxPods {
//!     fn name(&self) -> &'static str {
//!         Self::NAME
//!     }
//! }
//!
//! impl Filter for MaxPods {
//!     fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
//!         if node.pods.len() < self.max { Status::success() } else { Status::unschedulable("node is full") }
//!     }
//! }
//!
//! /// Its `pluginConfig` args: `{"maxPods": 10}`.
//! #[derive(Default, serde::Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct MaxPodsArgs {
//!     max_pods: Option<usize>,
//! }
//!
//! fn new(args: MaxPodsArgs, _: &Handle) -> Result<PluginSet, PluginError> {
//!     let max = args.max_pods.unwrap_or(110);
//!     if max == 0 {
//!         return Err(PluginError::invalid_argument("maxPods", "must be at least 1"));
//!     }
//!     let p = Arc::new(MaxPods { max });
//!     Ok(PluginSet::new(&p).filter(&p))
//! }
//!
//! let registry = Registry::default().with(MaxPods::NAME, new);
//! let handle = Handle::default();
//!
//! let set = registry.build(MaxPods::NAME, Some(&serde_json::json!({"maxPods": 3})), &handle)?;
//! assert!(set.filter.is_some());
//! // Arguments of the wrong type are refused, naming the plugin.
//! let err = registry.build(MaxPods::NAME, Some(&serde_json::json!({"maxPods": "three"})), &handle).unwrap_err();
//! assert!(matches!(err, BuildError::Args { ref plugin, .. } if plugin == "MaxPods"));
//! # Ok::<(), BuildError>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::framework::*;

/// One plugin instance, seen through every extension point it implements.
#[derive(Clone)]
pub struct PluginSet {
    /// Its name.
    pub name: &'static str,
    /// The events after which a pod it rejected may fit.
    pub events: Vec<ClusterEvent>,
    #[allow(missing_docs)]
    pub pre_enqueue: Option<Arc<dyn PreEnqueue>>,
    #[allow(missing_docs)]
    pub queue_sort: Option<Arc<dyn QueueSort>>,
    #[allow(missing_docs)]
    pub pre_filter: Option<Arc<dyn PreFilter>>,
    #[allow(missing_docs)]
    pub filter: Option<Arc<dyn Filter>>,
    #[allow(missing_docs)]
    pub post_filter: Option<Arc<dyn PostFilter>>,
    #[allow(missing_docs)]
    pub pre_score: Option<Arc<dyn PreScore>>,
    #[allow(missing_docs)]
    pub score: Option<Arc<dyn Score>>,
    #[allow(missing_docs)]
    pub reserve: Option<Arc<dyn Reserve>>,
    #[allow(missing_docs)]
    pub permit: Option<Arc<dyn Permit>>,
    #[allow(missing_docs)]
    pub pre_bind: Option<Arc<dyn PreBind>>,
    #[allow(missing_docs)]
    pub bind: Option<Arc<dyn Bind>>,
    #[allow(missing_docs)]
    pub post_bind: Option<Arc<dyn PostBind>>,
}

macro_rules! with {
    ($($fn:ident: $field:ident: $tr:ident),*) => {
        $(
            #[doc = concat!("Registers the plugin as a ", stringify!($tr), " plugin.")]
            pub fn $fn<T: $tr + 'static>(mut self, p: &Arc<T>) -> Self {
                self.$field = Some(p.clone() as Arc<dyn $tr>);
                self
            }
        )*
    };
}

impl PluginSet {
    /// An instance of `plugin`, at no extension point yet.
    pub fn new<T: Plugin + 'static>(plugin: &Arc<T>) -> PluginSet {
        PluginSet {
            name: plugin.name(),
            events: plugin.events_to_register(),
            pre_enqueue: None,
            queue_sort: None,
            pre_filter: None,
            filter: None,
            post_filter: None,
            pre_score: None,
            score: None,
            reserve: None,
            permit: None,
            pre_bind: None,
            bind: None,
            post_bind: None,
        }
    }
    with!(
        pre_enqueue: pre_enqueue: PreEnqueue,
        queue_sort: queue_sort: QueueSort,
        pre_filter: pre_filter: PreFilter,
        filter: filter: Filter,
        post_filter: post_filter: PostFilter,
        pre_score: pre_score: PreScore,
        score: score: Score,
        reserve: reserve: Reserve,
        permit: permit: Permit,
        pre_bind: pre_bind: PreBind,
        bind: bind: Bind,
        post_bind: post_bind: PostBind
    );
}

impl std::fmt::Debug for PluginSet {
    /// The name and the extension points the instance is at.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let points = [
            ("preEnqueue", self.pre_enqueue.is_some()),
            ("queueSort", self.queue_sort.is_some()),
            ("preFilter", self.pre_filter.is_some()),
            ("filter", self.filter.is_some()),
            ("postFilter", self.post_filter.is_some()),
            ("preScore", self.pre_score.is_some()),
            ("score", self.score.is_some()),
            ("reserve", self.reserve.is_some()),
            ("permit", self.permit.is_some()),
            ("preBind", self.pre_bind.is_some()),
            ("bind", self.bind.is_some()),
            ("postBind", self.post_bind.is_some()),
        ];
        let at: Vec<&str> = points.iter().filter(|(_, at)| *at).map(|(point, _)| *point).collect();
        f.debug_struct("PluginSet").field("name", &self.name).field("points", &at).finish()
    }
}

/// Why a plugin's factory refused to build it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// An argument decoded, but with a value the plugin cannot work with
    /// (out of range, inconsistent with another argument).
    #[error("invalid argument {field}: {message}")]
    InvalidArgument {
        /// The argument, as spelled in the configuration
        /// (`scoringStrategy.requestedToCapacityRatio.shape`).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// Anything else that keeps the plugin from being built.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl PluginError {
    /// Argument `field` has a value the plugin cannot work with.
    pub fn invalid_argument(field: &'static str, message: impl Into<String>) -> PluginError {
        PluginError::InvalidArgument { field, message: message.into() }
    }
    /// Any other error.
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> PluginError {
        PluginError::Other(error.into())
    }
}

/// Why [`Registry::build`] built no plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No factory is registered under the name.
    #[error("plugin {0:?} is not registered")]
    UnknownPlugin(String),
    /// The plugin's `args` do not decode into its arguments type.
    #[error("plugin {plugin}: bad args: {source}")]
    Args {
        /// The plugin.
        plugin: String,
        /// The decoding error (it names the field).
        source: serde_json::Error,
    },
    /// The plugin's factory refused the arguments or the handle.
    #[error("plugin {plugin}: {source}")]
    Plugin {
        /// The plugin.
        plugin: String,
        /// The factory's error.
        source: PluginError,
    },
}

impl BuildError {
    /// The plugin the error is about.
    pub fn plugin(&self) -> &str {
        match self {
            BuildError::UnknownPlugin(plugin) | BuildError::Args { plugin, .. } | BuildError::Plugin { plugin, .. } => {
                plugin
            }
        }
    }
}

/// The arguments of a plugin that takes none. Whatever `args` a
/// configuration gives such a plugin are ignored: kube-scheduler's own
/// configuration files carry args for plugins that have options there and
/// none here, and load as they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoArgs;

impl<'de> serde::Deserialize<'de> for NoArgs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NoArgs, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| NoArgs)
    }
}

type BuildFn = dyn Fn(&str, Option<&serde_json::Value>, &Handle) -> Result<PluginSet, BuildError> + Send + Sync;

/// A plugin factory as the registry keeps it: a typed factory
/// (`Fn(Args, &Handle) -> Result<PluginSet, PluginError>`) behind the
/// decoding of its raw JSON `args`. Cheap to clone.
#[derive(Clone)]
pub struct Factory(Arc<BuildFn>);

impl Factory {
    /// Wraps `new`, which builds the plugin from its decoded arguments.
    pub fn new<A, F>(new: F) -> Factory
    where
        A: DeserializeOwned + Default,
        F: Fn(A, &Handle) -> Result<PluginSet, PluginError> + Send + Sync + 'static,
    {
        Factory(Arc::new(move |plugin: &str, args: Option<&serde_json::Value>, handle: &Handle| {
            let args = decode_args(args).map_err(|source| BuildError::Args { plugin: plugin.to_owned(), source })?;
            new(args, handle).map_err(|source| BuildError::Plugin { plugin: plugin.to_owned(), source })
        }))
    }

    /// Builds the plugin registered as `plugin` from its raw `args`.
    pub fn build(
        &self,
        plugin: &str,
        args: Option<&serde_json::Value>,
        handle: &Handle,
    ) -> Result<PluginSet, BuildError> {
        (self.0)(plugin, args, handle)
    }
}

impl std::fmt::Debug for Factory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Factory")
    }
}

/// Decodes a plugin's `args`: `A::default()` when absent or `null`. The
/// `apiVersion` and `kind` an args object carries in a
/// KubeSchedulerConfiguration file (`kind: NodeResourcesFitArgs`) are type
/// metadata, not arguments, and are not passed on.
fn decode_args<A: DeserializeOwned + Default>(args: Option<&serde_json::Value>) -> Result<A, serde_json::Error> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(A::default()),
        Some(serde_json::Value::Object(fields)) if fields.contains_key("apiVersion") || fields.contains_key("kind") => {
            let mut fields = fields.clone();
            fields.remove("apiVersion");
            fields.remove("kind");
            A::deserialize(serde_json::Value::Object(fields))
        }
        Some(args) => A::deserialize(args),
    }
}

/// Plugin factories by name.
///
/// [`Registry::default()`] holds every built-in plugin (it is defined next
/// to them, in [`crate::plugins`]); [`Registry::empty()`] none. See the
/// [module documentation](self) for the factory shape and an example.
#[derive(Clone, Debug)]
pub struct Registry {
    factories: HashMap<String, Factory>,
}

impl Registry {
    /// A registry with no plugins.
    pub fn empty() -> Registry {
        Registry { factories: HashMap::new() }
    }

    /// Registers (or replaces) the plugin `name`, built by `new` from its
    /// arguments of type `A`.
    pub fn register<A, F>(&mut self, name: &str, new: F) -> &mut Self
    where
        A: DeserializeOwned + Default,
        F: Fn(A, &Handle) -> Result<PluginSet, PluginError> + Send + Sync + 'static,
    {
        self.register_factory(name, Factory::new(new))
    }

    /// Builder-style [`register`](Self::register).
    pub fn with<A, F>(mut self, name: &str, new: F) -> Self
    where
        A: DeserializeOwned + Default,
        F: Fn(A, &Handle) -> Result<PluginSet, PluginError> + Send + Sync + 'static,
    {
        self.register(name, new);
        self
    }

    /// Registers (or replaces) the plugin `name` with a factory already
    /// wrapped (from another registry or a table such as
    /// [`plugins::BUILT_IN`](crate::plugins::BUILT_IN)).
    pub fn register_factory(&mut self, name: &str, factory: Factory) -> &mut Self {
        self.factories.insert(name.to_owned(), factory);
        self
    }

    /// Builds the plugin `name` from its raw `args` (None when the profile
    /// has no `pluginConfig` entry for it).
    pub fn build(
        &self,
        name: &str,
        args: Option<&serde_json::Value>,
        handle: &Handle,
    ) -> Result<PluginSet, BuildError> {
        let factory = self.factories.get(name).ok_or_else(|| BuildError::UnknownPlugin(name.to_owned()))?;
        factory.build(name, args, handle)
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// Registered names, in no particular order.
    pub fn names(&self) -> Vec<&str> {
        self.factories.keys().map(String::as_str).collect()
    }
}

impl<'a> FromIterator<(&'a str, Factory)> for Registry {
    fn from_iter<I: IntoIterator<Item = (&'a str, Factory)>>(entries: I) -> Registry {
        let mut registry = Registry::empty();
        registry.extend(entries);
        registry
    }
}

impl<'a> Extend<(&'a str, Factory)> for Registry {
    fn extend<I: IntoIterator<Item = (&'a str, Factory)>>(&mut self, entries: I) {
        for (name, factory) in entries {
            self.register_factory(name, factory);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin of no extension point: the tests look at what its factory
    /// was given.
    struct Probe;

    impl Plugin for Probe {
        fn name(&self) -> &'static str {
            "Probe"
        }
    }

    #[derive(Debug, Clone, PartialEq, serde::Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    struct ProbeArgs {
        weight: i64,
        resources: Vec<String>,
    }

    impl Default for ProbeArgs {
        fn default() -> Self {
            ProbeArgs { weight: 1, resources: vec!["cpu".into()] }
        }
    }

    /// Builds Probe from `args`; its decoded arguments, or the error.
    fn probe(args: Option<serde_json::Value>) -> Result<ProbeArgs, BuildError> {
        let seen = Arc::new(parking_lot::Mutex::new(None));
        let keep = seen.clone();
        let registry = Registry::empty().with("Probe", move |args: ProbeArgs, _| {
            if args.weight < 0 {
                return Err(PluginError::invalid_argument("weight", "must not be negative"));
            }
            *keep.lock() = Some(args);
            Ok(PluginSet::new(&Arc::new(Probe)))
        });
        registry.build("Probe", args.as_ref(), &Handle::default())?;
        let decoded = seen.lock().take().expect("the factory ran");
        Ok(decoded)
    }

    #[test]
    fn args_decode_into_the_plugins_type() {
        let args = |weight: i64, resources: &[&str]| ProbeArgs {
            weight,
            resources: resources.iter().map(|r| r.to_string()).collect(),
        };
        let cases = [
            ("absent: the defaults", None, args(1, &["cpu"])),
            ("null: the defaults", Some(serde_json::Value::Null), args(1, &["cpu"])),
            ("empty object: the defaults", Some(serde_json::json!({})), args(1, &["cpu"])),
            ("one field, the other defaulted", Some(serde_json::json!({"weight": 5})), args(5, &["cpu"])),
            (
                "every field",
                Some(serde_json::json!({"weight": 2, "resources": ["memory", "cpu"]})),
                args(2, &["memory", "cpu"]),
            ),
            (
                "apiVersion and kind are type metadata",
                Some(serde_json::json!({
                    "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "ProbeArgs", "weight": 3,
                })),
                args(3, &["cpu"]),
            ),
            ("unknown fields are ignored", Some(serde_json::json!({"weight": 4, "later": true})), args(4, &["cpu"])),
        ];
        for (name, raw, want) in cases {
            assert_eq!(probe(raw).expect(name), want, "{name}");
        }
    }

    #[test]
    fn bad_args_are_typed_errors_naming_the_plugin() {
        let cases = [
            ("wrong type", serde_json::json!({"weight": "heavy"}), "Args"),
            ("wrong shape", serde_json::json!(["weight", 3]), "Args"),
            ("wrong element type", serde_json::json!({"resources": [1]}), "Args"),
            ("refused by the factory", serde_json::json!({"weight": -1}), "Plugin"),
        ];
        for (name, raw, want) in cases {
            let err = probe(Some(raw)).expect_err(name);
            let kind = match &err {
                BuildError::Args { .. } => "Args",
                BuildError::Plugin { source: PluginError::InvalidArgument { field: "weight", .. }, .. } => "Plugin",
                other => panic!("{name}: {other:?}"),
            };
            assert_eq!(kind, want, "{name}: {err}");
            assert_eq!(err.plugin(), "Probe", "{name}");
            assert!(err.to_string().starts_with("plugin Probe: "), "{name}: {err}");
        }
    }

    #[test]
    fn unknown_plugin_is_a_typed_error() {
        for registry in
            [Registry::empty(), Registry::empty().with("Other", |_: NoArgs, _| Err(PluginError::other("x")))]
        {
            let err = registry.build("Nope", None, &Handle::default()).expect_err("Nope is not registered");
            assert!(matches!(&err, BuildError::UnknownPlugin(name) if name == "Nope"), "{err:?}");
            assert_eq!(err.to_string(), r#"plugin "Nope" is not registered"#);
        }
    }

    #[test]
    fn no_args_takes_any_args() {
        let registry = Registry::empty().with("Plain", |_: NoArgs, _| Ok(PluginSet::new(&Arc::new(Probe))));
        for raw in [None, Some(serde_json::json!({"defaultingType": "List"})), Some(serde_json::json!(7))] {
            assert!(registry.build("Plain", raw.as_ref(), &Handle::default()).is_ok(), "{raw:?}");
        }
    }

    #[test]
    fn later_registrations_replace_earlier_ones() {
        let mut registry = Registry::empty();
        registry.register("P", |_: NoArgs, _| Err(PluginError::other("first")));
        registry.register("P", |_: NoArgs, _| Err(PluginError::other("second")));
        let err = registry.build("P", None, &Handle::default()).expect_err("refused");
        assert_eq!(err.to_string(), "plugin P: second");
        assert_eq!(registry.names(), ["P"]);
    }
}
