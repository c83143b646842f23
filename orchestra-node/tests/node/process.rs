//! The process backend: the conformance suite, then what only a backend of
//! host processes does (process groups, pod IPs, volumes, cgroups, crash
//! recovery).

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{IpAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use orchestra_node::runtime::cri_log::parse_entry;
use orchestra_node::runtime::images::{ImageCatalog, ImageEntry};
use orchestra_node::runtime::process::{ENV_POD_IP, ENV_VOLUMES, ProcessRuntime, ProcessRuntimeConfig};
use orchestra_node::runtime::{
    ContainerConfig, ContainerResources, ContainerState, ContainerStatus, ExecRequest, Mount, PodSandboxConfig,
    PodSandboxMetadata, RuntimeBackend, RuntimeError, SandboxId, TerminalSize,
};
use orchestra_node::testing::{ExecWorkload, ExitingWorkload, RuntimeBuilder, StubbornWorkload, Suite, Workloads};

const PATIENCE: Duration = Duration::from_secs(20);

fn catalog() -> ImageCatalog {
    ImageCatalog::builder()
        .image("orchestra/sleep", ImageEntry::new(["sleep"]).args(["300"]).size_bytes(1000))
        .image("orchestra/sh", ImageEntry::new(["sh", "-c"]).args(["true"]))
        .image("orchestra/printf", ImageEntry::new(["printf", "%s|"]).args(["image-arg"]))
        .image("orchestra/env", ImageEntry::new(["env"]).env("FROM_IMAGE", "1"))
        .image("orchestra/perl", ImageEntry::new(["perl", "-e"]))
        .image("orchestra/missing", ImageEntry::new(["/nonexistent/program"]))
        .build()
        .expect("test catalog")
}

fn sh(script: &str) -> ContainerConfig {
    ContainerConfig { image: "orchestra/sh".into(), args: vec![script.into()], ..Default::default() }
}

fn config(dir: &Path) -> ProcessRuntimeConfig {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut config =
        ProcessRuntimeConfig::new(dir.join(format!("state{}", N.fetch_add(1, Ordering::Relaxed))), catalog());
    config.node_name = "test-node".into();
    config
}

fn workloads(dir: &Path) -> Workloads {
    let mut workloads = Workloads::new(
        ContainerConfig { image: "orchestra/sleep".into(), ..Default::default() },
        ExitingWorkload {
            config: sh("echo bye from the exiting container; exit 3"),
            line: "bye from the exiting container".into(),
            exit_code: 3,
        },
        "orchestra/does-not-exist:1.0",
        dir.join("logs"),
    );
    workloads.ignores_sigterm =
        Some(StubbornWorkload { config: sh("trap '' TERM; echo stubborn; sleep 300"), ready_line: "stubborn".into() });
    workloads.exec = Some(ExecWorkload {
        command: vec!["sh".into(), "-c".into(), "echo exec says $HOSTNAME".into()],
        stdout_contains: "exec says".into(),
    });
    workloads.host_ip = Some("127.0.0.1".parse().unwrap());
    workloads.patience = PATIENCE;
    workloads
}

/// Process runtimes over one temporary directory, isolated (cgroups and
/// mount namespaces where the host allows them) or not.
struct ProcessBuilder {
    dir: tempfile::TempDir,
    isolation: bool,
}

impl ProcessBuilder {
    fn new(isolation: bool) -> Self {
        ProcessBuilder { dir: tempfile::tempdir().unwrap(), isolation }
    }
}

#[async_trait::async_trait]
impl RuntimeBuilder for ProcessBuilder {
    async fn build(&self) -> Arc<dyn RuntimeBackend> {
        let mut config = config(self.dir.path());
        if !self.isolation {
            config.cgroups = false;
            config.mount_namespaces = false;
        }
        let runtime = ProcessRuntime::new(config).await.expect("process runtime");
        if !self.isolation {
            assert_eq!((runtime.capabilities().cgroups, runtime.capabilities().mount_namespaces), (None, false));
        }
        Arc::new(runtime)
    }

    fn workloads(&self) -> Workloads {
        workloads(self.dir.path())
    }
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod conformance {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    Suite::checks(&ProcessBuilder::new(true)).$check().await;
                }
            )*
        }
    };
}

conformance!(
    version,
    sandbox_addresses,
    sandbox_needs_a_cidr,
    images,
    container_lifecycle,
    logs,
    stop_escalates,
    idempotent_stop_and_remove,
    sandbox_stop_and_removal,
    list_filters,
    exec,
    concurrent_pods,
);

/// The whole suite, in one go, without any isolation: containers spawned
/// directly, no `sh` prelude (what a host without root gets).
#[tokio::test]
async fn conformance_without_isolation() {
    Suite::test_all(&ProcessBuilder::new(false)).await;
}

/// A runtime with a pod CIDR, and helpers to run one-container pods.
struct Node {
    dir: tempfile::TempDir,
    runtime: ProcessRuntime,
}

static PODS: AtomicU64 = AtomicU64::new(0);

