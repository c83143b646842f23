//! The `admission_and_authz` example: its plugin and authorizer in the
//! chains of a running control plane.

#[allow(dead_code)] // its `main` is the example's entry point, not called here
#[path = "../../examples/admission_and_authz.rs"]
mod program;

#[tokio::test]
async fn the_plugin_mutates_and_refuses_and_the_authorizer_denies_intern_writes() {
    let outcome = program::run().await.expect("the example runs");
    assert_eq!(outcome.created_by.as_deref(), Some("system.admin"), "{outcome:?}");
    assert_eq!(outcome.intern_create, 403, "{outcome:?}");
    assert!(outcome.intern_list_ok, "{outcome:?}");
    assert_eq!(outcome.password, 422, "{outcome:?}");
}
