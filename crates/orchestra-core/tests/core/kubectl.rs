//! The installed kubectl against the API server over HTTP on loopback.

use std::path::Path;
use std::process::Command;

use super::support;

/// Runs kubectl with a throwaway kubeconfig and cache; returns (success, stdout, stderr).
fn kubectl(dir: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut command = Command::new("kubectl");
    command
        .arg(format!("--kubeconfig={}", dir.join("kubeconfig").display()))
        .arg(format!("--cache-dir={}", dir.join("cache").display()))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("kubectl is installed");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: c
    image: nginx:1.27
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_server() {
    let server = support::server().await;
    let address = support::listen(&server).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{address}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: ctx\n"
        ),
    )
    .unwrap();
    let dir = dir.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| kubectl(&dir, args, None);

        let (ok, out, err) = run(&["version", "-o", "json"]);
        assert!(ok, "{err}");
        let version: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(version["serverVersion"]["minor"], "33");

        let (ok, out, err) = run(&["api-resources"]);
        assert!(ok, "{err}");
        for expected in [
            "pods",
            "deployments",
            "customresourcedefinitions",
            "leases",
            "clusterroles",
        ] {
            assert!(
                out.contains(expected),
                "api-resources lacks {expected}:\n{out}"
            );
        }

        // OpenAPI is not served yet: client-side validation is off.
        let (ok, out, err) = kubectl(&dir, &["create", "--validate=false", "-f", "-"], Some(POD));
        assert!(ok, "{err}");
        assert!(out.contains("pod/web created"), "{out}");
        let (ok, _, err) = kubectl(&dir, &["create", "--validate=false", "-f", "-"], Some(POD));
        assert!(!ok);
        assert!(
            err.contains("Error from server (AlreadyExists)")
                && err.contains("pods \"web\" already exists"),
            "{err}"
        );

        let (ok, out, err) = run(&["get", "pods"]);
        assert!(ok, "{err}");
        assert!(out.contains("web"), "{out}");
        let (ok, out, err) = run(&["get", "pods", "-A", "-l", "app=web", "-o", "name"]);
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "pod/web");
        let (ok, out, err) = run(&["get", "pod", "web", "-o", "yaml"]);
        assert!(ok, "{err}");
        assert!(
            out.contains("image: nginx:1.27") && out.contains("uid:"),
            "{out}"
        );

        let (ok, out, err) = run(&["label", "pod", "web", "tier=front"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod/web labeled"), "{out}");
        let (ok, out, err) = run(&["annotate", "pod", "web", "note=hello"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod/web annotated"), "{out}");
        let (ok, out, _) = run(&[
            "get",
            "pods",
            "-l",
            "tier=front",
            "-o",
            "jsonpath={.items[*].metadata.annotations.note}",
        ]);
        assert!(ok);
        assert_eq!(out, "hello");

        let (ok, _, err) = run(&["get", "pod", "nope"]);
        assert!(!ok);
        assert!(
            err.contains("Error from server (NotFound): pods \"nope\" not found"),
            "{err}"
        );

        let (ok, out, err) = run(&["delete", "pod", "web"]);
        assert!(ok, "{err}");
        assert!(out.contains("pod \"web\" deleted"), "{out}");
        let (ok, out, _) = run(&["get", "pods", "-o", "name"]);
        assert!(ok);
        assert!(out.trim().is_empty(), "{out}");

        let (ok, out, err) = run(&["get", "namespaces", "-o", "name"]);
        assert!(ok, "{err}");
        assert!(out.contains("namespace/kube-system"), "{out}");
    })
    .await
    .unwrap();
}
