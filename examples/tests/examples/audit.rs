//! `orchestra apiserver --audit-policy-file ... --audit-log-path ...`: a
//! ConfigMap create logged at RequestResponse, a Secret create only at
//! Metadata whatever the policy says, 401 and 403 logged with the
//! authorization decision, the `Audit-Id` header naming the events, and the
//! log rotated by size with one backup kept.

use std::path::Path;
use std::time::Duration;

use orchestra::testing::Kubectl;
use serde_json::Value;

use super::support::{Running, apiserver, eventually};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: [configmaps, secrets]
  - level: Metadata
"#;

fn start(data_dir: &Path, log: &Path) -> Running {
    let policy = data_dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let (policy, log) = (policy.to_str().unwrap(), log.to_str().unwrap());
    let extra = ["--audit-log-maxsize", "1", "--audit-log-maxbackup", "1"];
    apiserver(data_dir, &[&extra[..], &["--audit-policy-file", policy, "--audit-log-path", log]].concat())
}

/// The events of the log so far.
fn events(log: &Path) -> Vec<Value> {
    let mut text = std::fs::read_to_string(log).unwrap_or_default();
    // The writer may be in the middle of a line.
    text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

/// The ResponseComplete event matching `select`, once written.
fn complete(log: &Path, what: &str, select: impl Fn(&Value) -> bool) -> Value {
    eventually(what, Duration::from_secs(10), || {
        events(log)
            .into_iter()
            .find(|e| e["stage"] == "ResponseComplete" && select(e))
            .ok_or_else(|| format!("not among {} events", events(log).len()))
    })
}

#[test]
fn requests_are_audited_by_policy_and_the_log_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit").join("audit.log");
    let admin = Kubectl::with_kubeconfig(dir.path().join("admin.kubeconfig"));
    let server = start(dir.path(), &log);

    // A ConfigMap: both bodies, under the id the response's header names.
    let (ok, out, err) =
        admin.run(&["-v=8", "create", "configmap", "cfg", "--from-literal=colour=blue-plaintext"]).into_parts();
    assert!(ok, "{out}{err}");
    let header = err
        .lines()
        .find_map(|line| line.trim().strip_prefix("Audit-Id: "))
        .unwrap_or_else(|| panic!("no Audit-Id header in {err}"))
        .trim()
        .to_owned();
    let event = complete(&log, "the configmap's create", |e| e["objectRef"]["resource"] == "configmaps");
    assert_eq!(event["auditID"], header.as_str());
    assert_eq!(event["level"], "RequestResponse");
    assert_eq!(event["verb"], "create");
    assert!(event["requestURI"].as_str().unwrap().starts_with("/api/v1/namespaces/default/configmaps?"), "{event}");
    assert_eq!(event["objectRef"]["name"], "cfg");
    assert_eq!(event["objectRef"]["namespace"], "default");
    assert_eq!(event["objectRef"]["apiVersion"], "v1");
    assert_eq!(event["user"]["username"], "orchestra-admin");
    assert_eq!(event["responseStatus"]["code"], 201);
    assert_eq!(event["requestObject"]["data"]["colour"], "blue-plaintext");
    assert_eq!(event["responseObject"]["metadata"]["name"], "cfg");
    assert!(event["responseObject"]["metadata"]["uid"].is_string());
    assert_eq!(event["annotations"]["authorization.k8s.io/decision"], "allow");
    assert_eq!(event["sourceIPs"][0], "127.0.0.1");
    assert!(event["userAgent"].as_str().unwrap().starts_with("kubectl"), "{event}");
    assert!(event["requestReceivedTimestamp"].as_str().unwrap().ends_with('Z'));
    let stages: Vec<Value> =
        events(&log).into_iter().filter(|e| e["auditID"] == header.as_str()).map(|e| e["stage"].clone()).collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"]);

    // A pod: admission's audit annotations (PodSecurity's enforced level).
    let (ok, out, err) = admin.run(&["run", "audited", "--image=orchestra/echo"]).into_parts();
    assert!(ok, "{out}{err}");
    let event = complete(&log, "the pod's create", |e| {
        e["objectRef"]["resource"] == "pods" && e["verb"] == "create" && e["objectRef"]["name"] == "audited"
    });
    assert_eq!(event["annotations"]["pod-security.kubernetes.io/enforce-policy"], "baseline:latest", "{event}");

    // A Secret: the policy says RequestResponse, the server logs metadata only.
    let (ok, out, err) =
        admin.run(&["create", "secret", "generic", "pw", "--from-literal=password=hunter2"]).into_parts();
    assert!(ok, "{out}{err}");
    let event = complete(&log, "the secret's create", |e| e["objectRef"]["resource"] == "secrets");
    assert_eq!(event["level"], "Metadata");
    assert_eq!(event["objectRef"]["name"], "pw");
    assert!(event.get("requestObject").is_none() && event.get("responseObject").is_none(), "{event}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("hunter2") && !text.contains("aHVudGVyMg"), "a secret's value in the log");

    // 401 and 403: logged with the response status (and, for the 403, the
    // authorization decision and the user who was refused).
    let ca = dir.path().join("pki").join("ca.crt");
    let server_url = admin.run(&["config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]).stdout;
    let with_token = |name: &str, token: &str| {
        let path = dir.path().join(format!("{name}.kubeconfig"));
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server_url}\", certificate-authority: {}}}}}]\n\
             users: [{{name: u, user: {{token: \"{token}\"}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            ca.display()
        );
        std::fs::write(&path, config).unwrap();
        Kubectl::with_kubeconfig(path)
    };
    let stranger = with_token("stranger", "not-a-token-anyone-issued");
    let (ok, out, err) = stranger.run(&["get", "configmaps", "cfg"]).into_parts();
    assert!(!ok && err.contains("You must be logged in to the server"), "{out}{err}");
    // kubectl gives up at its first request (discovery).
    let event = complete(&log, "a 401", |e| e["responseStatus"]["code"] == 401);
    assert_eq!(event["responseStatus"]["reason"], "Unauthorized");
    assert_eq!(event["userAgent"].as_str().map(|agent| agent.starts_with("kubectl")), Some(true), "{event}");
    assert!(event["user"].get("username").is_none_or(|name| name == ""), "{event}");
    let (ok, out, err) = admin.run(&["create", "serviceaccount", "viewer"]).into_parts();
    assert!(ok, "{out}{err}");
    let (ok, token, err) = admin.run(&["create", "token", "viewer"]).into_parts();
    assert!(ok, "{err}");
    let viewer = with_token("viewer", token.trim());
    let (ok, out, err) = viewer.run(&["get", "secret", "pw"]).into_parts();
    assert!(!ok && err.contains("Forbidden"), "{out}{err}");
    let event = complete(&log, "the secret get's 403", |e| {
        e["responseStatus"]["code"] == 403 && e["objectRef"]["resource"] == "secrets"
    });
    assert_eq!(event["user"]["username"], "system:serviceaccount:default:viewer");
    assert_eq!(event["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert_eq!(event["objectRef"]["name"], "pw");

    // Rotation at 1 MiB: each ConfigMap of 400 KB is logged twice over in
    // one event, so every one of them starts a new file.
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "x".repeat(400_000)).unwrap();
    for n in 0..4 {
        let from = format!("--from-file=payload={}", big.display());
        let (ok, out, err) = admin.run(&["create", "configmap", &format!("big-{n}"), &from]).into_parts();
        assert!(ok, "{out}{err}");
    }
    complete(&log, "the last big configmap", |e| e["objectRef"]["name"] == "big-3");
    let rotated: Vec<_> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "audit.log")
        .collect();
    assert_eq!(rotated.len(), 1, "one backup kept: {rotated:?}");
    assert!(rotated[0].starts_with("audit-") && rotated[0].ends_with(".log"), "{rotated:?}");
    assert!(std::fs::metadata(&log).unwrap().len() <= 1 << 20);
    server.stop();
}
