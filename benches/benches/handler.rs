//! API handler benchmark: the CPU one create costs in the API server's own
//! code — routing, authentication, authorization, strict decoding,
//! admission, managedFields, validation, encoding, the response — without
//! HTTP, TLS or a durable store.
//!
//! `cargo bench -p orchestra-benches --bench handler [-- --quick | --creates N --rounds R]`
//!
//! One request at a time on a one-thread runtime, `oneshot` on the router of
//! an `ApiServer` over the in-memory store, creating ConfigMaps like the
//! `apiserver` benchmark's (about 340 bytes of JSON). Each round builds a
//! fresh server and store; the line printed is the best round's thread CPU
//! time per create.
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

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use orchestra_benches::harness;
use orchestra_benches::sys::ThreadCpuMeter;
use orchestra_core::auth::{
    AllowAuthenticated, AuthenticatorChain, AuthorizerChain, ExtensionAuthenticator, Identity, UserInfo,
};
use orchestra_core::server::ApiServer;
use orchestra_store::MemStore;
use tower::ServiceExt as _;

const USAGE: &str = "\
API handler benchmark: CPU per create through the in-process router over the in-memory store

  --creates N   creates per round (default 5000; 2000 with --quick)
  --rounds R    rounds, each on a fresh server; the best is printed (default 8; 3 with --quick)
  --quick       the smaller defaults";

/// A create of ConfigMap `name`, as the admin.
fn create(name: &str, payload: &str) -> Request<axum::body::Body> {
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"bench","tier":"load"}}}},"data":{{"payload":"{payload}"}}}}"#
    );
    let mut request = Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("a valid request");
    request.extensions_mut().insert(Identity(UserInfo::new("admin", &["system:masters"])));
    request
}

/// One round: a fresh server, `creates` creates; CPU seconds per create.
async fn round(round: usize, creates: usize) -> Result<f64, String> {
    let server = ApiServer::builder(Arc::new(MemStore::new()))
        .authenticator(AuthenticatorChain::new().with(ExtensionAuthenticator))
        .authorizer(AuthorizerChain::new().with(AllowAuthenticated))
        .build()
        .await
        .map_err(|e| format!("API server: {e}"))?;
    let router = server.router();
    // The server's background tasks (its namespace cache) settle first.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let payload = "x".repeat(200);
    // The runtime has one thread: the process's CPU is the handler's.
    let meter = ThreadCpuMeter::start();
    for i in 0..creates {
        let response =
            router.clone().oneshot(create(&format!("cm-{round}-{i}"), &payload)).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        if status != StatusCode::CREATED {
            return Err(format!("create answered {status}: {}", String::from_utf8_lossy(&body)));
        }
    }
    Ok(meter.read().total_ns() as f64 / 1e9 / creates as f64)
}

fn main() -> ExitCode {
    let args = match harness::parse_args(&["quick", "help"], USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let parsed = (|| -> Result<(usize, usize), String> {
        let quick = args.flag("quick");
        let creates = args.get("creates", if quick { 2000usize } else { 5000 })?;
        let rounds = args.get("rounds", if quick { 3usize } else { 8 })?;
        args.finish()?;
        Ok((creates.max(1), rounds.max(1)))
    })();
    let (creates, rounds) = match parsed {
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
            best = best.min(round(r, creates).await?);
        }
        Ok::<_, String>(best)
    });
    match outcome {
        Ok(best) => {
            println!("handler op=create creates={creates} rounds={rounds} best_cpu_us_per_op={:.2}", best * 1e6);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("handler bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
