//! A private etcd server for benchmarks.
//!
//! [`EtcdServer::start`] runs a single-member etcd on two free loopback ports
//! with its data directory in a fresh scratch directory, with etcd's default
//! (durable) settings: every write is fsync'd to the WAL before it is
//! acknowledged. Dropping the server kills the process and removes the
//! directory, also when the benchmark panics.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};

/// Where Debian's `etcd-server` package installs the binary.
pub const DEFAULT_BINARY: &str = "/usr/bin/etcd";

/// A running etcd; killed and cleaned up on drop.
pub struct EtcdServer {
    child: Child,
    endpoint: String,
    log: PathBuf,
    data_dir: PathBuf,
    // Dropped after `Drop::drop` has killed the process.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdServer").field("pid", &self.child.id()).field("endpoint", &self.endpoint).finish()
    }
}

/// Two distinct free loopback ports (held open together while picked, so they
/// differ; another process could still take them before etcd binds).
fn free_ports() -> std::io::Result<(u16, u16)> {
    let a = TcpListener::bind("127.0.0.1:0")?;
    let b = TcpListener::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

impl EtcdServer {
    /// Starts `binary` with its data in a new directory under `parent`, and
    /// waits (up to `timeout`) until it serves requests. `extra_args` are
    /// appended to the command line (e.g. `--enable-pprof` for diagnosis).
    pub async fn start(
        binary: &Path,
        parent: &Path,
        extra_args: &[String],
        timeout: Duration,
    ) -> Result<EtcdServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("etcd-")
            .tempdir_in(parent)
            .map_err(|e| format!("cannot create etcd directory in {}: {e}", parent.display()))?;
        let data_dir = dir.path().join("data");
        let log = dir.path().join("etcd.log");
        let (client_port, peer_port) = free_ports().map_err(|e| format!("cannot pick ports: {e}"))?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log_file = File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let child = Command::new(binary)
            .arg("--name=default")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            .arg("--initial-cluster-state=new")
            .args(extra_args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        let mut server = EtcdServer { child, endpoint: client_url, log, data_dir, _dir: dir };
        server.wait_ready(timeout).await?;
        Ok(server)
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last_error = String::from("not tried");
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("etcd exited with {status} during start-up; log:\n{}", self.log_tail(20)));
            }
            match self.connect().await {
                Ok(mut client) => match client.status().await {
                    Ok(_) => return Ok(()),
                    Err(e) => last_error = e.to_string(),
                },
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("etcd did not answer within {timeout:?} ({last_error}); log:\n{}", self.log_tail(20)))
    }

    /// A new client with its own connection (channel) to the server. Clones
    /// of the returned client share that connection.
    pub async fn connect(&self) -> Result<Client, etcd_client::Error> {
        let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        Client::connect([self.endpoint.as_str()], Some(options)).await
    }

    /// `count` clients, each with its own connection.
    pub async fn connect_pool(&self, count: usize) -> Result<Vec<Client>, etcd_client::Error> {
        let mut pool = Vec::with_capacity(count);
        for _ in 0..count.max(1) {
            pool.push(self.connect().await?);
        }
        Ok(pool)
    }

    /// The client URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The data directory (`--data-dir`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The last `lines` lines of etcd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// True while the process is running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The server version, as etcd reports it (`3.4.23`).
    pub async fn version(&self) -> Result<String, etcd_client::Error> {
        let mut client = self.connect().await?;
        Ok(client.status().await?.version().to_owned())
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
