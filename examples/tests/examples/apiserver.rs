//! `orchestra apiserver`: ready line, admin kubeconfig, kubectl over HTTPS,
//! PodSecurity's level, clean stop on SIGTERM, and a restart that keeps
//! every object.

use std::process::Command;

use orchestra::testing::Kubectl;

use super::support::apiserver;

/// A pod the `baseline` Pod Security Standard refuses.
const PRIVILEGED_POD: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": "team"},
  "spec": {"containers": [{"name": "c", "image": "orchestra/echo", "securityContext": {"privileged": true}}]}}"#;

#[test]
fn apiserver_serves_kubectl_over_https_and_keeps_objects_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let admin = Kubectl::with_kubeconfig(dir.path().join("admin.kubeconfig"));
    let server = apiserver(dir.path(), &[]);
    for file in ["pki/ca.crt", "pki/ca.key", "pki/apiserver.crt", "pki/admin.crt", "admin.kubeconfig", "store"] {
        assert!(dir.path().join(file).exists(), "{file} was created");
    }
    let (ok, out, err) = admin.run(&["create", "namespace", "team"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        admin.run(&["-n", "team", "create", "configmap", "settings", "--from-literal=mode=fast"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = admin.run(&["get", "namespaces"]).into_parts();
    assert!(ok && out.contains("team") && out.contains("Active"), "{out}{err}");
    // PodSecurity enforces `baseline` by default: a privileged pod is refused.
    let (ok, out, err) = admin.run_with_input(&["create", "-f", "-"], Some(PRIVILEGED_POD)).into_parts();
    assert!(!ok && err.contains("violates PodSecurity \"baseline:"), "{out}{err}");
    // A service account token (`kubectl create token`) authenticates as
    // its service account.
    let (ok, out, err) = admin.run(&["-n", "team", "create", "serviceaccount", "robot"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, token, err) = admin.run(&["-n", "team", "create", "token", "robot", "--duration=20m"]).into_parts();
    assert!(ok && token.trim().split('.').count() == 3, "{token}{err}");
    let token = token.trim().to_owned();
    assert_eq!(whoami(&admin, &token), Ok("system:serviceaccount:team:robot".to_owned()));
    server.stop();

    // Same data directory: same CA (the kubeconfig still works, on a new
    // port once rewritten) and every object; this time with a static token
    // file as well.
    let ca_before = std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "static-secret,alice,u-1,\"dev,ops\"\n").unwrap();
    let server =
        apiserver(dir.path(), &["--token-auth-file", tokens.to_str().unwrap(), "--pod-security-enforce", "privileged"]);
    let (ok, out, err) = admin.run_with_input(&["create", "-f", "-"], Some(PRIVILEGED_POD)).into_parts();
    assert!(ok, "--pod-security-enforce privileged admits it: {out}{err}");
    assert_eq!(whoami(&admin, "static-secret"), Ok("alice".to_owned()));
    assert!(whoami(&admin, "not-a-token").unwrap_err().contains("Unauthorized"));
    assert_eq!(std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap(), ca_before);
    let (ok, out, err) =
        admin.run(&["-n", "team", "get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]).into_parts();
    assert!(ok && out == "fast", "{out}{err}");
    // The signing key is kept too: the token still works, until its
    // service account is deleted.
    assert_eq!(whoami(&admin, &token), Ok("system:serviceaccount:team:robot".to_owned()));
    let (ok, out, err) = admin.run(&["-n", "team", "delete", "serviceaccount", "robot"]).into_parts();
    assert!(ok, "{out}{err}");
    let refused = whoami(&admin, &token).unwrap_err();
    assert!(refused.contains("Unauthorized"), "{refused}");
    server.stop();
}

/// `kubectl auth whoami` with nothing but `token` (no client certificate)
/// against the server of `admin`'s kubeconfig: the user name, or kubectl's
/// error.
fn whoami(admin: &Kubectl, token: &str) -> Result<String, String> {
    let (ok, server, err) = admin.run(&["config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"]).into_parts();
    assert!(ok, "{err}");
    let ca = admin.kubeconfig().with_file_name("pki").join("ca.crt");
    let output = Kubectl::with_kubeconfig("/dev/null").run(&[
        &format!("--server={server}"),
        &format!("--certificate-authority={}", ca.display()),
        &format!("--token={token}"),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    if output.success { Ok(output.stdout) } else { Err(output.stderr) }
}

/// Authentication and authorization flags that cannot work stop the server
/// before it serves, saying why.
#[test]
fn apiserver_refuses_unusable_auth_flags() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = dir.path().join("webhook.kubeconfig");
    std::fs::write(&webhook, "clusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1/authorize'}\n").unwrap();
    let webhook_flag = format!("--authorization-webhook-config-file={}", webhook.display());
    let cases: [(&[&str], &str); 8] = [
        (&["--authorization-mode=Node,Webhook"], "authorization mode Webhook needs its configuration"),
        (&["--authorization-mode=ABAC,RBAC"], "--authorization-policy-file"),
        (&["--authorization-mode=Webhook", &webhook_flag], "must be an https URL"),
        (&["--oidc-issuer-url=http://issuer", "--oidc-client-id=k"], "must be an https URL"),
        (&["--oidc-issuer-url=https://issuer"], "--oidc-issuer-url needs --oidc-client-id"),
        (
            &["--oidc-issuer-url=https://issuer", "--oidc-client-id=k", "--oidc-signing-algs=HS256"],
            "unsupported signing algorithm",
        ),
        (&["--authorization-webhook-version=v2"], "unsupported webhook review version \"v2\": v1 or v1beta1"),
        (&["--admission-control-config-file=/nonexistent/admission.yaml"], "cannot read /nonexistent/admission.yaml"),
    ];
    for (flags, message) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_orchestra"))
            .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(flags)
            .output()
            .expect("the orchestra binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flags:?} was accepted");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
}
