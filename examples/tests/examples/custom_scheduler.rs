//! The `custom_scheduler` example: its plugins, and a run that places pods
//! by them.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/custom_scheduler.rs"]
mod program;

use std::collections::HashMap;

#[tokio::test]
async fn gpu_pods_land_on_gpu_nodes_and_all_prefer_fast_ones() {
    let placed: HashMap<String, String> = program::run().await.expect("the example runs").into_iter().collect();
    // GpuFilter keeps train-* on GPU nodes, PreferLabel picks the fast one.
    assert_eq!(placed["train-0"], "gpu-fast", "{placed:?}");
    assert_eq!(placed["train-1"], "gpu-fast", "{placed:?}");
    // web-* may go anywhere; PreferLabel sends them to fast nodes.
    for web in ["web-0", "web-1"] {
        assert!(placed[web].ends_with("-fast"), "{placed:?}");
    }
}

#[test]
fn prefer_label_reads_its_arguments() {
    let registry = program::registry();
    let handle = orchestra_sched::framework::Handle::default();
    for (args, ok) in [
        (Some(serde_json::json!({"label": "a=b"})), true),
        (Some(serde_json::json!({"label": "no-equals"})), false),
        (Some(serde_json::json!({"label": 3})), false),
        (Some(serde_json::json!({})), false),
        (None, false),
    ] {
        assert_eq!(registry.build(program::PreferLabel::NAME, args.as_ref(), &handle).is_ok(), ok, "{args:?}");
    }
    // The profile builds from the registry, with both plugins in place.
    let profile = orchestra_sched::profile::Profile::build(
        &program::config().profiles[0],
        &program::registry(),
        &orchestra_sched::framework::Handle::default(),
    )
    .expect("the custom profile builds");
    let filters: Vec<&str> = profile.filter.iter().map(|f| f.name()).collect();
    assert!(filters.contains(&program::GpuFilter::NAME), "{filters:?}");
    let scores: Vec<(&str, i64)> = profile.score.iter().map(|(s, w)| (s.name(), *w)).collect();
    assert!(scores.contains(&(program::PreferLabel::NAME, 10)), "{scores:?}");
}
