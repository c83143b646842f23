//! ImageLocality: prefers nodes that already hold the pod's images,
//! weighted by how widely the image is spread.

use std::sync::Arc;

use crate::framework::*;
use crate::node_info::{NodeInfo, PodInfo};
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Image spread per node count and the pod's images, written in PreFilter.
#[derive(Debug, Clone)]
struct Spread {
    total_nodes: usize,
    image_nodes: Arc<std::collections::HashMap<String, usize>>,
    /// Each container's image: normalised, and as written.
    images: Vec<(String, String)>,
    /// Containers (init containers included).
    containers: i64,
}

/// The plugin.
#[derive(Debug, Default)]
pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }
}

/// `nginx` → `nginx:latest`; names with a tag or digest stay.
pub fn normalized_image_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') { name.to_owned() } else { format!("{name}:latest") }
}

impl PreFilter for ImageLocality {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &crate::snapshot::Snapshot,
    ) -> (PreFilterResult, Status) {
        // Not an upstream PreFilter: records the image spread of the snapshot
        // and the pod's images once, for Score to read on every node.
        let mut images = Vec::new();
        let mut containers = 0;
        if let Some(spec) = pod.pod.spec.as_ref() {
            for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
                containers += 1;
                if let Some(image) = c.image.as_deref() {
                    images.push((normalized_image_name(image), image.to_owned()));
                }
            }
        }
        state.write(
            NAME,
            Spread { total_nodes: snapshot.len(), image_nodes: snapshot.image_nodes.clone(), images, containers },
        );
        (None, Status::success())
    }
}

impl Score for ImageLocality {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(spread) = state.read::<Spread>(NAME) else { return Ok(0) };
        let mut sum = 0i64;
        if !node.images.is_empty() {
            for (name, image) in &spread.images {
                if let Some(state) = node.images.get(name).or_else(|| node.images.get(image)) {
                    let holders =
                        spread.image_nodes.get(name).or_else(|| spread.image_nodes.get(image)).copied().unwrap_or(1);
                    sum += (state.size as f64 * holders as f64 / spread.total_nodes.max(1) as f64) as i64;
                }
            }
        }
        let max = MAX_CONTAINER_THRESHOLD * spread.containers.max(1);
        let sum = sum.clamp(MIN_THRESHOLD, max);
        Ok(MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD))
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(ImageLocality);
    Ok(PluginSet::new(&p).pre_filter(&p).score(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Snapshot;
    use crate::testing::{NodeBuilder, PodBuilder, node_info, pod_info};

    #[test]
    fn table() {
        let pod = pod_info(
            PodBuilder::new("p").with(|p| p.spec.as_mut().unwrap().containers[0].image = Some("big".into())).build(),
        );
        let snapshot = Snapshot::from_nodes(vec![
            node_info(NodeBuilder::new("has").image("big:latest", 500 * MB).build(), vec![]),
            node_info(NodeBuilder::new("also").image("big:latest", 500 * MB).build(), vec![]),
            node_info(NodeBuilder::new("none").build(), vec![]),
            node_info(NodeBuilder::new("small").image("big:latest", 10 * MB).build(), vec![]),
        ]);
        let mut state = CycleState::new();
        ImageLocality.pre_filter(&mut state, &pod, &snapshot);
        let got: Vec<i64> = snapshot.nodes.iter().map(|n| ImageLocality.score(&state, &pod, n).unwrap()).collect();
        // 500MB * 3/4 = 375MB -> (375-23)/(1000-23) = 36
        assert_eq!(got, [36, 36, 0, 0]);
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("reg:5000/nginx"), "reg:5000/nginx:latest");
    }
}
