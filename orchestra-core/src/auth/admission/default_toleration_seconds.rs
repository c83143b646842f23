//! DefaultTolerationSeconds: new pods tolerate an unready or unreachable
//! node for a while before they are evicted.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::api::ApiError;

/// The taint of a node whose Ready condition is False.
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The taint of a node whose Ready condition is Unknown.
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// The admission plugin that gives new pods upstream's default
/// tolerations: `node.kubernetes.io/not-ready` and
/// `node.kubernetes.io/unreachable`, operator `Exists`, effect `NoExecute`,
/// for 300 seconds each unless set otherwise (upstream's
/// `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`). A pod that already
/// tolerates a taint (a toleration with its key or no key, and effect
/// `NoExecute` or none) keeps its own. Pod creates only.
///
/// ```
/// use orchestra_core::auth::admission::{AdmissionChain, DefaultTolerationSeconds};
///
/// let plugin = DefaultTolerationSeconds::new().not_ready_seconds(60).unreachable_seconds(120);
/// let chain = AdmissionChain::new().with(plugin);
/// assert_eq!(chain.names().collect::<Vec<_>>(), [DefaultTolerationSeconds::NAME]);
/// ```
#[derive(Debug, Clone)]
pub struct DefaultTolerationSeconds {
    /// The tolerations pods get, by taint key: built once, cloned into each
    /// pod (a clone costs less than building the JSON object again).
    defaults: [(&'static str, Value); 2],
}

impl Default for DefaultTolerationSeconds {
    fn default() -> Self {
        DefaultTolerationSeconds {
            defaults: [(NOT_READY, toleration(NOT_READY, 300)), (UNREACHABLE, toleration(UNREACHABLE, 300))],
        }
    }
}

/// A toleration of the `NoExecute` taint `key` for `seconds`.
fn toleration(key: &str, seconds: u64) -> Value {
    json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds})
}

impl DefaultTolerationSeconds {
    /// The plugin's name.
    pub const NAME: &'static str = "DefaultTolerationSeconds";

    /// The plugin with upstream's defaults: 300 seconds for both taints.
    pub fn new() -> DefaultTolerationSeconds {
        DefaultTolerationSeconds::default()
    }

    /// How long pods tolerate `node.kubernetes.io/not-ready`.
    pub fn not_ready_seconds(mut self, seconds: u64) -> DefaultTolerationSeconds {
        self.defaults[0].1 = toleration(NOT_READY, seconds);
        self
    }

    /// How long pods tolerate `node.kubernetes.io/unreachable`.
    pub fn unreachable_seconds(mut self, seconds: u64) -> DefaultTolerationSeconds {
        self.defaults[1].1 = toleration(UNREACHABLE, seconds);
        self
    }
}

/// Whether `toleration` tolerates the `NoExecute` taint `key`.
fn tolerates(toleration: &Value, key: &str) -> bool {
    let key_matches = matches!(toleration["key"].as_str(), None | Some("")) || toleration["key"] == key;
    let effect_matches = matches!(toleration["effect"].as_str(), None | Some("") | Some("NoExecute"));
    key_matches && effect_matches
}

#[async_trait]
impl AdmissionPlugin for DefaultTolerationSeconds {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes("", "pods") {
            return Ok(());
        }
        let Some(pod) = request.object.as_mut() else { return Ok(()) };
        let tolerations = &mut pod["spec"]["tolerations"];
        if !tolerations.is_array() {
            *tolerations = Value::Array(Vec::new());
        }
        let tolerations = tolerations.as_array_mut().expect("made an array");
        for (key, default) in &self.defaults {
            if !tolerations.iter().any(|t| tolerates(t, key)) {
                tolerations.push(default.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::auth::admission::testing::{admit, pods};

    #[test]
    fn pods_get_the_tolerations_they_lack() {
        let default = |key: &str, seconds: u64| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds});
        let plugin = DefaultTolerationSeconds::new().unreachable_seconds(60);
        let own = json!({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5});
        let everything = json!({"operator": "Exists"});
        let other_effect = json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"});
        #[rustfmt::skip]
        let cases = [
            (Value::Null, json!([default(NOT_READY, 300), default(UNREACHABLE, 60)])),
            (json!([own.clone()]), json!([own, default(UNREACHABLE, 60)])),
            // A toleration without a key tolerates every taint.
            (json!([everything.clone()]), json!([everything])),
            (json!([other_effect.clone()]), json!([other_effect, default(NOT_READY, 300), default(UNREACHABLE, 60)])),
        ];
        let user = UserInfo::anonymous();
        for (tolerations, expected) in cases {
            let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
            if !tolerations.is_null() {
                pod["spec"]["tolerations"] = tolerations.clone();
            }
            let (admitted, _) = admit(&plugin, Operation::Create, &pods(), Some("default"), &user, Some(pod), None);
            assert_eq!(admitted.unwrap().unwrap()["spec"]["tolerations"], expected, "{tolerations}");
        }
        let old = json!({"metadata": {"name": "p"}, "spec": {}});
        let (updated, _) =
            admit(&plugin, Operation::Update, &pods(), Some("default"), &user, Some(old.clone()), Some(&old));
        assert_eq!(updated.unwrap().unwrap(), old, "updates are left alone");
    }
}
