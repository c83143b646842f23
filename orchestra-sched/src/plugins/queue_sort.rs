//! PrioritySort: higher priority first, then earlier queue time.

use std::sync::Arc;

use crate::framework::{Handle, Plugin, QueueSort};
use crate::queue::QueuedPodInfo;
use crate::registry::{NoArgs, PluginError, PluginSet};

/// The plugin's name.
pub const NAME: &str = "PrioritySort";

/// Orders the active queue by `spec.priority` (descending), then by the
/// time the pod entered the queue.
#[derive(Debug, Default)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl QueueSort for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.priority(), b.priority());
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

/// The plugin's arguments: it has no options.
pub type Args = NoArgs;

/// Builds the plugin, as registered under [`NAME`].
pub fn new(_: Args, _: &Handle) -> Result<PluginSet, PluginError> {
    let p = Arc::new(PrioritySort);
    Ok(PluginSet::new(&p).queue_sort(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{PodBuilder, pod_info};

    #[test]
    fn order() {
        let q = |prio: i32| QueuedPodInfo::new(Arc::new(pod_info(PodBuilder::new("p").priority(prio).build())));
        let (low, high) = (q(1), q(10));
        let later_high = q(10);
        for (a, b, want) in
            [(&high, &low, true), (&low, &high, false), (&high, &later_high, true), (&later_high, &high, false)]
        {
            assert_eq!(PrioritySort.less(a, b), want);
        }
    }
}
