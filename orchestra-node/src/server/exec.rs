//! `exec` on the node. A WebSocket upgrade (what `kubectl exec` sends,
//! through the API server) attaches the command's streams with the channel
//! protocol of the kubelet: every binary message starts with its channel —
//! 0 stdin, 1 stdout, 2 stderr, 3 the final `Status`, 4 terminal resizes —
//! and `v5.channel.k8s.io` adds 255, the client's "I closed this stream"
//! signal (`[255, 0]`: end of stdin). A plain `POST` runs the command to
//! completion and answers its output as JSON.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts as _, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::{Inner, attempts, status, url_pairs};
use crate::runtime::{
    ContainerId, ContainerState, ExecRequest, ExecSession, RuntimeBackend, RuntimeError, TerminalSize,
};

/// The WebSocket sub-protocols served, most preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5: the sender closed the stream named by the next byte.
const CLOSE: u8 = 255;

/// How long a plain `POST` exec may run.
const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long output still in flight when the command exits is waited for
/// (a background child of the command may hold the stream open forever).
const DRAIN: Duration = Duration::from_secs(1);

/// The query of `/exec/...` (upstream's `PodExecOptions`): one `command`
/// per argument, and which streams to attach.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Attach stdin.
    pub stdin: bool,
    /// Attach stdout.
    pub stdout: bool,
    /// Attach stderr (never with a terminal: its output is stdout's).
    pub stderr: bool,
    /// Run on a terminal.
    pub tty: bool,
}

impl ExecOptions {
    /// Reads the query; `Err` is the message of the 400.
    pub fn parse(query: Option<&str>) -> Result<ExecOptions, String> {
        let mut options = ExecOptions::default();
        for (key, value) in url_pairs(query.unwrap_or_default()) {
            let flag = matches!(value.as_str(), "1" | "true" | "True" | "TRUE");
            match key.as_str() {
                "command" => options.command.push(value),
                "stdin" => options.stdin = flag,
                "stdout" => options.stdout = flag,
                "stderr" => options.stderr = flag,
                "tty" => options.tty = flag,
                _ => {}
            }
        }
        if options.command.is_empty() {
            return Err("you must specify at least one command for the container".into());
        }
        if options.tty {
            options.stderr = false;
        }
        Ok(options)
    }
}

/// `GET` (WebSocket upgrade) or `POST /exec/{namespace}/{pod}/{container}`.
pub(super) async fn exec(
    State(inner): State<Arc<Inner>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let options = match ExecOptions::parse(request.uri().query()) {
        Ok(options) => options,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let found = match attempts(&inner, &namespace, &pod, &container).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let Some(running) = found.into_iter().find(|c| c.state == ContainerState::Running) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("container {container:?} in pod {pod:?} is not running"),
        );
    };
    if !request.headers().contains_key(header::UPGRADE) {
        return run_to_completion(inner.runtime.as_ref(), &running.id, &options.command).await;
    }
    if !(options.stdin || options.stdout || options.stderr) {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr");
    }
    let offered = request
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(str::trim))
        .any(|p| PROTOCOLS.contains(&p));
    if !offered {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("streaming needs one of the WebSocket protocols {}", PROTOCOLS.join(", ")),
        );
    }
    let (mut parts, _) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let runtime = inner.runtime.clone();
    upgrade.protocols(PROTOCOLS).on_upgrade(move |socket| attach(socket, runtime, running.id, options))
}

/// A plain `POST`: the command's exit code and output as JSON.
async fn run_to_completion(runtime: &dyn RuntimeBackend, id: &ContainerId, command: &[String]) -> Response {
    match runtime.exec_sync(id, command, EXEC_TIMEOUT).await {
        Ok(result) => axum::Json(json!({
            "exitCode": result.exit_code,
            "stdout": String::from_utf8_lossy(&result.stdout),
            "stderr": String::from_utf8_lossy(&result.stderr),
        }))
        .into_response(),
        Err(RuntimeError::Unsupported(why)) => status(StatusCode::NOT_IMPLEMENTED, "NotImplemented", why),
        Err(e) => status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", e.to_string()),
    }
}

/// A message on `channel`.
fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(Bytes::from(bytes))
}

/// The `Status` written on the error channel when the command has exited
/// (or could not start), in the words of upstream's kubelet.
pub(crate) fn final_status(command: &[String], outcome: &Result<i32, RuntimeError>) -> Value {
    match outcome {
        Ok(0) => json!({"metadata": {}, "status": "Success"}),
        Ok(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Err(e) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("Internal error occurred: error executing command in container: {e}"),
            "reason": "InternalError",
            "details": {"causes": [{"message": format!("error executing command in container: {e}")}]},
            "code": 500,
        }),
    }
}

