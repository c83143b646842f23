//! Commands run inside a running container: the command line that enters
//! it (its cgroup, mount namespace, working directory and environment), and
//! the streaming sessions of `kubectl exec` — over pipes, or on a
//! pseudo-terminal whose slave becomes the command's controlling terminal
//! (through `setsid --ctty`, so no code runs between fork and exec here).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll, ready};

use futures::FutureExt as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::process::Command;

use super::cgroup::ContainerCgroup;
use super::launch::{self, Tools};
use super::{ProcessRuntime, exit_code};
use crate::runtime::{
    ContainerId, ContainerState, ExecOutput, ExecRequest, ExecSession, Result, RuntimeError, TerminalSize,
};

/// How a command enters its container.
pub(super) struct ExecCommand {
    program: PathBuf,
    /// `argv[0]` when it differs from `program` (an executable resolved on
    /// the host keeps the name the user typed).
    arg0: Option<String>,
    args: Vec<OsString>,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
}

impl ExecCommand {
    /// The command with its environment; `wrapper` (a program and its
    /// arguments) runs first and `exec`s it.
    pub(super) fn std(&self, wrapper: Option<(&std::path::Path, &[&str])>) -> std::process::Command {
        let mut cmd = match wrapper {
            Some((program, args)) => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args).arg(&self.program);
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new(&self.program);
                if let Some(arg0) = &self.arg0 {
                    cmd.arg0(arg0);
                }
                cmd
            }
        };
        cmd.args(&self.args).current_dir(&self.cwd).env_clear().envs(&self.env);
        cmd
    }
}

/// What [`ProcessRuntime::prepare_exec`] found.
pub(super) enum Prepared {
    /// The command to run.
    Command(ExecCommand),
    /// The command cannot run; report this exit code and message, as a
    /// shell would (127: not found, 126: not executable).
    Failed { exit_code: i32, message: String },
}

impl ProcessRuntime {
    /// The command line that runs `command` inside running container `id`.
    pub(super) fn prepare_exec(&self, id: &ContainerId, command: &[String]) -> Result<Prepared> {
        let c = self.container(id)?;
        if command.is_empty() || command[0].is_empty() {
            return Err(RuntimeError::InvalidArgument("exec: empty command".to_owned()));
        }
        let (pid, cgroup_procs, namespaced) = {
            let run = c.run.lock();
            match (run.state, run.pid) {
                (ContainerState::Running, Some(pid)) => {
                    (pid, run.cgroup.as_ref().map(ContainerCgroup::procs_files).unwrap_or_default(), run.namespaced)
                }
                (state, _) => {
                    return Err(RuntimeError::InvalidState(format!("container {id} is {state:?}, not Running")));
                }
            }
        };
        let tools = &self.inner.tools;
        let env = c.env.clone();
        // The command runs as the container's user, with its privileges.
        let setpriv_args = c.privileges.setpriv_args();
        let setpriv = match (&tools.setpriv, setpriv_args.is_empty()) {
            (Some(setpriv), false) => Some((setpriv.as_path(), setpriv_args.as_slice())),
            _ => None,
        };
        if namespaced || !cgroup_procs.is_empty() {
            // `sh -c SCRIPT sh COMMAND...`: the script joins the cgroup,
            // enters the working directory and `exec`s the command.
            let script = launch::exec_script(&cgroup_procs, &c.working_dir, &c.env, setpriv);
            let mut args: Vec<OsString> = Vec::new();
            let program = if namespaced {
                args.extend(
                    [format!("--target={pid}"), "--mount".into(), "--root".into(), "--".into()].map(Into::into),
                );
                args.push(tools.sh.clone().into());
                tools.nsenter.clone().expect("namespaces need nsenter")
            } else {
                tools.sh.clone()
            };
            args.extend(["-c".into(), script, "sh".into()]);
            args.extend(command.iter().map(Into::into));
            return Ok(Prepared::Command(ExecCommand { program, arg0: None, args, cwd: "/".into(), env }));
        }
        let path_env = c.env.get("PATH").map(String::as_str).unwrap_or(launch::DEFAULT_PATH);
        let mounts = &c.config.mounts;
        match launch::resolve_executable(&command[0], path_env, &c.working_dir, mounts) {
            Ok(exe) => Ok(Prepared::Command(match setpriv {
                Some((setpriv, args)) => ExecCommand {
                    program: setpriv.to_owned(),
                    arg0: None,
                    args: args
                        .iter()
                        .cloned()
                        .chain([OsString::from("--"), exe.host_path.into_os_string()])
                        .chain(command[1..].iter().map(Into::into))
                        .collect(),
                    cwd: launch::host_view(&c.working_dir, mounts),
                    env,
                },
                None => ExecCommand {
                    program: exe.host_path,
                    arg0: Some(command[0].clone()),
                    args: command[1..].iter().map(Into::into).collect(),
                    cwd: launch::host_view(&c.working_dir, mounts),
                    env,
                },
            })),
            Err(message) => {
                let exit_code = if message.contains("permission denied") { 126 } else { 127 };
                Ok(Prepared::Failed { exit_code, message })
            }
        }
    }
}