impl Node {
    async fn new() -> Self {
        Self::with(|_| {}).await
    }

    async fn with(tweak: impl FnOnce(&mut ProcessRuntimeConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        tweak(&mut config);
        let runtime = ProcessRuntime::new(config).await.expect("process runtime");
        runtime.update_runtime_config("127.78.0.0/24").await.unwrap();
        Self { dir, runtime }
    }

    fn pod(&self, name: &str) -> PodSandboxConfig {
        let uid = format!("uid-{}", PODS.fetch_add(1, Ordering::Relaxed));
        PodSandboxConfig {
            metadata: PodSandboxMetadata { name: name.into(), namespace: "test".into(), uid: uid.clone(), attempt: 0 },
            hostname: name.into(),
            log_directory: self.dir.path().join("logs").join(format!("test_{name}_{uid}")),
            ..Default::default()
        }
    }

    /// Runs `container` in a new pod; returns the sandbox, container id and pod.
    async fn run(&self, name: &str, mut container: ContainerConfig) -> (SandboxId, String, PodSandboxConfig) {
        let pod = self.pod(name);
        let sandbox = self.runtime.run_pod_sandbox(&pod).await.unwrap();
        container.name = "main".into();
        container.log_path = "main/0.log".into();
        let id = self.runtime.create_container(&sandbox, &container, &pod).await.unwrap();
        self.runtime.start_container(&id).await.unwrap_or_else(|e| panic!("{name}: start failed: {e}"));
        (sandbox, id, pod)
    }

    async fn status(&self, id: &String) -> ContainerStatus {
        self.runtime.container_status(id).await.unwrap()
    }

    async fn wait_exited(&self, id: &String) -> ContainerStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.status(id).await;
            if status.state == ContainerState::Exited {
                return status;
            }
            assert!(Instant::now() < deadline, "container did not exit: {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The container's output so far, `P` entries joined to their line.
    fn output(&self, status: &ContainerStatus) -> String {
        let bytes = std::fs::read(&status.log_path).unwrap_or_default();
        let mut out = Vec::new();
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let entry = parse_entry(line).expect("CRI log line");
            out.extend_from_slice(&entry.content);
            if entry.complete {
                out.push(b'\n');
            }
        }
        String::from_utf8(out).unwrap()
    }

    /// Waits until the container's output contains `text`.
    async fn wait_output(&self, id: &String, text: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.status(id).await;
            let output = self.output(&status);
            if output.contains(text) {
                return output;
            }
            assert!(Instant::now() < deadline, "no {text:?} in the output {output:?} of {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()))
        .is_some_and(|state| state != 'Z' && state != 'X')
}

async fn wait_dead(pid: i32) {
    let deadline = Instant::now() + PATIENCE;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn command_and_args_follow_kubernetes() {
    let node = Node::new().await;
    let image = |command: &[&str], args: &[&str]| ContainerConfig {
        image: "orchestra/printf".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    for (name, config, expected) in [
        ("defaults", image(&[], &[]), "image-arg|"),
        ("args", image(&[], &["x", "y"]), "x|y|"),
        ("command", image(&["echo", "from-command"], &[]), "from-command\n"),
        ("both", image(&["printf", "<%s>"], &["a"]), "<a>"),
    ] {
        let (_, id, _) = node.run(name, config).await;
        let status = node.wait_exited(&id).await;
        assert_eq!((status.exit_code, status.reason.as_deref()), (Some(0), Some("Completed")), "{name}");
        assert_eq!(node.output(&status), expected, "{name}");
    }
}

#[tokio::test]
async fn environment_is_exactly_the_given_one() {
    let node = Node::new().await;
    let config = ContainerConfig {
        image: "orchestra/env".into(),
        envs: vec![("A".into(), "1".into()), ("A".into(), "2".into()), ("B".into(), "with space".into())],
        ..Default::default()
    };
    let (sandbox, id, _) = node.run("envpod", config).await;
    let status = node.wait_exited(&id).await;
    let env: BTreeMap<String, String> = node
        .output(&status)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let ip = node.runtime.pod_sandbox_status(&sandbox).await.unwrap().ip.unwrap().to_string();
    let keys: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(keys, ["A", "B", "FROM_IMAGE", "HOSTNAME", ENV_POD_IP, "PATH"], "{env:?}");
    assert_eq!((env["A"].as_str(), env["B"].as_str(), env["HOSTNAME"].as_str()), ("2", "with space", "envpod"));
    assert_eq!(env[ENV_POD_IP], ip);
}

#[tokio::test]
async fn pods_listen_on_their_own_address() {
    let node = Node::new().await;
    let server = "use IO::Socket::INET; \
        my $s = IO::Socket::INET->new(LocalAddr => $ENV{ORCHESTRA_POD_IP}, LocalPort => 18080, Listen => 5, ReuseAddr => 1) or die \"bind: $!\"; \
        $| = 1; print \"listening on $ENV{ORCHESTRA_POD_IP}\\n\"; \
        while (my $c = $s->accept) { print $c \"hello from $ENV{HOSTNAME}\"; close $c; }";
    let perl = || ContainerConfig { image: "orchestra/perl".into(), args: vec![server.into()], ..Default::default() };
    let mut pods = Vec::new();
    for name in ["web-a", "web-b"] {
        let (sandbox, id, _) = node.run(name, perl()).await;
        let ip: IpAddr = node.runtime.pod_sandbox_status(&sandbox).await.unwrap().ip.unwrap();
        assert!(ip.to_string().starts_with("127.78.0."), "{ip}");
        node.wait_output(&id, &format!("listening on {ip}")).await;
        pods.push((name, ip));
    }
    // Both listen on the same port, each on its own address.
    for (name, ip) in pods {
        let answer = tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect_timeout(&(ip, 18080).into(), PATIENCE).expect("connect to the pod");
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        })
        .await
        .unwrap();
        assert_eq!(answer, format!("hello from {name}"));
    }
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn the_whole_process_group_dies() {
    let node = Node::new().await;
    // The main process exits: its background child dies with it.
    let (_, id, _) = node.run("leaver", sh("sleep 300 & echo child=$!; exit 0")).await;
    let output = node.wait_output(&id, "child=").await;
    let child: i32 = output.trim().strip_prefix("child=").unwrap().parse().unwrap();
    node.wait_exited(&id).await;
    wait_dead(child).await;

    // Stopped: SIGTERM reaches every process of the group.
    let (_, id, _) = node.run("stopped", sh("sleep 300 & echo child=$!; wait")).await;
    let output = node.wait_output(&id, "child=").await;
    let child: i32 = output.trim().strip_prefix("child=").unwrap().parse().unwrap();
    let main = node.status(&id).await.pid.expect("a running container has a pid") as i32;
    assert!(alive(child) && alive(main));
    node.runtime.stop_container(&id, PATIENCE).await.unwrap();
    assert!(!alive(main), "stop_container returned before the container exited");
    wait_dead(child).await;
    assert_eq!(node.status(&id).await.exit_code, Some(143), "sh killed by SIGTERM");
}

#[tokio::test]
async fn start_failures_are_start_errors() {
    let node = Node::new().await;
    let pod = node.pod("broken");
    let sandbox = node.runtime.run_pod_sandbox(&pod).await.unwrap();
    let config = ContainerConfig {
        name: "main".into(),
        image: "orchestra/missing".into(),
        log_path: "main/0.log".into(),
        ..Default::default()
    };
    let id = node.runtime.create_container(&sandbox, &config, &pod).await.unwrap();
    match node.runtime.start_container(&id).await {
        Err(RuntimeError::StartFailed(message)) => assert!(message.contains("/nonexistent/program"), "{message}"),
        other => panic!("expected StartFailed, got {other:?}"),
    }
    let status = node.status(&id).await;
    assert_eq!(
        (status.state, status.exit_code, status.reason.as_deref()),
        (ContainerState::Exited, Some(128), Some("StartError"))
    );
    assert!(status.message.unwrap().contains("no such file"));

    // A working directory that does not exist is not created on the host.
    let nowhere = ContainerConfig { working_dir: Some("/nonexistent-orchestra-wd".into()), ..sh("true") };
    let nowhere = ContainerConfig { name: "nowhere".into(), log_path: "nowhere/0.log".into(), ..nowhere };
    let id = node.runtime.create_container(&sandbox, &nowhere, &pod).await.unwrap();
    assert!(matches!(node.runtime.start_container(&id).await, Err(RuntimeError::StartFailed(_))));
    assert_eq!(node.status(&id).await.reason.as_deref(), Some("StartError"));
    assert!(!Path::new("/nonexistent-orchestra-wd").exists());

    let unknown = ContainerConfig { image: "orchestra/nope".into(), ..config };
    assert!(matches!(
        node.runtime.create_container(&sandbox, &unknown, &pod).await,
        Err(RuntimeError::ImageNotFound { .. })
    ));
}

#[tokio::test]
async fn exec_runs_in_the_container_and_times_out() {
    let node = Node::new().await;
    let config = ContainerConfig { envs: vec![("GREETING".into(), "hi".into())], ..sh("exec sleep 300") };
    let (_, id, _) = node.run("exec", config).await;
    let work = node
        .runtime
        .exec_sync(&id, &["sh".into(), "-c".into(), "echo $GREETING; pwd; echo oops >&2; exit 7".into()], PATIENCE)
        .await
        .unwrap();
    assert_eq!(work.exit_code, 7);
    let stdout = String::from_utf8(work.stdout).unwrap();
    assert!(stdout.starts_with("hi\n"), "{stdout}");
    assert!(
        stdout.contains(node.runtime.state_dir().to_str().unwrap()),
        "default working dir under the state dir: {stdout}"
    );
    assert_eq!(work.stderr, b"oops\n");

    let began = Instant::now();
    match node.runtime.exec_sync(&id, &["sleep".into(), "30".into()], Duration::from_millis(300)).await {
        Err(RuntimeError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(began.elapsed() < PATIENCE);
    let missing = node.runtime.exec_sync(&id, &["no-such-command".into()], PATIENCE).await.unwrap();
    assert_eq!(missing.exit_code, 127);
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

/// Reads a session's stream to its end.
async fn read_all(mut stream: orchestra_node::runtime::ExecOutput) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out)).await.expect("the stream ends").unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn exec_streams_stdin_stdout_and_stderr() {
    use tokio::io::AsyncWriteExt;
    let node = Node::new().await;
    let config = ContainerConfig { envs: vec![("GREETING".into(), "hi".into())], ..sh("exec sleep 300") };
    let (_, id, _) = node.run("exec-stream", config).await;
    let command =
        ["sh", "-c", "read line; echo \"$GREETING $line\"; cat; echo oops >&2; exit 3"].map(String::from).to_vec();
    let session = node.runtime.exec(&id, ExecRequest { command, tty: false, stdin: true }).await.unwrap();
    assert!(session.resize.is_none());
    let mut stdin = session.stdin.expect("stdin asked for");
    let stdout = tokio::spawn(read_all(session.stdout));
    let stderr = tokio::spawn(read_all(session.stderr.expect("no terminal: stderr apart")));
    stdin.write_all(b"there\nrest of the input\n").await.unwrap();
    drop(stdin);
    assert_eq!(tokio::time::timeout(PATIENCE, session.exit).await.unwrap().unwrap(), 3);
    assert_eq!(stdout.await.unwrap(), "hi there\nrest of the input\n");
    assert_eq!(stderr.await.unwrap(), "oops\n");

    // An unknown command exits 127 with the shell's message.
    let missing = ExecRequest { command: vec!["no-such-command".into()], tty: false, stdin: false };
    let session = node.runtime.exec(&id, missing).await.unwrap();
    assert_eq!(session.exit.await.unwrap(), 127);
    assert!(read_all(session.stderr.unwrap()).await.contains("no-such-command"));

    // Dropping the session kills what it runs.
    let marker = node.runtime.state_dir().join("killed-marker");
    let command = ["sh", "-c", &format!("sleep 2; touch {}", marker.display())].map(String::from).to_vec();
    let session = node.runtime.exec(&id, ExecRequest { command, tty: false, stdin: false }).await.unwrap();
    drop(session);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!marker.exists(), "the command of a dropped session still ran");
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn exec_on_a_terminal_has_a_controlling_tty_and_resizes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = Node::new().await;
    let (_, id, _) = node.run("exec-tty", sh("exec sleep 300")).await;
    let command = ["sh", "-c", "tty; read go; stty size; echo bye >&2; exit 5"].map(String::from).to_vec();
    let session = node.runtime.exec(&id, ExecRequest { command, tty: true, stdin: true }).await.unwrap();
    assert!(session.stderr.is_none(), "a terminal has one output stream");
    let resize = session.resize.expect("a terminal can be resized");
    let mut stdin = session.stdin.unwrap();
    let mut stdout = session.stdout;
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("/dev/pts/") {
        let n = tokio::time::timeout(PATIENCE, stdout.read(&mut buf)).await.expect("tty output").unwrap();
        assert!(n > 0, "output ended early: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    resize(TerminalSize { width: 132, height: 43 }).unwrap();
    stdin.write_all(b"\n").await.unwrap();
    let rest = read_all(stdout).await;
    assert_eq!(tokio::time::timeout(PATIENCE, session.exit).await.unwrap().unwrap(), 5);
    // The terminal echoes the input and turns \n into \r\n; stderr is on it too.
    assert!(rest.contains("43 132\r\n") && rest.contains("bye\r\n"), "{rest:?}");
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

/// A directory with one file, for volumes.
fn volume(root: &Path, name: &str, content: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), content).unwrap();
    dir
}

#[tokio::test]
async fn volumes_appear_at_their_mount_path_and_the_host_stays_clean() {
    let node = Node::new().await;
    if !node.runtime.capabilities().mount_namespaces {
        eprintln!("skipped: no mount namespaces here ({:?})", node.runtime.capabilities().notes);
        return;
    }
    let host = node.dir.path();
    let unique = format!("orchestra-test-{}-{}", std::process::id(), PODS.fetch_add(1, Ordering::Relaxed));
    let top = PathBuf::from("/").join(&unique); // absent on the host: / is replicated
    let existing = volume(host, "existing-mount-point", "host content"); // present: mounted over
    let nested_parent = host.join("parent"); // present, with a missing child path
    std::fs::create_dir_all(&nested_parent).unwrap();
    let (ro, rw, over, nested) = (
        volume(host, "ro", "read-only data"),
        volume(host, "rw", "writable"),
        volume(host, "over", "volume content"),
        volume(host, "nested", "deep"),
    );
    // Writable by the container's (unprivileged) user, as an emptyDir is.
    std::fs::set_permissions(&rw, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mounts = vec![
        Mount { container_path: top.join("config"), host_path: ro.clone(), read_only: true },
        Mount { container_path: top.join("data"), host_path: rw.clone(), read_only: false },
        Mount { container_path: existing.clone(), host_path: over.clone(), read_only: false },
        Mount { container_path: nested_parent.join("missing/deeper"), host_path: nested.clone(), read_only: false },
    ];
    let script = format!(
        "cat {top}/config/hello.txt; echo; cat {existing}/hello.txt; echo; cat {parent}/missing/deeper/hello.txt; echo; \
         touch {top}/config/new 2>/dev/null && echo ro-writable || echo ro-refused; \
         echo written > {top}/data/out.txt; ls {parent}; echo ready; exec sleep 300",
        top = top.display(),
        existing = existing.display(),
        parent = nested_parent.display()
    );
    let (_, id, _) = node.run("volumes", ContainerConfig { mounts, ..sh(&script) }).await;
    let output = node.wait_output(&id, "ready").await;
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines, ["read-only data", "volume content", "deep", "ro-refused", "missing", "ready"], "{output}");
    assert_eq!(std::fs::read_to_string(rw.join("out.txt")).unwrap(), "written\n");
    // exec sees the container's mounts.
    let exec = node
        .runtime
        .exec_sync(&id, &["cat".into(), top.join("data/out.txt").display().to_string()], PATIENCE)
        .await
        .unwrap();
    assert_eq!(
        (exec.exit_code, exec.stdout.as_slice()),
        (0, &b"written\n"[..]),
        "{:?}",
        String::from_utf8_lossy(&exec.stderr)
    );

    // The host saw none of it.
    assert!(!top.exists(), "{} was created on the host", top.display());
    assert!(!nested_parent.join("missing").exists(), "a missing mount point was created on the host");
    assert_eq!(std::fs::read_to_string(existing.join("hello.txt")).unwrap(), "host content");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&unique) && !mountinfo.contains(existing.to_str().unwrap()),
        "mounts leaked to the host"
    );
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_bad_mount_point_is_a_start_error() {
    let node = Node::new().await;
    if !node.runtime.capabilities().mount_namespaces {
        return;
    }
    let file = node.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let data = volume(node.dir.path(), "data", "x");
    let pod = node.pod("badmount");
    let sandbox = node.runtime.run_pod_sandbox(&pod).await.unwrap();
    let config = ContainerConfig {
        name: "main".into(),
        log_path: "main/0.log".into(),
        mounts: vec![Mount { container_path: file.join("below"), host_path: data, read_only: false }],
        ..sh("echo never")
    };
    let id = node.runtime.create_container(&sandbox, &config, &pod).await.unwrap();
    match node.runtime.start_container(&id).await {
        Err(RuntimeError::StartFailed(message)) => assert!(message.contains("orchestra:"), "{message}"),
        other => panic!("expected StartFailed, got {other:?}"),
    }
    let status = node.status(&id).await;
    assert_eq!((status.exit_code, status.reason.as_deref()), (Some(128), Some("StartError")));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[tokio::test]
async fn without_namespaces_volumes_are_symlinks() {
    let node = Node::with(|c| c.mount_namespaces = false).await;
    assert!(!node.runtime.capabilities().mount_namespaces);
    let data = volume(node.dir.path(), "data", "via a link");
    let mounts = vec![Mount { container_path: "/srv/data".into(), host_path: data, read_only: true }];
    let (_, id, _) =
        node.run("links", ContainerConfig { mounts, ..sh(&format!("cat ${ENV_VOLUMES}/srv/data/hello.txt")) }).await;
    let status = node.wait_exited(&id).await;
    assert_eq!((status.exit_code, node.output(&status).as_str()), (Some(0), "via a link"));
}

#[tokio::test]
async fn memory_limits_oom_kill() {
    let node = Node::new().await;
    let Some(version) = node.runtime.capabilities().cgroups else {
        eprintln!("skipped: no cgroups here ({:?})", node.runtime.capabilities().notes);
        return;
    };
    let resources = ContainerResources {
        memory_limit_bytes: Some(24 << 20),
        cpu_limit_millis: Some(500),
        cpu_request_millis: Some(250),
        pids_limit: None,
    };
    // `tail` keeps a line without newline whole: 256 MiB of it.
    let (_, id, _) = node
        .run(
            "oom",
            ContainerConfig { resources, ..sh("echo start; head -c 268435456 /dev/zero | tail -n 1 > /dev/null") },
        )
        .await;
    let status = node.wait_exited(&id).await;
    assert_eq!((status.reason.as_deref(), status.exit_code), (Some("OOMKilled"), Some(137)), "{version:?}: {status:?}");

    // The limits are written to the container's cgroup.
    let (_, id, _) = node.run("limits", ContainerConfig { resources, ..sh("exec sleep 300") }).await;
    let pid = node.status(&id).await.pid.unwrap();
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(cgroups.contains(&id), "the container runs in its own cgroup: {cgroups}");
    let controller_dir = |controller: &str| {
        let line = cgroups
            .lines()
            .find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == controller)))
            .unwrap();
        PathBuf::from(format!("/sys/fs/cgroup/{controller}"))
            .join(line.splitn(3, ':').nth(2).unwrap().trim_start_matches('/'))
    };
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_owned()
    };
    match version {
        orchestra_node::runtime::process::CgroupVersion::V1 => {
            assert_eq!(read(controller_dir("memory").join("memory.limit_in_bytes")), (24u64 << 20).to_string());
            assert_eq!(read(controller_dir("cpu").join("cpu.cfs_quota_us")), "50000");
            assert_eq!(read(controller_dir("cpu").join("cpu.shares")), "256");
        }
        orchestra_node::runtime::process::CgroupVersion::V2 => {
            let dir = PathBuf::from("/sys/fs/cgroup")
                .join(cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap().trim_start_matches('/'));
            assert_eq!(read(dir.join("memory.max")), (24u64 << 20).to_string());
            assert_eq!(read(dir.join("cpu.max")), "50000 100000");
        }
    }
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_successor_kills_only_what_a_crashed_runtime_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = config(dir.path());
    first.kill_on_drop = false;
    let state_dir = first.state_dir.clone();
    let crashed = ProcessRuntime::new(first).await.unwrap();
    crashed.update_runtime_config("127.79.0.0/24").await.unwrap();
    let pod = PodSandboxConfig {
        metadata: PodSandboxMetadata { name: "left".into(), namespace: "test".into(), uid: "u".into(), attempt: 0 },
        log_directory: dir.path().join("logs"),
        ..Default::default()
    };
    let sandbox = crashed.run_pod_sandbox(&pod).await.unwrap();
    let container =
        ContainerConfig { name: "main".into(), log_path: "main.log".into(), ..sh("sleep 300 & exec sleep 301") };
    let id = crashed.create_container(&sandbox, &container, &pod).await.unwrap();
    crashed.start_container(&id).await.unwrap();
    let leftover = crashed.container_status(&id).await.unwrap().pid.unwrap() as i32;
    // Not started by any runtime: must survive.
    let mut unrelated = std::process::Command::new("sleep").arg("300").process_group(0).spawn().unwrap();
    let unrelated_pid = unrelated.id() as i32;

    drop(crashed); // a crash: no shutdown, the container keeps running
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(alive(leftover), "kill_on_drop = false leaves the container running");

    // One runtime per state directory.
    let busy = Node::new().await;
    let taken = ProcessRuntime::new(ProcessRuntimeConfig::new(busy.runtime.state_dir(), catalog())).await;
    assert!(matches!(taken, Err(RuntimeError::InvalidState(_))), "{taken:?}");

    let mut second = ProcessRuntimeConfig::new(&state_dir, catalog());
    second.node_name = "test-node".into();
    let successor = ProcessRuntime::new(second).await.unwrap();
    assert_eq!(successor.leftovers().killed_groups, [leftover]);
    wait_dead(leftover).await;
    assert!(alive(unrelated_pid), "an unrelated process was touched");
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
    // Nothing left to clean for the next one.
    drop(successor);
    let third = ProcessRuntime::new(ProcessRuntimeConfig::new(&state_dir, catalog())).await.unwrap();
    assert!(third.leftovers().killed_groups.is_empty());
}

#[tokio::test]
async fn dropping_the_runtime_kills_its_containers() {
    let node = Node::new().await;
    let (_, id, _) = node.run("dropped", sh("exec sleep 300")).await;
    let pid = node.status(&id).await.pid.unwrap() as i32;
    drop(node.runtime);
    wait_dead(pid).await;
}

/// The process's own `/proc/self/status` line `field` (its value).
fn own_status(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_default().trim().to_owned()
}

/// What the container says about itself: uid, gid, groups, effective and
/// bounding capabilities, no_new_privs.
const IDENTITY: &str = "echo $(id -u) $(id -g) \"$(id -G)\" \
    $(sed -n 's/^CapEff:[[:space:]]*//p; s/^CapBnd:[[:space:]]*//p; s/^NoNewPrivs:[[:space:]]*//p' /proc/self/status)";

#[tokio::test]
async fn containers_run_as_their_user_without_privileges() {
    let node = Node::new().await;
    let caps = node.runtime.capabilities().clone();
    if !caps.run_as_user {
        eprintln!("skipped: the runtime cannot switch users here ({:?})", caps.notes);
        return;
    }
    use orchestra_node::runtime::SecurityContext;
    // Docker's default set: chown dac_override fowner fsetid kill setgid
    // setuid setpcap net_bind_service net_raw sys_chroot mknod audit_write
    // setfcap.
    let default_set = "00000000a80425fb";
    let own = (own_status("CapEff"), own_status("CapBnd"));
    // (securityContext, expected "uid gid groups CapEff CapBnd NoNewPrivs")
    #[rustfmt::skip]
    let cases: Vec<(SecurityContext, String)> = vec![
        (SecurityContext::default(), format!("65534 65534 65534 0000000000000000 {default_set} 1")),
        (SecurityContext { run_as_user: Some(1000), run_as_group: Some(3000), supplemental_groups: vec![4000, 5000], ..Default::default() },
         format!("1000 3000 3000 4000 5000 0000000000000000 {default_set} 1")),
        // Root in the container: Docker's set, less what is dropped.
        (SecurityContext { run_as_user: Some(0), drop_capabilities: vec!["ALL".into()], add_capabilities: vec!["NET_BIND_SERVICE".into()], ..Default::default() },
         "0 0 0 0000000000000400 0000000000000400 1".into()),
        (SecurityContext { run_as_user: Some(0), ..Default::default() },
         format!("0 0 0 {default_set} {default_set} 1")),
        // A non-root user gets no capability, whatever it adds.
        (SecurityContext { run_as_user: Some(1000), run_as_group: Some(1000), add_capabilities: vec!["NET_ADMIN".into()], ..Default::default() },
         "1000 1000 1000 0000000000000000 00000000a80435fb 1".into()),
        (SecurityContext { allow_privilege_escalation: Some(true), ..Default::default() },
         format!("65534 65534 65534 0000000000000000 {default_set} 0")),
        // Privileged: root with the agent's own capabilities.
        (SecurityContext { privileged: true, ..Default::default() }, format!("0 0 0 {} {} 0", own.0, own.1)),
    ];
    for (security, expected) in cases {
        let (_, id, _) = node.run("identity", ContainerConfig { security: security.clone(), ..sh(IDENTITY) }).await;
        let status = node.wait_exited(&id).await;
        assert_eq!(node.output(&status).trim(), expected, "{security:?}: {status:?}");
        // exec runs as the container's user too.
        if security == SecurityContext::default() {
            let (_, id, _) =
                node.run("exec-identity", ContainerConfig { security: security.clone(), ..sh("exec sleep 300") }).await;
            let exec =
                node.runtime.exec_sync(&id, &["sh".into(), "-c".into(), IDENTITY.into()], PATIENCE).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&exec.stdout).trim(), expected);
            node.runtime.stop_container(&id, Duration::ZERO).await.unwrap();
        }
    }
}