/// The upgraded connection: runs the command with its streams attached and
/// reports its end; a client that goes away kills it.
async fn attach(socket: WebSocket, runtime: Arc<dyn RuntimeBackend>, id: ContainerId, options: ExecOptions) {
    let close_signal = socket.protocol().is_some_and(|p| p == PROTOCOLS[0]);
    let (mut sink, incoming) = socket.split();
    let (out, mut outgoing) = mpsc::channel::<Message>(32);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
        }
        // A normal closure (1000): clients read it as the end of every
        // stream, any other code as an error.
        let normal = CloseFrame { code: close_code::NORMAL, reason: "".into() };
        let _ = sink.send(Message::Close(Some(normal))).await;
    });
    // An empty message on the lowest writable channel tells the client the
    // streams are up, as the kubelet does.
    let first = if options.stdout {
        STDOUT
    } else if options.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = out.send(frame(first, &[])).await;

    let request = ExecRequest { command: options.command.clone(), tty: options.tty, stdin: options.stdin };
    let session = match runtime.exec(&id, request).await {
        Ok(session) => session,
        Err(e) => {
            let status = final_status(&options.command, &Err(e));
            let _ = out.send(frame(ERROR, status.to_string().as_bytes())).await;
            drop(out);
            let _ = writer.await;
            return;
        }
    };
    let ExecSession { stdin, stdout, stderr, resize, exit } = session;
    let mut pumps = vec![tokio::spawn(pump(stdout, options.stdout.then_some(STDOUT), out.clone()))];
    if let Some(stderr) = stderr {
        pumps.push(tokio::spawn(pump(stderr, options.stderr.then_some(STDERR), out.clone())));
    }
    let input = read_client(incoming, stdin, resize, close_signal, options.tty);
    let outcome = tokio::select! {
        outcome = exit => outcome,
        // The client is gone: dropping `exit` kills the command.
        () = input => {
            pumps.iter().for_each(|p| p.abort());
            writer.abort();
            return;
        }
    };
    for pump in &mut pumps {
        if tokio::time::timeout(DRAIN, &mut *pump).await.is_err() {
            pump.abort();
        }
    }
    let status = final_status(&options.command, &outcome);
    let _ = out.send(frame(ERROR, status.to_string().as_bytes())).await;
    drop(out);
    let _ = writer.await;
}

/// Copies a stream of the command to the client's `channel` (or drops it
/// when the client did not ask for it).
async fn pump(mut from: Pin<Box<dyn AsyncRead + Send>>, channel: Option<u8>, out: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Some(channel) = channel
                    && out.send(frame(channel, &buf[..n])).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Reads the client's messages until it closes the connection: stdin data,
/// stdin's end (v5), terminal resizes.
async fn read_client(
    mut incoming: futures::stream::SplitStream<WebSocket>,
    mut stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    resize: Option<Box<dyn Fn(TerminalSize) -> std::io::Result<()> + Send + Sync>>,
    close_signal: bool,
    tty: bool,
) {
    while let Some(Ok(message)) = incoming.next().await {
        let data = match message {
            Message::Binary(data) => data,
            Message::Close(_) => return,
            _ => continue,
        };
        let Some((&channel, payload)) = data.split_first() else { continue };
        match channel {
            STDIN => {
                if let Some(writer) = stdin.as_mut()
                    && (writer.write_all(payload).await.is_err() || writer.flush().await.is_err())
                {
                    stdin = None;
                }
            }
            RESIZE => {
                if let (Some(resize), Ok(size)) = (&resize, serde_json::from_slice::<TerminalSize>(payload)) {
                    let _ = resize(size);
                }
            }
            CLOSE if close_signal && payload.first() == Some(&STDIN) => {
                if let Some(mut writer) = stdin.take()
                    && tty
                {
                    // A terminal has no end of input but the EOF character.
                    let _ = writer.write_all(&[0x04]).await;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_from_the_query() {
        let options = ExecOptions::parse(Some(
            "command=sh&command=-c&command=echo%20hi+there&stdin=true&stdout=1&stderr=true&tty=false",
        ))
        .unwrap();
        assert_eq!(options.command, ["sh", "-c", "echo hi there"]);
        assert!(options.stdin && options.stdout && options.stderr && !options.tty);
        assert_eq!(ExecOptions::parse(Some("command=100%")).unwrap().command, ["100%"]);
        // A terminal has no separate stderr.
        let tty = ExecOptions::parse(Some("command=sh&stdin=true&stdout=true&stderr=true&tty=true")).unwrap();
        assert!(tty.tty && !tty.stderr);
        assert_eq!(
            ExecOptions::parse(Some("stdout=true")).unwrap_err(),
            "you must specify at least one command for the container"
        );
        assert!(ExecOptions::parse(None).is_err());
    }

    #[test]
    fn the_final_status_is_upstreams() {
        let command = ["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        assert_eq!(final_status(&command, &Ok(0)), json!({"metadata": {}, "status": "Success"}));
        let failed = final_status(&command, &Ok(3));
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert_eq!(
            failed["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
        let error = final_status(&command, &Err(RuntimeError::InvalidState("container is Exited".into())));
        assert_eq!((error["reason"].as_str(), error["code"].as_i64()), (Some("InternalError"), Some(500)));
    }
}