/// Kills a process group when dropped, unless disarmed: what ends a
/// session's command (and whatever it started) when its client goes away.
struct KillGroup(Option<i32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

/// Starts `cmd` with its streams attached, as `request` asks.
pub(super) fn start(cmd: ExecCommand, request: &ExecRequest, tools: &Tools) -> io::Result<ExecSession> {
    if request.tty {
        return start_on_terminal(cmd, tools);
    }
    let mut command = Command::from(cmd.std(None));
    command
        .stdin(if request.stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let group = KillGroup(child.id().map(|p| p as i32));
    let stdin = child.stdin.take().map(|s| Box::pin(s) as Pin<Box<dyn AsyncWrite + Send>>);
    let stdout: ExecOutput = Box::pin(child.stdout.take().expect("piped"));
    let stderr: ExecOutput = Box::pin(child.stderr.take().expect("piped"));
    let exit = async move {
        let mut group = group;
        let status = child.wait().await.map_err(RuntimeError::Io)?;
        group.0 = None;
        Ok(exit_code(status))
    };
    Ok(ExecSession { stdin, stdout, stderr: Some(stderr), resize: None, exit: exit.boxed() })
}

/// The command on a new pseudo-terminal, as its session's controlling
/// terminal: one output stream, and a size that `resize` changes.
fn start_on_terminal(cmd: ExecCommand, tools: &Tools) -> io::Result<ExecSession> {
    let setsid = tools
        .setsid
        .as_deref()
        .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "a terminal needs setsid (util-linux), not found"))?;
    let (master, slave) = open_pty()?;
    let mut command = Command::from(cmd.std(Some((setsid, &["--ctty"]))));
    command.stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave).kill_on_drop(true);
    let mut child = command.spawn()?;
    // The parent's copies of the slave must go, so that reading the master
    // ends (EIO) once the command and its children have closed theirs.
    drop(command);
    // `setsid` made the command the leader of a new session and group.
    let group = KillGroup(child.id().map(|p| p as i32));
    let exit = async move {
        let mut group = group;
        let status = child.wait().await.map_err(RuntimeError::Io)?;
        group.0 = None;
        Ok(exit_code(status))
    };
    let input = pipe::Sender::from_owned_fd_unchecked(master.try_clone()?)?;
    let output = pipe::Receiver::from_owned_fd_unchecked(master.try_clone()?)?;
    Ok(ExecSession {
        stdin: Some(Box::pin(input)),
        stdout: Box::pin(PtyOutput(output)),
        stderr: None,
        resize: Some(Box::new(move |size: TerminalSize| {
            let winsize =
                rustix::termios::Winsize { ws_row: size.height, ws_col: size.width, ws_xpixel: 0, ws_ypixel: 0 };
            rustix::termios::tcsetwinsize(&master, winsize).map_err(io::Error::from)
        })),
        exit: exit.boxed(),
    })
}

/// A session for a command that could not start: its message on stderr,
/// its exit code at once.
pub(super) fn failed(exit_code: i32, message: String) -> ExecSession {
    let mut message = message.into_bytes();
    message.push(b'\n');
    ExecSession {
        stdin: None,
        stdout: Box::pin(tokio::io::empty()),
        stderr: Some(Box::pin(io::Cursor::new(message))),
        resize: None,
        exit: async move { Ok(exit_code) }.boxed(),
    }
}

/// A new pseudo-terminal's master (non-blocking) and slave.
fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    use rustix::pty::OpenptFlags;
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::ioctl_fionbio(&master, true)?;
    Ok((master, slave))
}

/// A pseudo-terminal's master read as a byte stream (through tokio's pipe
/// type, which takes any pollable descriptor). Reading ends when the last
/// holder of the slave has closed it: the kernel's EIO is the end.
struct PtyOutput(pipe::Receiver);

impl AsyncRead for PtyOutput {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.0).poll_read(cx, buf)) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}
