//! RBAC against a cluster: the default roles, bindings made with kubectl,
//! the 403 upstream gives, `kubectl auth can-i` (with `--list`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use orchestra::testing::{Kubectl, TestCluster};
use orchestra_core::auth::TokenFile;

/// A cluster authorizing with RBAC alone, with the default roles, and the
/// bearer token `alice-token` of user alice (group `system:authenticated`).
async fn cluster() -> TestCluster {
    let tokens = TokenFile::parse("alice-token,alice,1,system:authenticated\n").unwrap();
    TestCluster::start_with(TestCluster::builder().authenticator(tokens).configure_api_server(|api| api.rbac())).await
}

/// Runs `args` until its success is `expected` (the authorizer sees a new
/// binding once its watch delivers it); returns the last output.
fn eventually(kubectl: &Kubectl, args: &[&str], expected: bool) -> orchestra::testing::KubectlOutput {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let output = kubectl.run(args);
        if output.success == expected || std::time::Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bindings_grant_in_their_namespace_and_can_i_tells() {
    let cluster = cluster().await;
    let admin = cluster.kubectl().await;
    let alice = cluster.kubectl_with_token("alice-token").await;

    // The admin (group system:masters) may do anything through cluster-admin.
    for args in [&["create", "namespace", "a"][..], &["create", "namespace", "b"], &["get", "nodes"]] {
        let output = admin.run(args);
        assert!(output.success, "{args:?}: {}", output.stderr);
    }
    assert_eq!(admin.run(&["auth", "can-i", "*", "*"]).stdout.trim(), "yes");

    // Without bindings: upstream's 403, no reason.
    let denied = alice.run(&["get", "pods", "-n", "a"]);
    assert!(!denied.success);
    assert!(
        denied.stderr.contains(
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"a\"\n"
        ),
        "{}",
        denied.stderr
    );
    // The default bindings: discovery and access reviews for authenticated users.
    assert!(alice.run(&["version"]).success);
    assert_eq!(alice.run(&["auth", "can-i", "list", "pods", "-n", "a"]).stdout.trim(), "no");

    // view in namespace a: read there only, and no writes.
    let bound = admin.run(&["create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice", "-n", "a"]);
    assert!(bound.success, "{}", bound.stderr);
    let listed = eventually(&alice, &["get", "pods", "-n", "a"], true);
    assert!(listed.success, "{}", listed.stderr);
    assert!(!alice.run(&["get", "pods", "-n", "b"]).success);
    assert!(!alice.run(&["get", "secrets", "-n", "a"]).success);
    let created = alice.run(&["create", "configmap", "c", "-n", "a"]);
    assert!(created.stderr.contains("cannot create resource \"configmaps\""), "{}", created.stderr);
    let cases = [
        (&["list", "pods", "-n", "a"][..], "yes"),
        (&["get", "pods/log", "-n", "a"], "yes"),
        (&["watch", "deployments.apps", "-n", "a"], "yes"),
        (&["list", "pods", "-n", "b"], "no"),
        (&["create", "pods", "-n", "a"], "no"),
        (&["list", "secrets", "-n", "a"], "no"),
        (&["list", "nodes"], "no"),
    ];
    for (args, answer) in cases {
        let output = alice.run(&[&["auth", "can-i"][..], args].concat());
        assert_eq!(output.stdout.trim(), answer, "can-i {args:?}: {}", output.stderr);
    }

    // can-i --list: the rules of view in a, and of the default bindings.
    let list = alice.run(&["auth", "can-i", "--list", "-n", "a"]);
    assert!(list.success, "{}", list.stderr);
    let lines: Vec<&str> = list.stdout.lines().collect();
    let row = |resource: &str| lines.iter().find(|l| l.split_whitespace().next() == Some(resource)).copied();
    assert!(row("pods").is_some_and(|l| l.contains("[get list watch]")), "{}", list.stdout);
    assert!(row("selfsubjectaccessreviews.authorization.k8s.io").is_some(), "{}", list.stdout);
    assert!(lines.iter().any(|l| l.contains("[/api/*]")), "{}", list.stdout);
    assert!(row("secrets").is_none(), "{}", list.stdout);
    let elsewhere = alice.run(&["auth", "can-i", "--list", "-n", "b"]);
    assert!(!elsewhere.stdout.lines().any(|l| l.starts_with("pods ")), "{}", elsewhere.stdout);

    // The binding deleted: no more reads.
    assert!(admin.run(&["delete", "rolebinding", "alice-view", "-n", "a"]).success);
    let refused = eventually(&alice, &["get", "pods", "-n", "a"], false);
    assert!(!refused.success);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_process_clients_and_roles_of_a_namespace() {
    let cluster = cluster().await;
    // In-process identities are authorized by RBAC too.
    let api: Api<Pod> = Api::namespaced(cluster.client(), "default");
    api.list(&ListParams::default()).await.unwrap();
    let scheduler: Api<Pod> = Api::all(cluster.client_as("system:kube-scheduler", &["system:authenticated"]));
    scheduler.list(&ListParams::default()).await.unwrap();
    let carol: Api<Pod> = Api::namespaced(cluster.client_as("carol", &["system:authenticated"]), "default");
    let error = carol.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(e) if e.code == 403), "{error}");

    // A Role of the namespace bound to carol's group.
    let admin = cluster.kubectl().await;
    let role = admin.run(&["create", "role", "reader", "--verb=get,list", "--resource=pods", "-n", "default"]);
    assert!(role.success, "{}", role.stderr);
    let bound =
        admin.run(&["create", "rolebinding", "r", "--role=reader", "--group=system:authenticated", "-n", "default"]);
    assert!(bound.success, "{}", bound.stderr);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while carol.list(&ListParams::default()).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the RoleBinding grants list");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kube_system: Api<Pod> = Api::namespaced(cluster.client_as("carol", &["system:authenticated"]), "kube-system");
    assert!(kube_system.list(&ListParams::default()).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn roles_and_bindings_grant_no_more_than_their_writer_holds() {
    let cluster = cluster().await;
    let admin = cluster.kubectl().await;
    let alice = cluster.kubectl_with_token("alice-token").await;
    assert!(admin.run(&["create", "namespace", "a"]).success);
    let bound = admin.run(&["create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", "a"]);
    assert!(bound.success, "{}", bound.stderr);
    let whoami = eventually(&alice, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], true);
    assert_eq!(whoami.stdout, "alice", "{}", whoami.stderr);
    eventually(&alice, &["get", "roles", "-n", "a"], true);

    // What alice holds in a she may grant there; nodes she may not.
    let held = alice.run(&["create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", "a"]);
    assert!(held.success, "{}", held.stderr);
    let refused = alice.run(&["create", "role", "node-reader", "--verb=get", "--resource=nodes", "-n", "a"]);
    assert!(!refused.success);
    assert!(
        refused.stderr.contains(
            "roles.rbac.authorization.k8s.io \"node-reader\" is forbidden: user \"alice\" \
             (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}"
        ),
        "{}",
        refused.stderr
    );
    assert!(!alice.run(&["create", "role", "r", "--verb=get", "--resource=pods", "-n", "b"]).success);

    // Bindings: edit is part of admin; cluster-admin is not.
    let edit = alice.run(&["create", "rolebinding", "bob-edit", "--clusterrole=edit", "--user=bob", "-n", "a"]);
    assert!(edit.success, "{}", edit.stderr);
    let root = alice.run(&["create", "rolebinding", "bob-root", "--clusterrole=cluster-admin", "--user=bob", "-n", "a"]);
    assert!(root.stderr.contains("is attempting to grant RBAC permissions not currently held"), "{}", root.stderr);

    // With `bind` on cluster-admin granted, the binding is allowed.
    let binder = admin.run(&[
        "create",
        "clusterrole",
        "bind-cluster-admin",
        "--verb=bind",
        "--resource=clusterroles.rbac.authorization.k8s.io",
        "--resource-name=cluster-admin",
    ]);
    assert!(binder.success, "{}", binder.stderr);
    let granted = admin.run(&["create", "rolebinding", "alice-binds", "--clusterrole=bind-cluster-admin", "--user=alice", "-n", "a"]);
    assert!(granted.success, "{}", granted.stderr);
    let root = eventually(
        &alice,
        &["create", "rolebinding", "bob-root", "--clusterrole=cluster-admin", "--user=bob", "-n", "a"],
        true,
    );
    assert!(root.success, "{}", root.stderr);
}
