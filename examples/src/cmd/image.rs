//! `orchestra image <name>`: the programs behind the images the reference
//! assembly ships (`orchestra images` lists them). The process runtime runs
//! them as containers; they read what a container reads — environment
//! variables — and stop on SIGTERM.
//!
//! - `pause` (`orchestra/pause`): sleeps until stopped, as the pod sandbox's
//!   pause container does.
//! - `echo` (`orchestra/echo`): an HTTP server on `$PORT` (default 8080),
//!   bound to the pod's IP (`$ORCHESTRA_POD_IP`, set by the process
//!   runtime, or `$POD_IP`), answering every request with the pod's name and
//!   the request it received; each request is logged to stdout.

use std::net::{IpAddr, SocketAddr};

use axum::extract::Request;

/// The images: (name, what it does).
pub const IMAGES: [(&str, &str); 2] = [
    ("orchestra/pause", "sleeps until stopped (the pod sandbox's pause container)"),
    (
        "orchestra/echo",
        "HTTP server on $PORT (default 8080) at the pod IP, answering with its pod name and the request",
    ),
];

/// Which image program to run.
#[derive(clap::Subcommand)]
pub enum Image {
    /// Sleeps until SIGTERM or SIGINT.
    Pause,
    /// Serves HTTP on the pod IP and `$PORT`, echoing each request.
    Echo,
}

/// Runs an image program until it is stopped.
pub async fn run(image: Image) -> Result<(), Box<dyn std::error::Error>> {
    match image {
        Image::Pause => {
            super::shutdown_signal().await;
            Ok(())
        }
        Image::Echo => echo().await,
    }
}

fn pod_name() -> String {
    std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "unknown".into())
}

async fn echo() -> Result<(), Box<dyn std::error::Error>> {
    let ip: IpAddr = std::env::var("ORCHESTRA_POD_IP")
        .or_else(|_| std::env::var("POD_IP"))
        .ok()
        .and_then(|ip| ip.parse().ok())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port.parse().map_err(|_| format!("PORT={port:?} is not a port number"))?,
        Err(_) => 8080,
    };
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, port)).await?;
    println!("echo: pod {} listening on http://{}", pod_name(), listener.local_addr()?);
    let router = axum::Router::new().fallback(|request: Request| async move {
        let mut answer =
            format!("pod: {}\n{} {} {:?}\n", pod_name(), request.method(), request.uri(), request.version());
        for (name, value) in request.headers() {
            answer.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("<binary>")));
        }
        println!("echo: {} {}", request.method(), request.uri());
        answer
    });
    axum::serve(listener, router).with_graceful_shutdown(super::shutdown_signal()).await?;
    println!("echo: stopped");
    Ok(())
}
