//! API handler benchmark: the CPU one create costs in the API server's own
//! code — routing, authentication, authorization, strict decoding,
//! admission, managedFields, validation, encoding, the response — without
//! HTTP, TLS or a durable store.
//!
//! `cargo bench -p orchestra-benches --bench handler [-- --quick | --creates N --rounds R | --pods [--secured]]`
//!
//! One request at a time on a one-thread runtime, `oneshot` on the router of
//! an `ApiServer` over the in-memory store, creating ConfigMaps like the
//! `apiserver` benchmark's (about 340 bytes of JSON) as an admin whom
//! every authenticated user's authorizer lets through. Each round builds a
//! fresh server and store; the line printed is the best round's thread CPU
//! time per create.
//!
//! `--pods` creates the `auth` benchmark's pods instead, and `--secured`
//! creates them as that benchmark's secured server does: as a user a
//! RoleBinding grants pod creates, through `Node,RBAC` and the default
//! admission chain. The two side by side show what authorization and
//! admission cost a create, without the noise of HTTP, TLS and the disk.
//!
//! Wall-clock and CPU time on a shared virtual machine move by a third from
//! one minute to the next, far more than most changes to the handler. For a
//! comparison that does not move, count instructions under valgrind — the
//! difference between two creates counts cancels the setup:
//!
//! ```text
//! valgrind --tool=callgrind <bench binary> --creates 1000 --rounds 1
//! valgrind --tool=callgrind <bench binary> --creates 3000 --rounds 1
//! ```
//!
//! (`Collected` of the second minus the first, over 2000.) `make
//! bench-handler-instructions` does exactly that.

use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use orchestra_benches::harness;
use orchestra_benches::sys::ThreadCpuMeter;
use orchestra_core::auth::admission::AdmissionChain;
use orchestra_core::auth::{
    AllowAuthenticated, Attributes, AuthenticatorChain, AuthorizationMode, AuthorizerChain, ExtensionAuthenticator,
    Identity, UserInfo,
};
use orchestra_core::server::ApiServer;
use orchestra_store::MemStore;
use serde_json::json;
use tower::ServiceExt as _;

const USAGE: &str = "\
API handler benchmark: CPU per create through the in-process router over the in-memory store

  --creates N   creates per round (default 5000; 2000 with --quick)
  --rounds R    rounds, each on a fresh server; the best is printed (default 8; 3 with --quick)
  --quick       the smaller defaults
  --pods        create pods (the auth benchmark's) instead of ConfigMaps
  --secured     with --pods: as a user RBAC grants pod creates, through Node,RBAC and the
                default admission chain (otherwise as an admin, no authorization, no admission)";

/// What is created, and through which server.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    ConfigMaps,
    Pods { secured: bool },
}

/// The namespace pods are created in.
const NS: &str = "bench";
/// The user the secured pod creates are made as.
const USER: &str = "bench-user";

/// A create of ConfigMap `name`, as the admin.
fn create(name: &str, payload: &str) -> Request<axum::body::Body> {
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"bench","tier":"load"}}}},"data":{{"payload":"{payload}"}}}}"#
    );
    request("/api/v1/namespaces/default/configmaps", body, admin())
}

/// A create of pod `name` in [`NS`], as `user`.
fn create_pod(name: &str, user: UserInfo) -> Request<axum::body::Body> {
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }]},
    });
    request(&format!("/api/v1/namespaces/{NS}/pods"), body.to_string(), user)
}

fn admin() -> UserInfo {
    UserInfo::new("admin", &["system:masters"])
}

fn request(path: &str, body: String, user: UserInfo) -> Request<axum::body::Body> {
    let mut request = Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("a valid request");
    request.extensions_mut().insert(Identity(user));
    request
}

