//! Liveness, readiness and startup probes: running one (exec through the
//! runtime, HTTP GET, TCP connect) and the per-container state machine
//! (initial delay, period, thresholds).

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::runtime::{ContainerId, RuntimeBackend};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeType {
    /// `livenessProbe`: failure restarts the container.
    Liveness,
    /// `readinessProbe`: failure takes the pod out of service.
    Readiness,
    /// `startupProbe`: gates the other two; failure restarts.
    Startup,
}

impl ProbeType {
    /// `Liveness`, `Readiness` or `Startup` (as in event messages).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }
}

/// Outcome of one probe run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeResult {
    /// It passed.
    Success,
    /// It failed, with the output or cause for the `Unhealthy` event.
    Failure(String),
}

/// Resolves a probe or hook port (a number or a named container port).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => name.parse().ok().or_else(|| {
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
        }),
    }
}

/// Why an HTTP GET of a probe or hook got no status code: the message the
/// probe's failure or the hook's event carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HttpGetError(String);

/// Sends `GET path` over HTTP/1.1 to `ip:port` with `headers` and returns the
/// status code (used by probes and `httpGet` lifecycle hooks).
pub async fn http_get(ip: IpAddr, port: u16, action: &HTTPGetAction, timeout: Duration) -> Result<u16, HttpGetError> {
    let run = async {
        let mut stream = TcpStream::connect((ip, port)).await.map_err(|e| HttpGetError(e.to_string()))?;
        let path = action.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        let host = match ip {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            IpAddr::V4(v4) => format!("{v4}:{port}"),
        };
        let mut request = format!("GET {path} HTTP/1.1\r\n");
        let headers = action.http_headers.as_deref().unwrap_or_default();
        let has = |name: &str| headers.iter().any(|h| h.name.eq_ignore_ascii_case(name));
        if !has("host") {
            request.push_str(&format!("Host: {host}\r\n"));
        }
        if !has("user-agent") {
            request.push_str("User-Agent: kube-probe/1.33\r\n");
        }
        if !has("accept") {
            request.push_str("Accept: */*\r\n");
        }
        for h in headers {
            request.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        request.push_str("Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| HttpGetError(e.to_string()))?;
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await.map_err(|e| HttpGetError(e.to_string()))?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
            if head.len() > 8192 {
                break;
            }
        }
        let line = String::from_utf8_lossy(&head);
        let line = line.lines().next().unwrap_or_default();
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next().and_then(|c| c.parse::<u16>().ok())) {
            (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
            _ => Err(HttpGetError(format!("malformed HTTP response {line:?}"))),
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => Err(HttpGetError(format!(
            "Get \"http://{ip}:{port}{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            action.path.clone().unwrap_or_default()
        ))),
    }
}

/// Runs `probe` once against a container.
pub async fn run_probe(
    probe: &Probe,
    container: &Container,
    container_id: &ContainerId,
    pod_ip: Option<IpAddr>,
    runtime: &dyn RuntimeBackend,
) -> ProbeResult {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(exec) = &probe.exec {
        let command = exec.command.clone().unwrap_or_default();
        return match runtime.exec_sync(container_id, &command, timeout).await {
            Ok(r) if r.exit_code == 0 => ProbeResult::Success,
            Ok(r) => {
                let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
                out.push_str(&String::from_utf8_lossy(&r.stderr));
                let out = out.trim();
                ProbeResult::Failure(if out.is_empty() {
                    format!("command {command:?} exited with {}", r.exit_code)
                } else {
                    out.to_owned()
                })
            }
            Err(e) => ProbeResult::Failure(e.to_string()),
        };
    }
    if let Some(http) = &probe.http_get {
        let ip = match http.host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => match h.parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => return ProbeResult::Failure(format!("host {h:?} is not an IP address")),
            },
            None => pod_ip,
        };
        let Some(ip) = ip else { return ProbeResult::Failure("the pod has no IP".into()) };
        let Some(port) = resolve_port(&http.port, container) else {
            return ProbeResult::Failure(format!("unknown port {:?}", http.port));
        };
        return match http_get(ip, port, http, timeout).await {
            Ok(code) if (200..400).contains(&code) => ProbeResult::Success,
            Ok(code) => ProbeResult::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Err(e) => ProbeResult::Failure(e.to_string()),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let ip = tcp.host.as_deref().and_then(|h| h.parse::<IpAddr>().ok()).or(pod_ip);
        let Some(ip) = ip else { return ProbeResult::Failure("the pod has no IP".into()) };
        let Some(port) = resolve_port(&tcp.port, container) else {
            return ProbeResult::Failure(format!("unknown port {:?}", tcp.port));
        };
        return match tokio::time::timeout(timeout, TcpStream::connect((ip, port))).await {
            Ok(Ok(_)) => ProbeResult::Success,
            Ok(Err(e)) => ProbeResult::Failure(format!("dial tcp {ip}:{port}: {e}")),
            Err(_) => ProbeResult::Failure(format!("dial tcp {ip}:{port}: i/o timeout")),
        };
    }
    // gRPC and empty handlers: the agent has no client; count as passing.
    ProbeResult::Success
}

/// What a probe's state machine decided after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The result flipped to passing.
    BecameSuccess,
    /// The result flipped to failing (threshold reached), with the cause.
    BecameFailure(String),
    /// A failure below the threshold (or a repeat): an `Unhealthy` event only.
    Failed(String),
    /// Nothing changed.
    Same,
}

