//! `orchestra apiserver`: ready line, admin kubeconfig, kubectl over HTTPS,
//! clean stop on SIGTERM, and a restart that keeps every object.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::support::{kubectl, terminate};

/// Starts `orchestra apiserver` on a free loopback port and waits for its
/// `ready` line.
fn start(data_dir: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orchestra"))
        .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the orchestra binary starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = lines.next().expect("a line").expect("readable");
    assert!(line.contains("ready"), "first line: {line}");
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

#[test]
fn apiserver_serves_kubectl_over_https_and_keeps_objects_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    for file in ["pki/ca.crt", "pki/ca.key", "pki/apiserver.crt", "pki/admin.crt", "admin.kubeconfig", "store"] {
        assert!(dir.path().join(file).exists(), "{file} was created");
    }
    let (ok, out, err) = kubectl(dir.path(), &["create", "namespace", "team"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        kubectl(dir.path(), &["-n", "team", "create", "configmap", "settings", "--from-literal=mode=fast"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(dir.path(), &["get", "namespaces"]);
    assert!(ok && out.contains("team") && out.contains("Active"), "{out}{err}");
    // A service account token (`kubectl create token`) authenticates as
    // its service account.
    let (ok, out, err) = kubectl(dir.path(), &["-n", "team", "create", "serviceaccount", "robot"]);
    assert!(ok, "{out}{err}");
    let (ok, token, err) = kubectl(dir.path(), &["-n", "team", "create", "token", "robot", "--duration=20m"]);
    assert!(ok && token.trim().split('.').count() == 3, "{token}{err}");
    let token = token.trim().to_owned();
    assert_eq!(whoami(dir.path(), &token), Ok("system:serviceaccount:team:robot".to_owned()));
    terminate(server);

    // Same data directory: same CA (the kubeconfig still works, on a new
    // port once rewritten) and every object.
    let ca_before = std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap();
    let server = start(dir.path());
    assert_eq!(std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap(), ca_before);
    let (ok, out, err) =
        kubectl(dir.path(), &["-n", "team", "get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]);
    assert!(ok && out == "fast", "{out}{err}");
    // The signing key is kept too: the token still works, until its
    // service account is deleted.
    assert_eq!(whoami(dir.path(), &token), Ok("system:serviceaccount:team:robot".to_owned()));
    let (ok, out, err) = kubectl(dir.path(), &["-n", "team", "delete", "serviceaccount", "robot"]);
    assert!(ok, "{out}{err}");
    let refused = whoami(dir.path(), &token).unwrap_err();
    assert!(refused.contains("Unauthorized"), "{refused}");
    terminate(server);
}

/// `kubectl auth whoami` with nothing but `token` (no client certificate):
/// the user name, or kubectl's error.
fn whoami(dir: &Path, token: &str) -> Result<String, String> {
    let (ok, server, err) = kubectl(dir, &["config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    assert!(ok, "{err}");
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig=/dev/null")
        .arg(format!("--cache-dir={}", dir.join("kubectl-cache").display()))
        .arg(format!("--server={server}"))
        .arg(format!("--certificate-authority={}", dir.join("pki/ca.crt").display()))
        .arg(format!("--token={token}"))
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .output()
        .unwrap();
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}