/// Sends `request`; the answer must be 201.
async fn created(router: &Router, request: Request<axum::body::Body>) -> Result<(), String> {
    let response = router.clone().oneshot(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if status != StatusCode::CREATED {
        return Err(format!("create answered {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}

/// A server for `workload`, ready for its creates.
async fn server(workload: Workload) -> Result<Router, String> {
    let builder = ApiServer::builder(Arc::new(MemStore::new()))
        .authenticator(AuthenticatorChain::new().with(ExtensionAuthenticator));
    let Workload::Pods { secured: true } = workload else {
        let server = builder
            .authorizer(AuthorizerChain::new().with(AllowAuthenticated))
            .build()
            .await
            .map_err(|e| format!("API server: {e}"))?;
        let router = server.router();
        if workload != Workload::ConfigMaps {
            created(&router, request("/api/v1/namespaces", json!({"metadata": {"name": NS}}).to_string(), admin()))
                .await?;
        }
        return Ok(router);
    };
    let rbac = builder.rbac_authorizer();
    let builder = builder.authorization_modes(&[AuthorizationMode::Node, AuthorizationMode::Rbac]);
    let admission = builder.default_admission(AdmissionChain::new());
    let server = builder.admission(admission).build().await.map_err(|e| format!("API server: {e}"))?;
    let router = server.router();
    let rbac_path = |kind: &str| format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{kind}");
    for (path, body) in [
        ("/api/v1/namespaces".to_owned(), json!({"metadata": {"name": NS}})),
        (
            rbac_path("roles"),
            json!({"metadata": {"name": "pod-creator"},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}),
        ),
        (
            rbac_path("rolebindings"),
            json!({"metadata": {"name": "pod-creator"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-creator"},
                   "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER}]}),
        ),
    ] {
        created(&router, request(&path, body.to_string(), admin())).await?;
    }
    // The authorizer reads the binding from its watch.
    let attributes = Attributes {
        user: UserInfo::new(USER, &["system:authenticated"]),
        verb: "create".into(),
        resource_request: true,
        resource: "pods".into(),
        namespace: NS.into(),
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !rbac.allows(&attributes) {
        if std::time::Instant::now() > deadline {
            return Err("the RBAC authorizer did not see the binding within 30 s".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok(router)
}

/// One round: a fresh server, `creates` creates; CPU seconds per create.
async fn round(round: usize, creates: usize, workload: Workload) -> Result<f64, String> {
    let router = server(workload).await?;
    // The server's background tasks (its caches) settle first.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let payload = "x".repeat(200);
    let user = match workload {
        Workload::Pods { secured: true } => UserInfo::new(USER, &["system:authenticated"]),
        _ => admin(),
    };
    // The runtime has one thread: the process's CPU is the handler's.
    let meter = ThreadCpuMeter::start();
    for i in 0..creates {
        let name = format!("obj-{round}-{i}");
        let request = match workload {
            Workload::ConfigMaps => create(&name, &payload),
            Workload::Pods { .. } => create_pod(&name, user.clone()),
        };
        created(&router, request).await?;
    }
    Ok(meter.read().total_ns() as f64 / 1e9 / creates as f64)
}

fn main() -> ExitCode {
    let args = match harness::parse_args(&["quick", "help", "pods", "secured"], USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let parsed = (|| -> Result<(usize, usize, Workload), String> {
        let quick = args.flag("quick");
        let creates = args.get("creates", if quick { 2000usize } else { 5000 })?;
        let rounds = args.get("rounds", if quick { 3usize } else { 8 })?;
        let workload = match (args.flag("pods"), args.flag("secured")) {
            (false, true) => return Err("--secured needs --pods".into()),
            (false, false) => Workload::ConfigMaps,
            (true, secured) => Workload::Pods { secured },
        };
        args.finish()?;
        Ok((creates.max(1), rounds.max(1), workload))
    })();
    let (creates, rounds, workload) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let outcome = runtime.block_on(async {
        let mut best = f64::MAX;
        for r in 0..rounds {
            best = best.min(round(r, creates, workload).await?);
        }
        Ok::<_, String>(best)
    });
    match outcome {
        Ok(best) => {
            let object = match workload {
                Workload::ConfigMaps => "configmap",
                Workload::Pods { secured: false } => "pod",
                Workload::Pods { secured: true } => "pod-secured",
            };
            println!(
                "handler op=create object={object} creates={creates} rounds={rounds} best_cpu_us_per_op={:.2}",
                best * 1e6
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("handler bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