/// The state of one probe of one container instance.
#[derive(Debug, Clone)]
pub struct ProbeState {
    /// Which probe.
    pub kind: ProbeType,
    /// The current result: `true` = passing.
    pub passing: bool,
    successes: i32,
    failures: i32,
    /// When it runs next.
    pub next_run: Instant,
    period: Duration,
    success_threshold: i32,
    failure_threshold: i32,
}

impl ProbeState {
    /// A probe of a container started at `started`; the initial result is
    /// passing for liveness, failing for readiness and startup.
    pub fn new(kind: ProbeType, probe: &Probe, started: Instant) -> Self {
        let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        Self {
            kind,
            passing: kind == ProbeType::Liveness,
            successes: 0,
            failures: 0,
            next_run: started + delay,
            period: Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64),
            success_threshold: probe.success_threshold.unwrap_or(1).max(1),
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1),
        }
    }

    /// Records a result at `now`; schedules the next run.
    pub fn record(&mut self, result: ProbeResult, now: Instant) -> Transition {
        self.next_run = now + self.period;
        match result {
            ProbeResult::Success => {
                self.failures = 0;
                self.successes += 1;
                if !self.passing && self.successes >= self.success_threshold {
                    self.passing = true;
                    return Transition::BecameSuccess;
                }
                Transition::Same
            }
            ProbeResult::Failure(cause) => {
                self.successes = 0;
                self.failures += 1;
                if self.failures >= self.failure_threshold && (self.passing || self.kind != ProbeType::Readiness) {
                    let was = self.passing;
                    self.passing = false;
                    self.failures = 0;
                    if was || self.kind != ProbeType::Readiness {
                        return Transition::BecameFailure(cause);
                    }
                }
                Transition::Failed(cause)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader, TCPSocketAction};
    use tokio::net::TcpListener;

    async fn serve(status: &'static str) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes()).await;
            }
        });
        (port, rx)
    }

    fn container_with_port(name: &str, port: u16) -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some(name.into()),
                container_port: port.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn http_probes_against_a_listener() {
        let rt = crate::runtime::sim::SimRuntime::default();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let (ok_port, mut requests) = serve("204 No Content").await;
        let probe = Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::String("http".into()),
                http_headers: Some(vec![HTTPHeader { name: "X-Probe".into(), value: "yes".into() }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = container_with_port("http", ok_port);
        assert_eq!(run_probe(&probe, &c, &"x".into(), Some(local), &rt).await, ProbeResult::Success);
        let request = requests.recv().await.unwrap();
        assert!(request.starts_with("GET /healthz HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("X-Probe: yes\r\n") && request.contains("User-Agent: kube-probe/1.33\r\n"));

        let (bad_port, _rx) = serve("503 Service Unavailable").await;
        let c = container_with_port("http", bad_port);
        assert_eq!(
            run_probe(&probe, &c, &"x".into(), Some(local), &rt).await,
            ProbeResult::Failure("HTTP probe failed with statuscode: 503".into())
        );
        let (redirect, _rx) = serve("302 Found").await;
        let c = container_with_port("http", redirect);
        assert_eq!(run_probe(&probe, &c, &"x".into(), Some(local), &rt).await, ProbeResult::Success);
    }

    #[tokio::test]
    async fn tcp_probes() {
        let rt = crate::runtime::sim::SimRuntime::default();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let probe = |port: u16| Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(port.into()), host: None }),
            ..Default::default()
        };
        let c = Container::default();
        assert_eq!(run_probe(&probe(port), &c, &"x".into(), Some(local), &rt).await, ProbeResult::Success);
        drop(listener);
        assert!(matches!(run_probe(&probe(port), &c, &"x".into(), Some(local), &rt).await, ProbeResult::Failure(_)));
    }

    #[test]
    fn thresholds_and_initial_results() {
        let t0 = Instant::now();
        let probe = Probe {
            initial_delay_seconds: Some(5),
            period_seconds: Some(2),
            failure_threshold: Some(2),
            success_threshold: Some(2),
            ..Default::default()
        };
        let mut live = ProbeState::new(ProbeType::Liveness, &probe, t0);
        assert!(live.passing);
        assert_eq!(live.next_run, t0 + Duration::from_secs(5));
        let fail = || ProbeResult::Failure("x".into());
        assert_eq!(live.record(fail(), t0), Transition::Failed("x".into()));
        assert_eq!(live.next_run, t0 + Duration::from_secs(2));
        assert_eq!(live.record(fail(), t0), Transition::BecameFailure("x".into()));
        let mut ready = ProbeState::new(ProbeType::Readiness, &probe, t0);
        assert!(!ready.passing);
        assert_eq!(ready.record(ProbeResult::Success, t0), Transition::Same);
        assert_eq!(ready.record(ProbeResult::Success, t0), Transition::BecameSuccess);
        assert_eq!(ready.record(fail(), t0), Transition::Failed("x".into()));
        assert_eq!(ready.record(fail(), t0), Transition::BecameFailure("x".into()));
        assert_eq!(ready.record(fail(), t0), Transition::Failed("x".into()));
        assert_eq!(ready.record(fail(), t0), Transition::Failed("x".into()));
        let mut startup = ProbeState::new(ProbeType::Startup, &probe, t0);
        startup.record(fail(), t0);
        assert_eq!(startup.record(fail(), t0), Transition::BecameFailure("x".into()));
    }
}
