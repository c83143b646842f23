//! TLS bootstrapping end to end, with the installed kubectl: `orchestra up
//! --enable-bootstrap-token-auth true`, `orchestra token create`, a node
//! joining with `orchestra node --bootstrap-token` that registers as
//! `system:node:<name>` with an approved and issued CSR; then a CSR of the
//! `kubernetes.io/kube-apiserver-client` signer that stays pending until
//! `kubectl certificate approve`, whose certificate then authenticates.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use orchestra::core::tls::csr::create_request;
use orchestra::core::tls::pki::{Credential, kubeconfig};
use orchestra::testing::Kubectl;
use serde_json::{Value, json};

use super::support::{eventually, start, whoami};

fn json(kubectl: &Kubectl, args: &[&str]) -> Result<Value, String> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, stdout, stderr) = kubectl.run(&all).into_parts();
    if !ok {
        return Err(stderr);
    }
    serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout}"))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

fn condition_types(csr: &Value) -> Vec<String> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(|c| c["type"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[test]
fn nodes_join_with_bootstrap_tokens_and_csrs_need_approval() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let data_arg = data.to_str().unwrap();
    let (cluster, printed) = start([
        "up",
        "--runtime",
        "sim",
        "--nodes",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--kubelet-port",
        "0",
        "--enable-bootstrap-token-auth",
        "true",
        "--data-dir",
        data_arg,
    ]);
    let url = printed
        .lines()
        .find_map(|line| line.split("API server on ").nth(1))
        .unwrap_or_else(|| panic!("no URL in:\n{printed}"))
        .trim()
        .to_owned();
    let admin_kubeconfig = data.join("admin.kubeconfig");
    let kubectl = Kubectl::with_kubeconfig(&admin_kubeconfig);

    // A bootstrap token, as kubeadm makes one.
    let output = Command::new(env!("CARGO_BIN_EXE_orchestra"))
        .args(["token", "create", "--ttl", "1h", "--kubeconfig"])
        .arg(&admin_kubeconfig)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let token = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let (id, _) = token.split_once('.').unwrap_or_else(|| panic!("not a token: {token}"));
    let secret = json(&kubectl, &["get", "secret", "-n", "kube-system", &format!("bootstrap-token-{id}")]).unwrap();
    assert_eq!(secret["type"], "bootstrap.kubernetes.io/token");

    // A node joins with it.
    let node_dir = dir.path().join("joiner");
    let ca_file = data.join("pki/ca.crt");
    let (node, printed) = start([
        "node",
        "--name",
        "joiner",
        "--runtime",
        "sim",
        "--kubelet-port",
        "0",
        "--bootstrap-token",
        &token,
        "--server",
        &url,
        "--ca-file",
        ca_file.to_str().unwrap(),
        "--data-dir",
        node_dir.to_str().unwrap(),
    ]);
    assert!(printed.contains("certificate issued"), "{printed}");
    let node_kubeconfig = node_dir.join("kubelet.kubeconfig");
    assert_eq!(mode(&node_kubeconfig), 0o600);
    assert_eq!(mode(&node_dir.join("kubelet-client.key")), 0o600);
    assert_eq!(whoami(&node_kubeconfig), "system:node:joiner");
    let joined =
        eventually("the joined node registers", Duration::from_secs(60), || json(&kubectl, &["get", "node", "joiner"]));
    assert_eq!(joined["metadata"]["name"], "joiner");

    // Its CSR: asked for by the bootstrap user, approved by the controller, issued.
    let csrs = json(&kubectl, &["get", "csr"]).unwrap();
    let bootstrap_user = format!("system:bootstrap:{id}");
    let csr = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|csr| csr["spec"]["username"] == bootstrap_user.as_str())
        .unwrap_or_else(|| panic!("no CSR of {bootstrap_user}: {csrs}"))
        .clone();
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert!(csr["spec"]["groups"].as_array().unwrap().iter().any(|g| g == "system:bootstrappers"), "{csr}");
    assert_eq!(condition_types(&csr), ["Approved"]);
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    let name = csr["metadata"]["name"].as_str().unwrap().to_owned();
    let table = kubectl.run(&["get", "csr", &name]);
    assert!(table.success, "{}", table.stderr);
    let header: Vec<&str> = table.stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]);
    assert!(table.stdout.contains("Approved,Issued"), "{}", table.stdout);
    assert!(table.stdout.contains(&bootstrap_user), "{}", table.stdout);

    // A client certificate for alice: pending until approved.
    let (request, key_pem) = create_request("alice", Some("devs"), &[]).unwrap();
    let manual = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "alice"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&request),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": 3600,
            "username": "forged",
        },
    });
    let created = kubectl.run_with_input(&["create", "-f", "-"], Some(&manual.to_string()));
    assert!(created.success, "{}", created.stderr);
    let pending = json(&kubectl, &["get", "csr", "alice"]).unwrap();
    assert_ne!(pending["spec"]["username"], "forged", "the server sets the requestor");
    std::thread::sleep(Duration::from_secs(2));
    let table = kubectl.run(&["get", "csr", "alice"]);
    assert!(table.stdout.contains("Pending") && table.stdout.contains("60m"), "{}", table.stdout);
    assert!(json(&kubectl, &["get", "csr", "alice"]).unwrap()["status"].get("certificate").is_none());

    // A request for system:masters is refused outright.
    let (masters, _) = create_request("mallory", Some("system:masters"), &[]).unwrap();
    let mut refused = manual.clone();
    refused["metadata"]["name"] = "mallory".into();
    refused["spec"]["request"] = base64::engine::general_purpose::STANDARD.encode(&masters).into();
    let output = kubectl.run_with_input(&["create", "-f", "-"], Some(&refused.to_string()));
    assert!(!output.success && output.stderr.contains("system:masters"), "{}", output.stderr);

    let approved = kubectl.run(&["certificate", "approve", "alice"]);
    assert!(approved.success, "{}", approved.stderr);
    let issued = eventually("alice's certificate is issued", Duration::from_secs(30), || {
        let csr = json(&kubectl, &["get", "csr", "alice"])?;
        csr.pointer("/status/certificate").and_then(Value::as_str).map(str::to_owned).ok_or(csr.to_string())
    });
    let cert_pem = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(issued).unwrap()).unwrap();
    let ca_pem = std::fs::read_to_string(&ca_file).unwrap();
    let alice_kubeconfig = dir.path().join("alice.kubeconfig");
    std::fs::write(&alice_kubeconfig, kubeconfig(&url, &ca_pem, "alice", &Credential { cert_pem, key_pem })).unwrap();
    assert_eq!(whoami(&alice_kubeconfig), "alice");
    let table = kubectl.run(&["get", "csr", "alice"]);
    assert!(table.stdout.contains("Approved,Issued"), "{}", table.stdout);

    node.stop();
    cluster.stop();
}
