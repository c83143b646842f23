//! The `custom_kind` example: a Rust-typed kind served to kube-rs and to
//! the installed kubectl.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/custom_kind.rs"]
mod program;

use orchestra::testing::TestCluster;

#[tokio::test]
async fn the_typed_client_creates_and_updates_status() {
    let stored = program::run().await.expect("the example runs");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].spec.database, "orders");
    assert_eq!(stored[0].status.as_ref().and_then(|s| s.last_success.as_deref()), Some("2026-01-01T03:00:00Z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_lists_and_explains_the_kind() {
    let cluster =
        TestCluster::start_with(TestCluster::builder().configure_api_server(|s| s.register(program::resource()))).await;
    let kubectl = cluster.kubectl().await;
    let manifest = "apiVersion: example.com/v1\nkind: Backup\nmetadata:\n  name: hourly\nspec:\n  database: users\n  schedule: '0 * * * *'\n  retain: 24\n";
    let kubectl_apply = kubectl.run_with_input(&["apply", "-f", "-"], Some(manifest));
    assert!(kubectl_apply.success, "{kubectl_apply:?}");
    assert!(kubectl_apply.stdout.contains("backup.example.com/hourly created"), "{kubectl_apply:?}");

    let get = kubectl.run(&["get", "bk"]);
    assert!(get.success && get.stdout.contains("hourly"), "{get:?}");

    let explain = kubectl.run(&["explain", "backup.spec"]);
    assert!(explain.success && explain.stdout.contains("database") && explain.stdout.contains("retain"), "{explain:?}");

    // Strict decoding: a mistyped field is refused, nothing is stored.
    let bad = manifest.replace("hourly", "bad").replace("retain: 24", "retain: many");
    let refused = kubectl.run_with_input(&["create", "-f", "-"], Some(&bad));
    assert!(!refused.success, "{refused:?}");
    let missing = kubectl.run(&["get", "backup", "bad"]);
    assert!(!missing.success && missing.stderr.contains("NotFound"), "{missing:?}");
}
