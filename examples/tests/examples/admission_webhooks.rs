//! `orchestra apiserver` calling an admission webhook the test serves on
//! loopback over HTTPS: `kubectl create -f` of a
//! ValidatingWebhookConfiguration, then `kubectl run` refused with the
//! webhook's message; and `--disable-admission-plugins` taking the plugin
//! out.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use orchestra::testing::Kubectl;
use orchestra_core::server::pki::Pki;
use orchestra_core::tls::{ClientAuth, ListenOptions, server_config};
use serde_json::{Value, json};

use super::support::{apiserver, eventually};

/// A webhook refusing every review, on loopback over HTTPS; its base URL
/// and CA bundle (base64).
async fn deny_everything(dir: &Path) -> (String, String) {
    let pki = Pki::load_or_create(dir, &[]).unwrap();
    let serving = pki.issue_serving("webhook", &["127.0.0.1".to_owned()]).unwrap();
    let tls = server_config(&serving, pki.ca_pem(), ClientAuth::Optional).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/deny", listener.local_addr().unwrap());
    let router = axum::Router::new().route(
        "/deny",
        axum::routing::post(|axum::Json(review): axum::Json<Value>| async move {
            axum::Json(json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": false,
                    "status": {"code": 403, "message": "pods need a ticket"}},
            }))
        }),
    );
    tokio::spawn(orchestra_core::server::serve(
        listener,
        router,
        ListenOptions::default().with_tls(tls),
        std::future::pending(),
    ));
    (url, base64::engine::general_purpose::STANDARD.encode(pki.ca_pem()))
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_run_is_refused_by_a_validating_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let (url, ca) = deny_everything(&dir.path().join("webhook-pki")).await;
    let data = dir.path().join("data");
    let admin = Kubectl::with_kubeconfig(data.join("admin.kubeconfig"));
    let server = apiserver(&data, &[]);
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "tickets"},
        "webhooks": [{
            "name": "tickets.example.com",
            "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    });
    let file = dir.path().join("webhookconfig.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(&configuration).unwrap()).unwrap();
    let (ok, out, err) = admin.run(&["create", "-f", file.to_str().unwrap()]).into_parts();
    assert!(ok, "{out}{err}");
    // The server reads configurations from a watch: the refusal comes a moment later.
    let mut attempt = 0;
    let refusal = eventually("the webhook refuses", Duration::from_secs(10), || {
        attempt += 1;
        let name = format!("web-{attempt}");
        let (ok, out, err) = admin.run(&["run", &name, "--image=nginx", "-n", "default"]).into_parts();
        match ok {
            true => Err(format!("created: {out}")),
            false => Ok(err),
        }
    });
    assert!(
        refusal.contains("admission webhook \"tickets.example.com\" denied the request: pods need a ticket"),
        "{refusal}"
    );
    server.stop();

    // Without the plugin the configuration is stored but not called.
    let server = apiserver(&data, &["--disable-admission-plugins", "ValidatingAdmissionWebhook"]);
    let (ok, out, err) = admin.run(&["run", "web", "--image=nginx", "-n", "default"]).into_parts();
    assert!(ok, "{out}{err}");
    server.stop();
}
