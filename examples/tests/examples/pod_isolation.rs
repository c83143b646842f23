//! `orchestra up` keeps pods from the cluster's secrets: a pod running as
//! root cannot read the CA key in the data directory (the process runtime
//! hides it), runs with `no_new_privs`, and PodSecurity's default
//! `baseline` level refuses a hostPath volume unless the namespace is
//! labelled privileged.

use std::time::Duration;

use orchestra::testing::Kubectl;

use super::support::eventually;
use super::up::start;

/// A pod that runs as root and looks for the CA key: its uid, whether it
/// read the key, what it sees of the data directory, and its no_new_privs
/// flag.
const THIEF: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: thief, namespace: demo}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 0}
  containers:
  - name: thief
    image: busybox
    command:
    - sh
    - -c
    - |
      echo "uid $(id -u)"
      if cat "DATA/pki/ca.key" >/dev/null 2>&1; then echo "ca-key READ"; else echo "ca-key refused"; fi
      echo visible $(ls -A "DATA")
      echo "$(grep NoNewPrivs /proc/self/status | tr -d '\t')"
      echo done
      sleep 3600
"#;

const HOST_PATH: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hostpath, namespace: demo}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "sleep 3600"]
    volumeMounts: [{name: host, mountPath: /host}]
  volumes:
  - name: host
    hostPath: {path: /}
"#;

/// Root with `runAsNonRoot`: the node refuses to create the container.
const NON_ROOT: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: non-root, namespace: demo}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "sleep 3600"]
    securityContext: {runAsUser: 0}
"#;

/// Why this machine cannot isolate pods, if it cannot: the process
/// runtime needs root (mount namespaces, user switches) and setpriv.
fn cannot_isolate() -> Option<String> {
    let uid = std::process::Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    let setpriv = std::process::Command::new("setpriv").arg("--version").output();
    if !setpriv.is_ok_and(|out| out.status.success()) {
        return Some("no setpriv (util-linux)".into());
    }
    None
}

#[test]
fn pods_cannot_read_the_cluster_secrets() {
    if let Some(why) = cannot_isolate() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let kubectl = Kubectl::with_kubeconfig(data.join("admin.kubeconfig"));
    let cluster = start(&data, 1);
    assert!(data.join("pki/ca.key").exists(), "the cluster keeps its CA key in its data directory");

    let (ok, out, err) = kubectl.run(&["create", "namespace", "demo"]).into_parts();
    assert!(ok, "{out}{err}");
    let thief = THIEF.replace("DATA", &data.display().to_string());
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&thief)).into_parts();
    assert!(ok, "{out}{err}");
    let logs = eventually("the thief's report", Duration::from_secs(90), || {
        let (ok, out, err) = kubectl.run(&["-n", "demo", "logs", "thief"]).into_parts();
        if ok && out.contains("done") { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    let lines: Vec<&str> = logs.lines().collect();
    // Of the data directory, only the way to the pod's own working
    // directory (under the node's state) is left.
    assert_eq!(lines, ["uid 0", "ca-key refused", "visible nodes", "NoNewPrivs:1", "done"], "{logs}");

    // runAsNonRoot is kept: a root container is refused by the node.
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(NON_ROOT)).into_parts();
    assert!(ok, "{out}{err}");
    let waiting = eventually("CreateContainerConfigError", Duration::from_secs(60), || {
        let (ok, out, err) = kubectl
            .run(&[
                "-n",
                "demo",
                "get",
                "pod",
                "non-root",
                "-o",
                "jsonpath={.status.containerStatuses[0].state.waiting}",
            ])
            .into_parts();
        if ok && out.contains("CreateContainerConfigError") { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    assert!(waiting.contains("container's runAsUser breaks non-root policy (pod: \\\"non-root_demo("), "{waiting}");

    // hostPath: refused in a namespace without labels...
    let refused = kubectl.run_with_input(&["apply", "-f", "-"], Some(HOST_PATH));
    assert!(!refused.success, "{}", refused.stdout);
    assert!(
        refused.stderr.contains(
            r#"pods "hostpath" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "host")"#
        ),
        "{}",
        refused.stderr
    );
    // ...allowed where the administrator says so.
    let (ok, out, err) =
        kubectl.run(&["label", "namespace", "demo", "pod-security.kubernetes.io/enforce=privileged"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(HOST_PATH)).into_parts();
    assert!(ok, "{out}{err}");
    cluster.stop();
}
