//! DefaultBinder: binds through the `pods/binding` subresource.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::framework::*;
use crate::node_info::PodInfo;
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "DefaultBinder";

/// POSTs a Binding to `pods/{name}/binding`.
#[derive(Clone)]
pub struct DefaultBinder {
    client: Option<kube::Client>,
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// The Binding object for `pod` to `node`.
pub fn binding(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.into()), ..Default::default() },
    }
}

#[async_trait::async_trait]
impl Bind for DefaultBinder {
    async fn bind(&self, _: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(client) = self.client.clone() else { return Status::error("no API client") };
        let api: Api<Pod> = Api::namespaced(client, pod.namespace());
        let name = pod.pod.metadata.name.clone().unwrap_or_default();
        let body = binding(&pod.pod, node);
        match api
            .create_subresource::<Binding, serde_json::Value>("binding", &name, &PostParams::default(), &body)
            .await
        {
            Ok(_) => Status::success(),
            Err(kube::Error::Api(s)) if s.code == 404 => Status::unresolvable(format!("pod not found: {}", s.message)),
            Err(e) => Status::error(e.to_string()),
        }
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, handle: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(DefaultBinder { client: handle.client.clone() });
    Ok(PluginSet::new(&p).bind(&p))
}
