//! `orchestra apiserver --encryption-provider-config`: Secrets reach the
//! store encrypted (read back from the RocksDB store directly), read back
//! through the API in plain, and are re-encrypted with a new key by
//! upstream's rotation procedure (`kubectl get secrets -A -o json | kubectl
//! replace -f -`), which rewrites each Secret unchanged.

use std::path::Path;

use orchestra::store::{RocksStore, Store};
use orchestra::testing::Kubectl;

use super::support::{Running, apiserver};

const OLD_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const NEW_KEY: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=";

fn config(keys: &[(&str, &str)]) -> String {
    let keys: String =
        keys.iter().map(|(name, secret)| format!("      - name: {name}\n        secret: {secret}\n")).collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n\
         - resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n{keys}  - identity: {{}}\n"
    )
}

fn start(data_dir: &Path, encryption: &Path) -> Running {
    apiserver(data_dir, &["--encryption-provider-config", encryption.to_str().unwrap()])
}

/// The raw stored values of a Secret and a ConfigMap, read from the
/// stopped server's store.
fn stored(data_dir: &Path) -> (Vec<u8>, Vec<u8>) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = RocksStore::open(data_dir.join("store")).await.unwrap();
        let secret = store.get("/registry/secrets/default/db").await.unwrap().expect("the secret").value;
        let map = store.get("/registry/configmaps/default/plain").await.unwrap().expect("the configmap").value;
        (secret.to_vec(), map.to_vec())
    })
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_are_stored_encrypted_and_rotate_to_the_first_key() {
    let dir = tempfile::tempdir().unwrap();
    let encryption = dir.path().join("encryption.yaml");
    std::fs::write(&encryption, config(&[("old", OLD_KEY)])).unwrap();
    let admin = Kubectl::with_kubeconfig(dir.path().join("admin.kubeconfig"));
    let server = start(dir.path(), &encryption);
    let run = |args: &[&str]| {
        let (ok, out, err) = admin.run(args).into_parts();
        assert!(ok, "kubectl {args:?}: {out}{err}");
        out
    };
    run(&["create", "secret", "generic", "db", "--from-literal=password=hunter2-plaintext"]);
    run(&["create", "configmap", "plain", "--from-literal=mode=visible-plaintext"]);
    assert_eq!(run(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]), "aHVudGVyMi1wbGFpbnRleHQ=");
    server.stop();

    let (secret, map) = stored(dir.path());
    assert!(secret.starts_with(b"k8s:enc:aesgcm:v1:old:"), "{}", String::from_utf8_lossy(&secret));
    assert!(!contains(&secret, "aHVudGVyMi1wbGFpbnRleHQ=") && !contains(&secret, "\"kind\""), "plaintext in the store");
    assert!(contains(&map, "visible-plaintext"), "configmaps are not configured: stored as they are");

    // Rotation: the new key first, the old one still read.
    std::fs::write(&encryption, config(&[("new", NEW_KEY), ("old", OLD_KEY)])).unwrap();
    let server = start(dir.path(), &encryption);
    assert_eq!(run(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]), "aHVudGVyMi1wbGFpbnRleHQ=");
    // Upstream's procedure rewrites every Secret as it is: each one read
    // with a key that no longer writes is written again, with the first.
    let secrets = run(&["get", "secrets", "-A", "-o", "json"]);
    let (ok, out, err) = admin.run_with_input(&["replace", "-f", "-"], Some(&secrets)).into_parts();
    assert!(ok && out.contains("secret/db replaced"), "kubectl replace: {out}{err}");
    let version = run(&["get", "secret", "db", "-o", "jsonpath={.metadata.resourceVersion}"]);
    // Rewritten once, the Secret is current: replacing it again changes nothing.
    let (ok, out, err) = admin.run_with_input(&["replace", "-f", "-"], Some(&secrets)).into_parts();
    assert!(!ok && err.contains("Conflict"), "a replace at the old version: {out}{err}");
    let current = run(&["get", "secret", "db", "-o", "json"]);
    let (ok, out, err) = admin.run_with_input(&["replace", "-f", "-"], Some(&current)).into_parts();
    assert!(ok, "kubectl replace: {out}{err}");
    assert_eq!(run(&["get", "secret", "db", "-o", "jsonpath={.metadata.resourceVersion}"]), version);
    server.stop();
    let (secret, _) = stored(dir.path());
    assert!(secret.starts_with(b"k8s:enc:aesgcm:v1:new:"), "{}", String::from_utf8_lossy(&secret));

    // Without the key that wrote it, the Secret is a clear error, not
    // garbage and not a crash; other objects are still served.
    std::fs::write(&encryption, config(&[("old", OLD_KEY)])).unwrap();
    let server = start(dir.path(), &encryption);
    let (ok, out, err) = admin.run(&["get", "secret", "db"]).into_parts();
    assert!(!ok && err.contains("InternalError"), "{out}{err}");
    assert!(err.contains("k8s:enc:aesgcm:v1:new:"), "{err}");
    assert_eq!(run(&["get", "configmap", "plain", "-o", "jsonpath={.data.mode}"]), "visible-plaintext");
    server.stop();
}