#[tokio::test]
async fn run_as_non_root_refuses_root() {
    let node = Node::new().await;
    let pod = node.pod("nonroot");
    let sandbox = node.runtime.run_pod_sandbox(&pod).await.unwrap();
    let security =
        orchestra_node::runtime::SecurityContext { run_as_user: Some(0), run_as_non_root: true, ..Default::default() };
    let config = ContainerConfig { name: "main".into(), security, ..sh("true") };
    let refused = node.runtime.create_container(&sandbox, &config, &pod).await.unwrap_err();
    let expected = format!(
        "container's runAsUser breaks non-root policy (pod: \"nonroot_test({})\", container: main)",
        pod.metadata.uid
    );
    assert!(matches!(&refused, RuntimeError::ConfigRefused(m) if *m == expected), "{refused:?}");
}

#[tokio::test]
async fn hidden_paths_are_empty_in_containers() {
    let outside = tempfile::tempdir().unwrap();
    // A cluster's data directory: its CA key, a pod's volume inside it,
    // and a kubeconfig beside it.
    let data = outside.path().join("data");
    std::fs::create_dir_all(data.join("pki")).unwrap();
    std::fs::write(data.join("pki/ca.key"), "the CA key").unwrap();
    std::fs::set_permissions(data.join("pki/ca.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let volume_dir = volume(&data.join("pods/uid/volumes"), "config", "volume content");
    let kubeconfig = outside.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, "admin credentials").unwrap();
    let mount_point = outside.path().join("mnt");
    std::fs::create_dir_all(&mount_point).unwrap();
    let (data2, kubeconfig2) = (data.clone(), kubeconfig.clone());
    let node = Node::with(move |config| {
        *config = config.clone().with_hidden_paths([data2, kubeconfig2]);
    })
    .await;
    if !node.runtime.capabilities().hidden_paths {
        eprintln!("skipped: no mount namespaces here ({:?})", node.runtime.capabilities().notes);
        return;
    }
    let mounts = vec![Mount { container_path: mount_point.clone(), host_path: volume_dir.clone(), read_only: true }];
    // Root in the container, so that only the hiding keeps it out.
    let security = orchestra_node::runtime::SecurityContext { run_as_user: Some(0), ..Default::default() };
    let script = format!(
        "cat {data}/pki/ca.key 2>&1 || echo no-ca-key; ls -A {data} | wc -l; echo \"[$(cat {kubeconfig})]\"; \
         touch {data}/x 2>/dev/null && echo data-writable || echo data-read-only; \
         cat {mnt}/hello.txt; echo; echo work > here && cat here; ls -A {state} | wc -l; echo ready; exec sleep 300",
        data = data.display(),
        kubeconfig = kubeconfig.display(),
        mnt = mount_point.display(),
        state = node.runtime.state_dir().display(),
    );
    let (_, id, _) = node.run("hidden", ContainerConfig { mounts, security, ..sh(&script) }).await;
    let output = node.wait_output(&id, "ready").await;
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), 9, "{output}");
    assert!(lines[0].contains("No such file"), "{output}");
    // The data directory is empty, the kubeconfig too; the volume and the
    // working directory (both under hidden paths) still work; of the
    // state directory only the way to the working directory is left.
    assert_eq!(
        lines[1..].to_vec(),
        ["no-ca-key", "0", "[]", "data-read-only", "volume content", "work", "1", "ready"],
        "{output}"
    );
    // exec sees what the container sees.
    let command = vec!["cat".to_owned(), data.join("pki/ca.key").display().to_string()];
    let exec = node.runtime.exec_sync(&id, &command, PATIENCE).await.unwrap();
    assert_ne!(exec.exit_code, 0, "{:?}", String::from_utf8_lossy(&exec.stdout));
    // The host still has it all.
    assert_eq!(std::fs::read_to_string(data.join("pki/ca.key")).unwrap(), "the CA key");
    node.runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn root_containers_see_a_read_only_host() {
    let node = Node::new().await;
    let caps = node.runtime.capabilities().clone();
    if !caps.run_as_user || !caps.mount_namespaces {
        eprintln!("skipped: no user switch or mount namespaces here ({:?})", caps.notes);
        return;
    }
    use orchestra_node::runtime::SecurityContext;
    let rw = volume(node.dir.path(), "rw", "x");
    let ro = volume(node.dir.path(), "ro", "x");
    let mounts = vec![
        Mount { container_path: "/orchestra-rw".into(), host_path: rw.clone(), read_only: false },
        Mount { container_path: "/orchestra-ro".into(), host_path: ro.clone(), read_only: true },
    ];
    let script = r#"for p in /etc/orchestra-probe /usr/orchestra-probe /proc/sys/vm/orchestra-probe /orchestra-ro/w \
                  /orchestra-rw/w /tmp/orchestra-probe-$$ ./w; do \
                  if (: > "$p") 2>/dev/null; then echo "$p writable"; rm -f "$p"; else echo "$p refused"; fi; done"#;
    // (security context, expected output)
    #[rustfmt::skip]
    let cases: Vec<(SecurityContext, &str)> = vec![
        (SecurityContext { run_as_user: Some(0), ..Default::default() },
         "/etc/orchestra-probe refused\n/usr/orchestra-probe refused\n/proc/sys/vm/orchestra-probe refused\n\
          /orchestra-ro/w refused\n/orchestra-rw/w writable\n/tmp/orchestra-probe-PID writable\n./w writable"),
        // Privileged: the host's as it is (the probes are removed again).
        (SecurityContext { privileged: true, ..Default::default() },
         "/etc/orchestra-probe writable\n/usr/orchestra-probe writable\n/proc/sys/vm/orchestra-probe refused\n\
          /orchestra-ro/w refused\n/orchestra-rw/w writable\n/tmp/orchestra-probe-PID writable\n./w writable"),
    ];
    for (security, expected) in cases {
        let config = ContainerConfig { mounts: mounts.clone(), security: security.clone(), ..sh(script) };
        let (_, id, _) = node.run("read-only", config).await;
        let status = node.wait_exited(&id).await;
        let output = node.output(&status);
        let pid = output.split("/tmp/orchestra-probe-").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("?");
        assert_eq!(output.trim().replace(&format!("probe-{pid} "), "probe-PID "), expected, "{security:?}: {status:?}");
    }
    assert!(!Path::new("/etc/orchestra-probe").exists());
}

