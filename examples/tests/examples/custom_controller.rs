//! The `custom_controller` example: its controller publishes a Website
//! and cleans up after it in a running control plane, and kubectl sees
//! what it wrote.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/custom_controller.rs"]
mod program;

use std::time::Duration;

use orchestra::testing::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_publishes_and_cleans_up() {
    let seen = program::run().await.expect("the example runs");
    assert_eq!(
        seen,
        [
            "website home published as ConfigMap home-html: <h1>Hello</h1>",
            "website home deleted, its ConfigMap with it",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_status_and_an_empty_page_waits_for_a_fix() {
    let builder = TestCluster::builder()
        .configure_api_server(|server| server.register(program::resource()))
        .controller("website", program::run_controller);
    let cluster = TestCluster::start_with(builder).await;
    let kubectl = cluster.kubectl().await;
    let manifest = "apiVersion: example.com/v1\nkind: Website\nmetadata:\n  name: blank\nspec:\n  html: ''\n";
    let created = kubectl.run_with_input(&["apply", "-f", "-"], Some(manifest));
    assert!(created.success, "{created:?}");
    // The controller takes the Website in (its finalizer), then refuses the
    // empty page: no status, no ConfigMap, until the page is fixed.
    let finalizers = || kubectl.run(&["get", "website", "blank", "-o", "jsonpath={.metadata.finalizers}"]);
    for _ in 0..100 {
        if finalizers().stdout.contains(program::FINALIZER) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = kubectl.run(&["get", "website", "blank", "-o", "jsonpath={.status.configMap}"]);
    assert!(status.success && status.stdout.is_empty(), "{status:?}");
    assert!(!kubectl.run(&["get", "configmap", "blank-html"]).success);
    let fixed =
        kubectl.run(&["patch", "website", "blank", "--type=merge", "-p", r#"{"spec":{"html":"<p>fixed</p>"}}"#]);
    assert!(fixed.success, "{fixed:?}");
    let mut last = None;
    for _ in 0..100 {
        let page = kubectl.run(&["get", "configmap", "blank-html", "-o", "jsonpath={.data.index\\.html}"]);
        if page.success && page.stdout == "<p>fixed</p>" {
            return;
        }
        last = Some(page);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the fixed page was not published: {last:?}");
}
