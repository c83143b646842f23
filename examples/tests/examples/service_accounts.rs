//! A pod talks to the API server as its service account: the
//! ServiceAccount admission plugin mounts a `kube-api-access-*` volume,
//! the root-ca-cert-publisher puts the CA in `kube-root-ca.crt`, the node
//! agent requests the pod's bound token, and the pod's process (a host
//! shell of the process runtime) calls the API server over HTTPS with
//! `curl`. RBAC decides as `system:serviceaccount:<ns>:default`, and the
//! token dies with its pod.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use orchestra::control_plane::{ControlPlane, Listener, NodeRuntime};
use orchestra::testing::Kubectl;
use orchestra_core::auth::admission::{AdmissionChain, ServiceAccount};
use orchestra_node::runtime::images::{ImageCatalog, ImageEntry};

/// The pod: prints its token once, then every half second what the API
/// server answers to listing the pods of its namespace, on one line.
const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: caller
  namespace: demo
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: caller
    image: busybox
    command:
    - sh
    - -c
    - |
      D="${ORCHESTRA_VOLUMES:-}/var/run/secrets/kubernetes.io/serviceaccount"
      printf 'TOKEN %s\n' "$(cat "$D/token")"
      while true; do
        printf 'ANSWER %s\n' "$(curl -s --cacert "$D/ca.crt" -H "Authorization: Bearer $(cat "$D/token")" \
          "https://$API/api/v1/namespaces/$(cat "$D/namespace")/pods" | tr -d '\n')"
        sleep 0.5
      done
    env:
    - name: API
      value: "ADDRESS"
"#;

/// Polls `check` every 250 ms until it gives a value, for at most `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {timeout:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The last line of the pod's log starting with `prefix`, without it.
fn last_line(kubectl: &Kubectl, prefix: &str) -> Result<String, String> {
    let (ok, out, err) = kubectl.run(&["-n", "demo", "logs", "caller"]).into_parts();
    if !ok {
        return Err(err);
    }
    out.lines().rev().find_map(|l| l.strip_prefix(prefix)).map(str::to_owned).ok_or(out)
}

/// What the API server answers `token` from outside the pod: status code and body.
fn call_with(token: &str, address: SocketAddr, ca: &Path) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("https://{address}/api/v1/namespaces/demo/pods"))
        .output()
        .expect("curl runs");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_calls_the_api_server_with_its_bound_token() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = ImageCatalog::builder().image("busybox", ImageEntry::new(["sh"])).build().unwrap();
    let cluster = ControlPlane::builder()
        .data_dir(dir.path())
        .listener(Listener::tls("127.0.0.1:0".parse().unwrap(), dir.path().join("pki")))
        .configure_api_server(|api| {
            let chain = api.default_admission(AdmissionChain::new().with(ServiceAccount::new(api.object_reader())));
            api.admission(chain)
        })
        .nodes(1, NodeRuntime::Process(catalog))
        .start()
        .await
        .unwrap();
    let kubeconfig = dir.path().join("admin.kubeconfig");
    cluster.write_admin_kubeconfig(&kubeconfig).unwrap();
    let kubectl = Kubectl::with_kubeconfig(&kubeconfig);
    let address = cluster.address().unwrap();
    let ca = dir.path().join("pki/ca.crt");

    let (ok, out, err) = kubectl.run(&["create", "namespace", "demo"]).into_parts();
    assert!(ok, "{out}{err}");
    let manifest = POD.replace("ADDRESS", &address.to_string());
    let (ok, out, err) = kubectl.run_with_input(&["apply", "-f", "-"], Some(&manifest)).into_parts();
    assert!(ok, "{out}{err}");

    // Admission gave the pod its account and the token volume, mounted read-only.
    let (ok, spec, err) = kubectl.run(&["-n", "demo", "get", "pod", "caller", "-o", "jsonpath={.spec}"]).into_parts();
    assert!(ok, "{err}");
    let spec: serde_json::Value = serde_json::from_str(&spec).unwrap();
    assert_eq!(spec["serviceAccountName"], "default");
    let mount = &spec["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["mountPath"], "/var/run/secrets/kubernetes.io/serviceaccount");
    assert_eq!(mount["readOnly"], true);
    assert!(mount["name"].as_str().unwrap().starts_with("kube-api-access-"), "{mount}");

    // Without a binding, RBAC refuses the account by name.
    let forbidden = eventually("the pod is refused as its service account", Duration::from_secs(60), || async {
        last_line(&kubectl, "ANSWER ").and_then(|answer| match answer.contains("Forbidden") {
            true => Ok(answer),
            false => Err(answer),
        })
    })
    .await;
    assert!(
        forbidden.contains(r#"User \"system:serviceaccount:demo:default\" cannot list resource \"pods\""#),
        "{forbidden}"
    );

    // Bound to `view`, the same token lists the pods.
    let (ok, out, err) = kubectl
        .run(&["-n", "demo", "create", "rolebinding", "viewer", "--clusterrole=view", "--serviceaccount=demo:default"])
        .into_parts();
    assert!(ok, "{out}{err}");
    eventually("the pod lists pods once it may view", Duration::from_secs(30), || async {
        last_line(&kubectl, "ANSWER ").and_then(|answer| match answer.contains(r#""kind":"PodList""#) {
            true => Ok(()),
            false => Err(answer),
        })
    })
    .await;

    // The token is bound to the pod: it works from outside while the pod
    // exists, and is refused once the pod is gone.
    let token = last_line(&kubectl, "TOKEN ").unwrap();
    let (code, body) = call_with(&token, address, &ca);
    assert_eq!(code, "200", "{body}");
    let (ok, out, err) = kubectl.run(&["-n", "demo", "delete", "pod", "caller", "--wait=true"]).into_parts();
    assert!(ok, "{out}{err}");
    eventually("the token is refused without its pod", Duration::from_secs(30), || async {
        match call_with(&token, address, &ca) {
            (code, body) if code == "401" && body.contains("Unauthorized") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    cluster.shutdown().await.unwrap();
}
