//! A control plane inside your own axum service: the application's routes
//! and the Kubernetes API side by side on one listener, the API under
//! `/k8s`, with the scheduler, the built-in controllers and two simulated
//! nodes running in the same process.
//!
//! A kube-rs client reaches the API at `http://<address>/k8s` with a bearer
//! token, creates a Deployment and waits until its pods run; the
//! application's own `/hello` answers as before.
//!
//! ```text
//! cargo run -p orchestra-examples --example embed_in_axum
//! ```

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use k8s_openapi::api::apps::v1::Deployment;
use orchestra::core::auth::TokenFile;
use orchestra::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The token the example's client authenticates with.
const TOKEN: &str = "example-admin-token";

/// What the program saw.
#[derive(Debug)]
pub struct Outcome {
    /// The application's own `/hello` answer.
    pub hello: String,
    /// The nodes the Deployment's running pods landed on.
    pub pod_nodes: Vec<String>,
}

/// Starts the application and the control plane, deploys, and reports.
pub async fn run() -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut tokens = TokenFile::default();
    tokens.insert(TOKEN, UserInfo::new("app-admin", &["system:masters"]));
    let cluster = ControlPlane::builder().authenticator(tokens).nodes(2, NodeRuntime::simulated()).start().await?;

    // The application: its own routes, and the API server nested under /k8s.
    let app = Router::new().route("/hello", get(|| async { "hello from the application" }));
    let app = app.nest_service("/k8s", cluster.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    // A client of the API under /k8s, as any program would build one.
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: app, cluster: {{server: 'http://{address}/k8s'}}}}]\n\
         users: [{{name: admin, user: {{token: {TOKEN}}}}}]\n\
         contexts: [{{name: app, context: {{cluster: app, user: admin, namespace: default}}}}]\ncurrent-context: app\n"
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = Client::try_from(config)?;

    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))?;
    Api::<Deployment>::default_namespaced(client.clone()).create(&PostParams::default(), &deployment).await?;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let mut pod_nodes = Vec::new();
    for _ in 0..300 {
        let list = pods.list(&ListParams::default().labels("app=web")).await?;
        pod_nodes = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        if pod_nodes.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let hello = get_text(address, "/hello").await?;
    cluster.shutdown().await?;
    serving.abort();
    Ok(Outcome { hello, pod_nodes })
}

/// The body of a plain HTTP/1.1 GET.
async fn get_text(address: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let outcome = run().await?;
    println!("GET /hello: {}", outcome.hello);
    println!("Deployment web: pods running on {:?}", outcome.pod_nodes);
    Ok(())
}