#[tokio::test]
async fn pids_max_bounds_every_container() {
    let node = Node::new().await;
    if !node.runtime.capabilities().pids_limit {
        eprintln!("skipped: no pids controller here ({:?})", node.runtime.capabilities().notes);
        return;
    }
    // The pids cgroup's pids.max: the v1 pids hierarchy's, else the v2 one's.
    let read = "p=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); \
                if [ -n \"$p\" ]; then cat /sys/fs/cgroup/pids$p/pids.max; \
                else cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/pids.max; fi";
    // (limit asked for, what pids.max says)
    let cases = [(None, "1024"), (Some(64), "64")];
    for (limit, expected) in cases {
        let resources = ContainerResources { pids_limit: limit, ..Default::default() };
        let (_, id, _) = node.run("pids", ContainerConfig { resources, ..sh(read) }).await;
        let status = node.wait_exited(&id).await;
        assert_eq!(node.output(&status).trim(), expected, "{status:?}");
    }
    // And it holds: a shell in a cgroup of 3 cannot start 5 sleeps.
    let resources = ContainerResources { pids_limit: Some(3), ..Default::default() };
    let script = "for i in 1 2 3 4 5; do sleep 5 & done; echo all started";
    let (_, id, _) = node.run("fork", ContainerConfig { resources, ..sh(script) }).await;
    let status = node.wait_exited(&id).await;
    let output = node.output(&status);
    assert!(output.contains("Cannot fork") && !output.contains("all started"), "{output}");
}
