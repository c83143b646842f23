//! The plugin registry: factories by name.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::*;
use crate::plugins;

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

/// Builds a plugin instance from its arguments (JSON; `None` when the
/// configuration gave none).
pub type Factory = Arc<dyn Fn(Option<&serde_json::Value>, &Handle) -> Result<PluginSet, String> + Send + Sync>;

/// Plugin factories by name. `Registry::default()` holds every built-in plugin.
#[derive(Clone)]
pub struct Registry {
    factories: HashMap<String, Factory>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut r = Registry::empty();
        plugins::register_all(&mut r);
        r
    }
}

impl Registry {
    /// A registry with no plugins.
    pub fn empty() -> Registry {
        Registry { factories: HashMap::new() }
    }
    /// Registers (or replaces) a factory.
    pub fn register(
        &mut self,
        name: &str,
        factory: impl Fn(Option<&serde_json::Value>, &Handle) -> Result<PluginSet, String> + Send + Sync + 'static,
    ) -> &mut Self {
        self.factories.insert(name.to_owned(), Arc::new(factory));
        self
    }
    /// Builder-style [`register`](Self::register).
    pub fn with(
        mut self,
        name: &str,
        factory: impl Fn(Option<&serde_json::Value>, &Handle) -> Result<PluginSet, String> + Send + Sync + 'static,
    ) -> Self {
        self.register(name, factory);
        self
    }
    /// Builds `name`; None when not registered.
    pub fn build(
        &self,
        name: &str,
        args: Option<&serde_json::Value>,
        handle: &Handle,
    ) -> Option<Result<PluginSet, String>> {
        self.factories.get(name).map(|f| f(args, handle))
    }
    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }
    /// Registered names.
    pub fn names(&self) -> Vec<&str> {
        self.factories.keys().map(String::as_str).collect()
    }
}
