//! The `embed_in_axum` example: the application's routes and the API under
//! `/k8s` on one listener, with the scheduler, controllers and nodes beside.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/embed_in_axum.rs"]
mod program;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_through_the_nested_api_and_the_app_still_answers() {
    let outcome = program::run().await.expect("the example runs");
    assert_eq!(outcome.hello, "hello from the application");
    assert_eq!(outcome.pod_nodes.len(), 2, "{outcome:?}");
    assert!(outcome.pod_nodes.iter().all(|n| n.starts_with("orchestra-")), "{outcome:?}");
}
