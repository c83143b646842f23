//! [`ProcessRuntime`]: a [`RuntimeBackend`] whose containers are host
//! processes, the images of an [`ImageCatalog`] naming host programs.
//!
//! - **Sandboxes** are bookkeeping: a pod IP from the pod CIDR
//!   ([`Ipam`]) and a log directory. The reference assembly's pod CIDRs lie
//!   in `127.0.0.0/8`, so a pod's address is bindable on the loopback
//!   interface with no setup: a container finds it in `ORCHESTRA_POD_IP`
//!   and listens there (pods on one host then all use the same ports, each
//!   on its own address). `host_network` sandboxes get the node's address.
//! - **Containers** are processes, each the leader of its own process group,
//!   with exactly the environment given (plus `PATH` if absent, `HOSTNAME`,
//!   `ORCHESTRA_POD_IP`), stdout and stderr copied line by line into the
//!   CRI log file. When the main process exits, what is left of its group
//!   and cgroup is killed, as a container's processes die with its init.
//!   Exit codes are the real code or 128 + signal; reasons `Completed`,
//!   `Error`, `OOMKilled`, `StartError` (exit code 128, as containerd).
//!   The working directory is the given one (it must exist: it is not
//!   created on the host) or a fresh one under `state_dir`.
//! - **Isolation where the host allows** (see [`Capabilities`]):
//!   - a cgroup per container with its limits (`memory.max`, `cpu.max`,
//!     `cpu.weight` on cgroup v2; the v1 equivalents, nested under the
//!     agent's own cgroup, on legacy or hybrid hosts), whose OOM-kill counter
//!     gives the `OOMKilled` reason. Without cgroups, limits are not enforced
//!     and an OOM kill is an `Error` with exit code 137.
//!   - volumes bind-mounted at their `container_path` in a private mount
//!     namespace: the container starts as `unshare --mount` + an `sh`
//!     prelude that mounts, then `exec`s the program (same pid, same process
//!     group, signals reach it). A mount point missing on the host is never
//!     created there: its nearest existing ancestor is *shadowed* in the
//!     namespace by a tmpfs replica (entries bound back) in which the missing
//!     directories are made; when that ancestor is `/`, the program runs
//!     `chroot`ed into a replica of `/`. The host's files and mount table
//!     stay untouched. Without mount namespaces (not root, no `unshare`), a
//!     volume is a symlink at `$ORCHESTRA_VOLUMES/<mountPath>` (read-only
//!     not enforced).
//!   - **Hidden paths**: in that namespace, the runtime's state directory
//!     and [`ProcessRuntimeConfig::hidden_paths`] (an assembly's data
//!     directory, keys, kubeconfigs) are covered by empty read-only tmpfs
//!     (files by an empty read-only file), also where a volume shows them
//!     (a `hostPath` of `/`). The volumes and the working directory below
//!     a hidden path stay visible: they are mounted first, then bound into
//!     the covering tmpfs. The namespace is used for every container then,
//!     volumes or not.
//!   - **Users and privileges** (see `privileges.rs`): the program is
//!     `exec`ed through `setpriv` as the security context's user (default
//!     [`ProcessRuntimeConfig::default_user`], 65534), its supplementary
//!     groups, Docker's default capability bounding set adjusted by
//!     `capabilities.add`/`drop` (a non-root user keeps no effective
//!     capability), and `no_new_privs` unless privileged or
//!     `allowPrivilegeEscalation: true`. `runAsNonRoot` with uid 0 is a
//!     [`RuntimeError::ConfigRefused`]. The fresh working directory belongs
//!     to the container's user. Not root, containers run as the agent.
//!   - **Root containers** (uid 0, not privileged) own the host's files:
//!     every mount of their namespace is remounted read-only but their
//!     writable volumes, their fresh working directory, `/tmp`, `/var/tmp`
//!     and `/dev/shm` (`/proc` and `/sys` included, so no sysctl is
//!     written).
//!   - `pids.max` in the container's cgroup:
//!     [`ContainerResources::pids_limit`](super::ContainerResources::pids_limit),
//!     else [`ProcessRuntimeConfig::pids_limit`] (1024).
//!   - `exec_sync` runs the command with the container's environment and
//!     working directory, user and privileges, in its cgroup and (through
//!     `nsenter`) its mount namespace.
//! - **What is not isolated**: containers share the host's process and
//!   network namespaces and see its files (where their user's permissions
//!   allow; read-only to root). A container may signal and trace the
//!   processes of its own uid: every container of the default user shares
//!   65534, and a root container may signal the host's root processes, the
//!   agent among them. Pods that must not reach one another need distinct
//!   `runAsUser`s; root containers are for trusted namespaces (PodSecurity
//!   `restricted` refuses them).
//! - **Restarts of the agent**: containers are children of this process.
//!   [`ProcessRuntime::shutdown`] stops them all; dropping the runtime kills
//!   them (unless [`ProcessRuntimeConfig::kill_on_drop`] is off). The state
//!   file under `state_dir` records every started process group with its
//!   start time, so a new runtime on the same `state_dir` kills what a
//!   crashed predecessor left running — only processes it recorded and that
//!   still match. The runtime's sandboxes and containers themselves do not
//!   survive a restart: the agent creates them again.

mod cgroup;
mod exec;
mod launch;
mod logs;
mod privileges;
mod state;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::{broadcast, oneshot, watch};

pub use self::cgroup::CgroupVersion;
use self::cgroup::{CgroupRoot, ContainerCgroup};
use self::launch::{Prelude, Tools};
use self::privileges::{Powers, Privileges};
pub use self::state::LeftoverReport;
use self::state::{Record, StateFile};
use super::cri_log::Stream;
use super::images::{ImageCatalog, resolve_command};
use super::{
    ContainerConfig, ContainerEvent, ContainerFilter, ContainerId, ContainerResources, ContainerState, ContainerStatus,
    ExecRequest, ExecResult, ExecSession, Image, PodSandboxConfig, PodSandboxStatus, Result, RuntimeBackend,
    RuntimeError, RuntimeVersion, SandboxFilter, SandboxId, SandboxState,
};
use crate::network::Ipam;

/// Name reported by [`RuntimeBackend::version`].
pub const RUNTIME_NAME: &str = "orchestra-process";
/// Variable holding the pod's IP in every container's environment.
pub const ENV_POD_IP: &str = "ORCHESTRA_POD_IP";
/// Variable naming the directory where volumes appear as symlinks when the
/// host has no mount namespaces.
pub const ENV_VOLUMES: &str = "ORCHESTRA_VOLUMES";
/// Largest stdout (and stderr) [`RuntimeBackend::exec_sync`] returns; the
/// rest is read and dropped.
pub const EXEC_OUTPUT_LIMIT: usize = 1024 * 1024;

/// uid of containers that name no user (`nobody`).
pub const DEFAULT_UID: u32 = 65534;
/// gid of containers that name no user (`nogroup`).
pub const DEFAULT_GID: u32 = 65534;
/// Default `pids.max` of a container.
pub const DEFAULT_PIDS_LIMIT: u64 = 1024;

/// How long stop waits for a SIGKILLed container before giving up.
const KILL_PATIENCE: Duration = Duration::from_secs(60);
/// How long the exit handling waits for the log pipes to drain.
const LOG_DRAIN: Duration = Duration::from_secs(2);

/// What [`ProcessRuntime::new`] needs.
///
/// Built with [`new`](Self::new) (the state directory and the images are
/// required) and the `with_*` setters, so that a new setting is not a
/// breaking change:
///
/// ```
/// use orchestra_node::runtime::images::ImageCatalog;
/// use orchestra_node::runtime::process::ProcessRuntimeConfig;
///
/// let config = ProcessRuntimeConfig::new("/var/lib/orchestra/runtime", ImageCatalog::default())
///     .with_node_name("worker-1")
///     .with_host_ip("10.0.0.7".parse().unwrap())
///     .with_cgroups(false)
///     // The cluster's keys stay out of every container's sight.
///     .with_hidden_paths(["/var/lib/orchestra/pki"])
///     .with_default_user(65534, 65534)
///     .with_pids_limit(Some(512));
/// assert_eq!(config.node_name, "worker-1");
/// assert_eq!(config.hidden_paths.len(), 1);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessRuntimeConfig {
    /// Directory of the state file, the containers' working and scratch
    /// directories. One runtime per directory.
    pub state_dir: PathBuf,
    /// The node's images.
    pub catalog: ImageCatalog,
    /// The node's name (for logs).
    pub node_name: String,
    /// The node's address: the IP of `host_network` sandboxes.
    pub host_ip: IpAddr,
    /// Use mount namespaces for volumes when the host allows (default on).
    pub mount_namespaces: bool,
    /// Use cgroups for limits and OOM detection when the host allows
    /// (default on).
    pub cgroups: bool,
    /// Name of the cgroup holding the containers' cgroups (`orchestra`).
    pub cgroup_parent: String,
    /// Kill every container when the runtime is dropped (default on). Off,
    /// a dropped runtime leaves its containers running, as a crash does.
    pub kill_on_drop: bool,
    /// uid and gid of containers whose security context names no user,
    /// when the agent runs as root (default 65534:65534, `nobody`). Every
    /// such container of every pod shares it: pods that must not signal or
    /// trace one another's processes need distinct `runAsUser`s.
    pub default_user: (u32, u32),
    /// Paths (directories or files) no container sees: each is covered in
    /// the container's mount namespace by an empty read-only tmpfs (a file
    /// by an empty read-only file), keeping visible only the container's
    /// own volumes and working directory below it. The runtime's
    /// `state_dir` is always hidden; an assembly adds the cluster's data
    /// directory, its keys and kubeconfigs. Needs mount namespaces.
    pub hidden_paths: Vec<PathBuf>,
    /// `pids.max` of every container's cgroup unless its
    /// [`ContainerResources::pids_limit`](super::ContainerResources::pids_limit)
    /// says otherwise (default 1024; `None`: unlimited).
    pub pids_limit: Option<u64>,
}

impl ProcessRuntimeConfig {
    /// A configuration with the defaults: node `node`, host IP `127.0.0.1`,
    /// every isolation the host allows.
    pub fn new(state_dir: impl Into<PathBuf>, catalog: ImageCatalog) -> Self {
        Self {
            state_dir: state_dir.into(),
            catalog,
            node_name: "node".to_owned(),
            host_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            mount_namespaces: true,
            cgroups: true,
            cgroup_parent: "orchestra".to_owned(),
            kill_on_drop: true,
            default_user: (DEFAULT_UID, DEFAULT_GID),
            hidden_paths: Vec::new(),
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
        }
    }

    /// Sets [`default_user`](Self::default_user).
    pub fn with_default_user(mut self, uid: u32, gid: u32) -> Self {
        self.default_user = (uid, gid);
        self
    }

    /// Adds to [`hidden_paths`](Self::hidden_paths).
    pub fn with_hidden_paths(mut self, paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.hidden_paths.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Sets [`pids_limit`](Self::pids_limit).
    pub fn with_pids_limit(mut self, limit: Option<u64>) -> Self {
        self.pids_limit = limit;
        self
    }

    /// Sets [`node_name`](Self::node_name).
    pub fn with_node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// Sets [`host_ip`](Self::host_ip).
    pub fn with_host_ip(mut self, ip: IpAddr) -> Self {
        self.host_ip = ip;
        self
    }

    /// Sets [`mount_namespaces`](Self::mount_namespaces).
    pub fn with_mount_namespaces(mut self, on: bool) -> Self {
        self.mount_namespaces = on;
        self
    }

    /// Sets [`cgroups`](Self::cgroups).
    pub fn with_cgroups(mut self, on: bool) -> Self {
        self.cgroups = on;
        self
    }

    /// Sets [`cgroup_parent`](Self::cgroup_parent).
    pub fn with_cgroup_parent(mut self, name: impl Into<String>) -> Self {
        self.cgroup_parent = name.into();
        self
    }

    /// Sets [`kill_on_drop`](Self::kill_on_drop).
    pub fn with_kill_on_drop(mut self, on: bool) -> Self {
        self.kill_on_drop = on;
        self
    }
}

/// What isolation this host gave the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Volumes are bind mounts in a private mount namespace, visible at
    /// their `container_path`. Otherwise symlinks under `$ORCHESTRA_VOLUMES`.
    pub mount_namespaces: bool,
    /// Limits are enforced and OOM kills detected through this cgroup
    /// interface. `None`: neither.
    pub cgroups: Option<CgroupVersion>,
    /// `pids.max` is enforced (the cgroups have the `pids` controller).
    pub pids_limit: bool,
    /// Containers run as the user their security context names (or
    /// [`ProcessRuntimeConfig::default_user`]) with a bounded capability
    /// set: the agent is root and `setpriv` is installed. Otherwise they run
    /// as the agent's own user with its capabilities.
    pub run_as_user: bool,
    /// Containers run with `no_new_privs` (unless privileged): `setpriv`
    /// is installed.
    pub no_new_privs: bool,
    /// [`ProcessRuntimeConfig::hidden_paths`] (and the state directory)
    /// are covered in every container: mount namespaces are in use.
    pub hidden_paths: bool,
    /// Why something is off, in words.
    pub notes: Vec<String>,
}

/// The process backend. See the [module docs](self).
#[derive(Debug)]
pub struct ProcessRuntime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Held for the runtime's life: one runtime per state directory.
    _lock: nix::fcntl::Flock<fs::File>,
    config: ProcessRuntimeConfig,
    capabilities: Capabilities,
    cgroup_root: Option<CgroupRoot>,
    tools: Tools,
    powers: Powers,
    /// `config.hidden_paths` and the state directory, made absolute.
    hidden: Vec<PathBuf>,
    ipam: Ipam,
    sandboxes: Mutex<BTreeMap<SandboxId, Sandbox>>,
    containers: Mutex<BTreeMap<ContainerId, Arc<Container>>>,
    events: broadcast::Sender<ContainerEvent>,
    state: StateFile,
    leftovers: LeftoverReport,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Sandbox {
    config: PodSandboxConfig,
    state: SandboxState,
    created_at: SystemTime,
    ip: Option<IpAddr>,
}

#[derive(Debug)]
struct Container {
    id: ContainerId,
    sandbox_id: SandboxId,
    config: ContainerConfig,
    image_ref: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    working_dir: PathBuf,
    /// `<state_dir>/containers/<id>`.
    dir: PathBuf,
    /// Who it runs as, with which privileges.
    privileges: Privileges,
    log_path: PathBuf,
    created_at: SystemTime,
    /// Serialises start, stop and remove.
    lifecycle: tokio::sync::Mutex<()>,
    run: Mutex<Run>,
    /// Turns `true` once the container has exited (or failed to start).
    exited: watch::Sender<bool>,
}

#[derive(Debug)]
struct Run {
    state: ContainerState,
    started_at: Option<SystemTime>,
    finished_at: Option<SystemTime>,
    exit_code: Option<i32>,
    reason: Option<String>,
    message: Option<String>,
    pid: Option<i32>,
    cgroup: Option<ContainerCgroup>,
    namespaced: bool,
}

/// A process's exit code as a shell reports it: 128 + the signal that
/// killed it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn io_error(context: impl std::fmt::Display, error: std::io::Error) -> RuntimeError {
    RuntimeError::Io(std::io::Error::new(error.kind(), format!("{context}: {error}")))
}

impl ProcessRuntime {
    /// Starts a runtime on `config.state_dir`: finds what isolation the host
    /// allows, and kills what a crashed predecessor on the same directory
    /// left running (see [`ProcessRuntime::leftovers`]).
    pub async fn new(config: ProcessRuntimeConfig) -> Result<Self> {
        fs::create_dir_all(&config.state_dir).map_err(|e| io_error(config.state_dir.display(), e))?;
        let lock_path = config.state_dir.join("lock");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_error(lock_path.display(), e))?;
        let lock =
            nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
                RuntimeError::InvalidState(format!(
                    "state directory {} is in use by another process runtime ({errno})",
                    config.state_dir.display()
                ))
            })?;
        let tools = Tools::find().ok_or_else(|| {
            RuntimeError::Io(std::io::Error::new(std::io::ErrorKind::NotFound, "no sh in the default PATH"))
        })?;
        let root = nix::unistd::geteuid().is_root();
        let mut notes = Vec::new();

        let mount_namespaces = if !config.mount_namespaces {
            notes.push("mount namespaces disabled by the configuration".to_owned());
            false
        } else if !root {
            notes.push("mount namespaces need root: volumes are symlinks under $ORCHESTRA_VOLUMES".to_owned());
            false
        } else if !tools.can_mount() {
            notes.push(format!("missing one of unshare, nsenter, mount, mkdir, ln, readlink, chroot, chmod ({tools:?}): volumes are symlinks"));
            false
        } else {
            let unshare = tools.unshare.as_ref().expect("can_mount");
            let probe = Command::new(unshare)
                .args(["--mount", "--propagation", "private", "--"])
                .arg(&tools.sh)
                .args(["-c", "exit 0"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .await;
            match probe {
                Ok(out) if out.status.success() => true,
                Ok(out) => {
                    notes.push(format!(
                        "unshare --mount fails ({}): volumes are symlinks",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                    false
                }
                Err(e) => {
                    notes.push(format!("cannot run unshare ({e}): volumes are symlinks"));
                    false
                }
            }
        };

        // Containers' cgroups go under `<parent>/<scope>`, the scope named
        // after the state directory: this runtime (holding the directory's
        // lock) owns everything in it.
        let scope = {
            let canonical = fs::canonicalize(&config.state_dir).unwrap_or_else(|_| config.state_dir.clone());
            let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_os_str().as_encoded_bytes());
            let hex: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("runtime-{hex}")
        };
        let cgroup_root = if config.cgroups {
            match CgroupRoot::detect(&config.cgroup_parent)
                .and_then(|root| root.scoped(&scope).map_err(|e| format!("cannot create the runtime's cgroup: {e}")))
            {
                Ok(root) => Some(root),
                Err(why) => {
                    notes.push(format!("no cgroups ({why}): limits are not enforced, OOM kills not detected"));
                    None
                }
            }
        } else {
            notes.push("cgroups disabled by the configuration".to_owned());
            None
        };
        let setpriv = tools.setpriv.is_some();
        let powers = Powers {
            switch_users: root && setpriv,
            setpriv,
            agent: (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw()),
            default_user: config.default_user,
        };
        if !root {
            notes.push(format!(
                "not root: containers run as the agent's user (uid {}) whatever their securityContext asks",
                powers.agent.0
            ));
        } else if !setpriv {
            notes.push(
                "no setpriv (util-linux): containers run as root with the agent's capabilities, without no_new_privs"
                    .to_owned(),
            );
        }
        let pids_limit = cgroup_root.as_ref().is_some_and(CgroupRoot::has_pids);
        if cgroup_root.is_some() && !pids_limit {
            notes.push("no pids controller: pids.max is not enforced".to_owned());
        }
        if !mount_namespaces && !config.hidden_paths.is_empty() {
            notes.push("without mount namespaces the hidden paths are visible to containers".to_owned());
        }
        let mut hidden = vec![fs::canonicalize(&config.state_dir).unwrap_or_else(|_| config.state_dir.clone())];
        for path in &config.hidden_paths {
            let absolute = std::path::absolute(path).map_err(|e| io_error(path.display(), e))?;
            hidden.push(fs::canonicalize(&absolute).unwrap_or(absolute));
        }
        let capabilities = Capabilities {
            mount_namespaces,
            cgroups: cgroup_root.as_ref().map(CgroupRoot::version),
            pids_limit,
            run_as_user: powers.switch_users,
            no_new_privs: powers.setpriv,
            hidden_paths: mount_namespaces,
            notes,
        };
        for note in &capabilities.notes {
            tracing::info!(node = %config.node_name, "process runtime: {note}");
        }

        let state = StateFile::new(&config.state_dir);
        let leftovers =
            state.clean_leftovers(Duration::from_secs(10)).await.map_err(|e| io_error("reading the state file", e))?;
        if leftovers != LeftoverReport::default() {
            tracing::info!(node = %config.node_name, ?leftovers, "process runtime: cleaned up after a predecessor");
        }
        if let Some(root) = &cgroup_root {
            // Whatever a predecessor on this state directory left in its
            // cgroups (its records may be gone; the cgroups are its own).
            for cgroup in root.children() {
                cgroup.remove(Duration::from_secs(5)).await;
            }
        }
        let containers_dir = config.state_dir.join("containers");
        if containers_dir.exists() {
            fs::remove_dir_all(&containers_dir).map_err(|e| io_error(containers_dir.display(), e))?;
        }
        fs::create_dir_all(&containers_dir).map_err(|e| io_error(containers_dir.display(), e))?;

        Ok(Self {
            inner: Arc::new(Inner {
                _lock: lock,
                config,
                capabilities,
                cgroup_root,
                tools,
                powers,
                hidden,
                ipam: Ipam::new(),
                sandboxes: Mutex::new(BTreeMap::new()),
                containers: Mutex::new(BTreeMap::new()),
                events: broadcast::channel(1024).0,
                state,
                leftovers,
                next_id: AtomicU64::new(0),
            }),
        })
    }

    /// What isolation the host allows.
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    /// What the start-up cleanup of a predecessor's leftovers did.
    pub fn leftovers(&self) -> &LeftoverReport {
        &self.inner.leftovers
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.inner.config.state_dir
    }

    /// Stops every running container: SIGTERM, then SIGKILL after `grace`.
    /// Returns once all have exited. The runtime stays usable.
    pub async fn shutdown(&self, grace: Duration) {
        super::stop_running_containers(self, grace).await;
    }

    fn new_id(&self) -> String {
        let n = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let seed = format!("{}/{}/{now}/{n}", self.inner.config.node_name, std::process::id());
        let digest = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
        digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn container(&self, id: &ContainerId) -> Result<Arc<Container>> {
        self.inner
            .containers
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound { kind: "container", id: id.clone() })
    }

    fn publish(&self, event: ContainerEvent) {
        let _ = self.inner.events.send(event);
    }

    /// Builds the process of `c` and starts it. `Err` is the start failure's
    /// message; the caller records it.
    async fn launch(&self, c: &Arc<Container>) -> std::result::Result<(), String> {
        let inner = &self.inner;
        let mounts = &c.config.mounts;
        let scratch = c.dir.join("scratch");
        let hidden = if inner.capabilities.mount_namespaces {
            let fresh = c.config.working_dir.is_none().then_some(c.working_dir.as_path());
            launch::hidden_paths(&inner.hidden, mounts, fresh, &scratch)
        } else {
            Vec::new()
        };
        let namespaced = inner.capabilities.mount_namespaces && (!mounts.is_empty() || !hidden.is_empty());
        // Root on the host's files: they are read-only to it, but for its
        // writable volumes, its fresh working directory and /tmp.
        let read_only_host = (namespaced && c.privileges.uid == 0 && !c.config.security.privileged)
            .then(|| launch::writable_paths(mounts, c.config.working_dir.is_none().then_some(c.working_dir.as_path())));
        let setpriv_args = c.privileges.setpriv_args();
        let setpriv = match (&inner.tools.setpriv, setpriv_args.is_empty()) {
            (Some(setpriv), false) => Some((setpriv.as_path(), setpriv_args.as_slice())),
            _ => None,
        };
        let path_env = c.env.get("PATH").map(String::as_str).unwrap_or(launch::DEFAULT_PATH);
        let exe = launch::resolve_executable(&c.argv[0], path_env, &c.working_dir, mounts)?;

        if let Some(parent) = c.log_path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create the log directory {}: {e}", parent.display()))?;
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&c.log_path)
            .map_err(|e| format!("cannot open the log file {}: {e}", c.log_path.display()))?;
        let log = Arc::new(Mutex::new(log));

        if namespaced {
            fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        }
        let resources = ContainerResources {
            pids_limit: c.config.resources.pids_limit.or(inner.config.pids_limit),
            ..c.config.resources
        };
        let cgroup = match &inner.cgroup_root {
            Some(root) => {
                Some(root.create(&c.id, &resources).map_err(|e| format!("cannot set up the container's cgroup: {e}"))?)
            }
            None => None,
        };
        let prelude = namespaced || cgroup.is_some();
        let mut command = if prelude {
            let script = Prelude {
                cgroup_procs: cgroup.as_ref().map(ContainerCgroup::procs_files).unwrap_or_default(),
                mounts: if namespaced { mounts } else { &[] },
                scratch: &scratch,
                working_dir: &c.working_dir,
                env: &c.env,
                hidden: &hidden,
                setpriv,
                writable: read_only_host.as_deref(),
            }
            .script(&inner.tools);
            let mut command = if namespaced {
                let mut command = Command::new(inner.tools.unshare.as_ref().expect("namespaces need unshare"));
                command.args(["--mount", "--propagation", "private", "--"]).arg(&inner.tools.sh);
                command
            } else {
                Command::new(&inner.tools.sh)
            };
            let program = if namespaced { &exe.container_path } else { &exe.host_path };
            command.arg("-c").arg(script).arg("sh").arg(program).args(&c.argv[1..]).current_dir("/");
            command
        } else {
            let working_dir = launch::host_view(&c.working_dir, mounts);
            if !working_dir.is_dir() {
                return Err(format!("chdir to cwd ({:?}) failed: no such directory", c.working_dir.display()));
            }
            let mut command = match setpriv {
                Some((setpriv, args)) => {
                    let mut command = Command::new(setpriv);
                    command.args(args).arg("--").arg(&exe.host_path);
                    command
                }
                None => {
                    let mut command = Command::new(&exe.host_path);
                    command.arg0(&c.argv[0]);
                    command
                }
            };
            command.args(&c.argv[1..]).current_dir(working_dir);
            command
        };
        command
            .env_clear()
            .envs(&c.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);

        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(cgroup) = &cgroup {
                    cgroup.remove(Duration::from_secs(1)).await;
                }
                return Err(format!("failed to start {:?}: {e}", exe.container_path.display()));
            }
        };
        let pid = child.id().expect("a child just spawned has a pid") as i32;
        let start_time = state::proc_stat(pid).map(|s| s.start_time).unwrap_or_default();
        inner.state.add(
            &c.id,
            Record { pid, start_time, cgroups: cgroup.as_ref().map(|g| g.dirs().to_vec()).unwrap_or_default() },
        );
        {
            let mut run = c.run.lock();
            run.pid = Some(pid);
            run.cgroup = cgroup;
            run.namespaced = namespaced;
        }

        let (marker_tx, marker_rx) = if prelude {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let copiers = [
            tokio::spawn(logs::copy(stdout, Stream::Stdout, log.clone(), None)),
            tokio::spawn(logs::copy(stderr, Stream::Stderr, log, marker_tx)),
        ];
        let (started_tx, started_rx) = oneshot::channel();
        tokio::spawn(monitor(
            Arc::downgrade(inner),
            inner.events.clone(),
            c.clone(),
            child,
            copiers,
            marker_rx,
            started_tx,
        ));
        started_rx.await.unwrap_or_else(|_| Err("the container's monitor stopped".to_owned()))
    }

    /// Records a start failure that happened before any process ran.
    fn record_start_error(&self, c: &Container, message: &str) {
        {
            let mut run = c.run.lock();
            run.state = ContainerState::Exited;
            run.finished_at = Some(SystemTime::now());
            run.exit_code = Some(128);
            run.reason = Some("StartError".to_owned());
            run.message = Some(message.to_owned());
            run.pid = None;
        }
        c.exited.send_replace(true);
        self.publish(ContainerEvent::Exited { id: c.id.clone(), sandbox_id: c.sandbox_id.clone(), exit_code: 128 });
    }

    fn status_of(c: &Container) -> ContainerStatus {
        let run = c.run.lock();
        ContainerStatus {
            state: run.state,
            created_at: c.created_at,
            started_at: run.started_at,
            finished_at: run.finished_at,
            exit_code: run.exit_code,
            reason: run.reason.clone(),
            message: run.message.clone(),
            pid: run.pid.map(|p| p as u32),
            ..ContainerStatus::created(
                c.id.clone(),
                c.sandbox_id.clone(),
                &c.config,
                c.image_ref.clone(),
                c.log_path.clone(),
            )
        }
    }

    fn sandbox_status(id: &SandboxId, s: &Sandbox) -> PodSandboxStatus {
        PodSandboxStatus {
            id: id.clone(),
            metadata: s.config.metadata.clone(),
            state: s.state,
            created_at: s.created_at,
            ip: s.ip,
            labels: s.config.labels.clone(),
        }
    }
}

/// Waits for the container's set-up, then for its exit, and records both.
async fn monitor(
    inner: Weak<Inner>,
    events: broadcast::Sender<ContainerEvent>,
    c: Arc<Container>,
    mut child: Child,
    copiers: [tokio::task::JoinHandle<()>; 2],
    marker: Option<oneshot::Receiver<Result<(), String>>>,
    started: oneshot::Sender<Result<(), String>>,
) {
    let pid = c.run.lock().pid.expect("monitor of a started container");
    let mut start_error = None;
    if let Some(marker) = marker {
        match marker.await {
            Ok(Ok(())) => {}
            Ok(Err(text)) if !text.is_empty() => start_error = Some(text),
            _ => start_error = Some("the container's set-up exited before running the program".to_owned()),
        }
    }
    let mut started = Some(started);
    if start_error.is_none() {
        {
            let mut run = c.run.lock();
            run.state = ContainerState::Running;
            run.started_at = Some(SystemTime::now());
        }
        let _ = events.send(ContainerEvent::Started { id: c.id.clone(), sandbox_id: c.sandbox_id.clone() });
        let _ = started.take().expect("sent once").send(Ok(()));
    }

    let status = child.wait().await;
    let finished_at = SystemTime::now();
    // The rest of the container dies with its main process, as in a pid
    // namespace whose init exits.
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    let cgroup = c.run.lock().cgroup.clone();
    if let Some(cgroup) = &cgroup {
        cgroup.kill_all();
    }
    for copier in copiers {
        let _ = tokio::time::timeout(LOG_DRAIN, copier).await;
    }
    let oom = cgroup.as_ref().is_some_and(ContainerCgroup::oom_killed);
    if let Some(cgroup) = &cgroup {
        cgroup.remove(Duration::from_secs(5)).await;
    }

    let (exit_code, reason, message) = match (&start_error, status) {
        (Some(error), _) => (128, "StartError", Some(error.clone())),
        (None, Ok(status)) => {
            let code = exit_code(status);
            (
                code,
                if oom {
                    "OOMKilled"
                } else if code == 0 {
                    "Completed"
                } else {
                    "Error"
                },
                None,
            )
        }
        (None, Err(e)) => (128, "Error", Some(format!("cannot wait for the container's process: {e}"))),
    };
    {
        let mut run = c.run.lock();
        run.state = ContainerState::Exited;
        run.finished_at = Some(finished_at);
        run.exit_code = Some(exit_code);
        run.reason = Some(reason.to_owned());
        run.message = message;
        run.pid = None;
    }
    if let Some(inner) = inner.upgrade() {
        inner.state.remove(&c.id);
    }
    c.exited.send_replace(true);
    let _ = events.send(ContainerEvent::Exited { id: c.id.clone(), sandbox_id: c.sandbox_id.clone(), exit_code });
    if let (Some(started), Some(error)) = (started, start_error) {
        let _ = started.send(Err(error));
    }
}

/// Reads at most `limit` bytes, then drains the rest.
async fn read_capped(mut reader: impl AsyncRead + Unpin, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = limit.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.config.kill_on_drop {
            return;
        }
        let mut cgroups = Vec::new();
        for c in self.containers.get_mut().values() {
            let run = c.run.lock();
            if let Some(pid) = run.pid {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                if let Some(cgroup) = &run.cgroup {
                    cgroup.kill_all();
                    cgroups.push(cgroup.clone());
                }
            }
        }
        // The monitors may not get to run again (the async runtime may be
        // going down with us): remove the cgroups here.
        for cgroup in cgroups {
            cgroup.remove_blocking(Duration::from_secs(2));
        }
        if let Some(root) = &self.cgroup_root {
            root.remove_if_empty();
        }
    }
}

#[async_trait]
impl RuntimeBackend for ProcessRuntime {
    async fn version(&self) -> Result<RuntimeVersion> {
        Ok(RuntimeVersion {
            runtime_name: RUNTIME_NAME.to_owned(),
            runtime_version: env!("CARGO_PKG_VERSION").to_owned(),
        })
    }

    async fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        super::set_pod_cidr(&self.inner.ipam, pod_cidr)
    }

    async fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        let ip = super::sandbox_ip(&self.inner.ipam, self.inner.config.host_ip, config)?;
        if let Err(e) = fs::create_dir_all(&config.log_directory) {
            if !config.host_network {
                self.inner.ipam.release(ip);
            }
            return Err(io_error(format!("creating the log directory {}", config.log_directory.display()), e));
        }
        let id = self.new_id();
        let sandbox =
            Sandbox { config: config.clone(), state: SandboxState::Ready, created_at: SystemTime::now(), ip: Some(ip) };
        self.inner.sandboxes.lock().insert(id.clone(), sandbox);
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        if !self.inner.sandboxes.lock().contains_key(id) {
            return Ok(());
        }
        let containers: Vec<ContainerId> =
            self.inner.containers.lock().values().filter(|c| &c.sandbox_id == id).map(|c| c.id.clone()).collect();
        for container in &containers {
            match self.stop_container(container, Duration::ZERO).await {
                Ok(()) | Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut sandboxes = self.inner.sandboxes.lock();
        if let Some(sandbox) = sandboxes.get_mut(id)
            && sandbox.state == SandboxState::Ready
        {
            sandbox.state = SandboxState::NotReady;
            if let Some(ip) = sandbox.ip.take()
                && !sandbox.config.host_network
            {
                self.inner.ipam.release(ip);
            }
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        self.stop_pod_sandbox(id).await?;
        let containers: Vec<ContainerId> =
            self.inner.containers.lock().values().filter(|c| &c.sandbox_id == id).map(|c| c.id.clone()).collect();
        for container in &containers {
            self.remove_container(container).await?;
        }
        self.inner.sandboxes.lock().remove(id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &SandboxId) -> Result<PodSandboxStatus> {
        let sandboxes = self.inner.sandboxes.lock();
        let sandbox = sandboxes.get(id).ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.clone() })?;
        Ok(Self::sandbox_status(id, sandbox))
    }

    async fn list_pod_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<PodSandboxStatus>> {
        let sandboxes = self.inner.sandboxes.lock();
        Ok(sandboxes.iter().map(|(id, s)| Self::sandbox_status(id, s)).filter(|s| filter.matches(s)).collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &SandboxId,
        config: &ContainerConfig,
        _sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let (sandbox_config, ip) = {
            let sandboxes = self.inner.sandboxes.lock();
            let sandbox = super::ready_sandbox(sandbox_id, sandboxes.get(sandbox_id), |s| s.state)?;
            (sandbox.config.clone(), sandbox.ip)
        };
        if config.name.is_empty() {
            return Err(RuntimeError::InvalidArgument("container name is empty".to_owned()));
        }
        let image = self.inner.config.catalog.resolve(&config.image)?;
        let argv = resolve_command(&image.entry, &config.command, &config.args);
        if argv.is_empty() || argv[0].is_empty() {
            return Err(RuntimeError::CreateFailed("no command specified".to_owned()));
        }
        for mount in &config.mounts {
            launch::check_mount(mount).map_err(RuntimeError::CreateFailed)?;
        }
        let meta = &sandbox_config.metadata;
        let pod = format!("{}_{}({})", meta.name, meta.namespace, meta.uid);
        let privileges = Privileges::resolve(&config.security, &self.inner.powers, &pod, &config.name)?;

        let id = self.new_id();
        let dir = self.inner.config.state_dir.join("containers").join(&id);
        let work = dir.join("work");
        fs::create_dir_all(&work).map_err(|e| io_error(work.display(), e))?;
        if privileges.switch {
            // The fresh working directory is the container's own.
            nix::unistd::chown(
                &work,
                Some(nix::unistd::Uid::from_raw(privileges.uid)),
                Some(nix::unistd::Gid::from_raw(privileges.gid)),
            )
            .map_err(|e| io_error(work.display(), e.into()))?;
        }
        let hostname =
            if sandbox_config.hostname.is_empty() { &sandbox_config.metadata.name } else { &sandbox_config.hostname };
        let mut extra = vec![(ENV_POD_IP, ip.map(|ip| ip.to_string()).unwrap_or_default())];
        if !self.inner.capabilities.mount_namespaces && !config.mounts.is_empty() {
            // No namespaces: each volume a symlink under $ORCHESTRA_VOLUMES.
            let volumes = dir.join("volumes");
            for mount in &config.mounts {
                let link = volumes.join(mount.container_path.strip_prefix("/").unwrap_or(&mount.container_path));
                let made = link
                    .parent()
                    .map_or(Ok(()), fs::create_dir_all)
                    .and_then(|()| std::os::unix::fs::symlink(&mount.host_path, &link));
                made.map_err(|e| RuntimeError::CreateFailed(format!("cannot link volume {}: {e}", link.display())))?;
            }
            extra.push((ENV_VOLUMES, volumes.display().to_string()));
        }
        let env = launch::environment(&image.entry.env, hostname, &config.envs, &extra);
        let log_relative = if config.log_path.as_os_str().is_empty() {
            PathBuf::from(format!("{}/{}.log", config.name, config.attempt))
        } else {
            config.log_path.clone()
        };
        let container = Arc::new(Container {
            id: id.clone(),
            sandbox_id: sandbox_id.clone(),
            config: config.clone(),
            image_ref: image.id,
            argv,
            env,
            working_dir: config.working_dir.clone().unwrap_or(work),
            dir,
            privileges,
            log_path: sandbox_config.log_directory.join(log_relative),
            created_at: SystemTime::now(),
            lifecycle: tokio::sync::Mutex::new(()),
            run: Mutex::new(Run {
                state: ContainerState::Created,
                started_at: None,
                finished_at: None,
                exit_code: None,
                reason: None,
                message: None,
                pid: None,
                cgroup: None,
                namespaced: false,
            }),
            exited: watch::channel(false).0,
        });
        self.inner.containers.lock().insert(id.clone(), container);
        self.publish(ContainerEvent::Created { id: id.clone(), sandbox_id: sandbox_id.clone() });
        Ok(id)
    }

    async fn start_container(&self, id: &ContainerId) -> Result<()> {
        let c = self.container(id)?;
        let _lifecycle = c.lifecycle.lock().await;
        let state = c.run.lock().state;
        if state != ContainerState::Created {
            return Err(RuntimeError::InvalidState(format!("container {id} is {state:?}, not Created")));
        }
        let ready = self.inner.sandboxes.lock().get(&c.sandbox_id).is_some_and(|s| s.state == SandboxState::Ready);
        if !ready {
            return Err(RuntimeError::InvalidState(format!("sandbox {} of container {id} is not ready", c.sandbox_id)));
        }
        match self.launch(&c).await {
            Ok(()) => Ok(()),
            Err(message) => {
                if c.run.lock().state != ContainerState::Exited {
                    self.record_start_error(&c, &message);
                }
                Err(RuntimeError::StartFailed(message))
            }
        }
    }

    async fn stop_container(&self, id: &ContainerId, timeout: Duration) -> Result<()> {
        let c = self.container(id)?;
        let _lifecycle = c.lifecycle.lock().await;
        let Some(pid) = c.run.lock().pid else {
            return Ok(());
        };
        let mut exited = c.exited.subscribe();
        let group = Pid::from_raw(pid);
        if !timeout.is_zero() {
            let _ = killpg(group, Signal::SIGTERM);
            if tokio::time::timeout(timeout, exited.wait_for(|e| *e)).await.is_ok() {
                return Ok(());
            }
        }
        let _ = killpg(group, Signal::SIGKILL);
        if let Some(cgroup) = &c.run.lock().cgroup {
            cgroup.kill_all();
        }
        match tokio::time::timeout(KILL_PATIENCE, exited.wait_for(|e| *e)).await {
            Ok(_) => Ok(()),
            Err(_) => Err(RuntimeError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("container {id} did not exit {KILL_PATIENCE:?} after SIGKILL"),
            ))),
        }
    }

    async fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let Ok(c) = self.container(id) else {
            return Ok(());
        };
        self.stop_container(id, Duration::ZERO).await?;
        let _lifecycle = c.lifecycle.lock().await;
        if self.inner.containers.lock().remove(id).is_none() {
            return Ok(());
        }
        if let Err(e) = fs::remove_dir_all(&c.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(container = %id, error = %e, "cannot remove the container's directory");
        }
        self.publish(ContainerEvent::Removed { id: id.clone(), sandbox_id: c.sandbox_id.clone() });
        Ok(())
    }

    async fn container_status(&self, id: &ContainerId) -> Result<ContainerStatus> {
        let container = self.container(id)?;
        Ok(Self::status_of(&container))
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        let containers: Vec<Arc<Container>> = self.inner.containers.lock().values().cloned().collect();
        Ok(containers.iter().map(|c| Self::status_of(c)).filter(|s| filter.matches(s)).collect())
    }

    async fn exec_sync(&self, id: &ContainerId, command: &[String], timeout: Duration) -> Result<ExecResult> {
        let mut cmd = match self.prepare_exec(id, command)? {
            exec::Prepared::Command(cmd) => Command::from(cmd.std(None)),
            exec::Prepared::Failed { exit_code, message } => {
                return Ok(ExecResult { exit_code, stdout: Vec::new(), stderr: message.into_bytes() });
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| io_error(format!("exec in container {id}"), e))?;
        let exec_pid = child.id().map(|p| p as i32);
        let stdout = tokio::spawn(read_capped(child.stdout.take().expect("piped"), EXEC_OUTPUT_LIMIT));
        let stderr = tokio::spawn(read_capped(child.stderr.take().expect("piped"), EXEC_OUTPUT_LIMIT));
        let waited =
            if timeout.is_zero() { Ok(child.wait().await) } else { tokio::time::timeout(timeout, child.wait()).await };
        let status = match waited {
            Ok(status) => status.map_err(|e| io_error(format!("exec in container {id}"), e))?,
            Err(_) => {
                if let Some(exec_pid) = exec_pid {
                    let _ = killpg(Pid::from_raw(exec_pid), Signal::SIGKILL);
                }
                let _ = child.wait().await;
                stdout.abort();
                stderr.abort();
                return Err(RuntimeError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("command {command:?} in container {id} timed out after {timeout:?}"),
                )));
            }
        };
        // Output held open by a background child of the command: give up
        // on it after a moment rather than wait for that child.
        let collect = |handle: tokio::task::JoinHandle<Vec<u8>>| async move {
            tokio::time::timeout(Duration::from_secs(1), handle).await.ok().and_then(|r| r.ok()).unwrap_or_default()
        };
        let (stdout, stderr) = tokio::join!(collect(stdout), collect(stderr));
        Ok(ExecResult { exit_code: exit_code(status), stdout, stderr })
    }

    async fn exec(&self, id: &ContainerId, request: ExecRequest) -> Result<ExecSession> {
        match self.prepare_exec(id, &request.command)? {
            exec::Prepared::Command(cmd) => exec::start(cmd, &request, &self.inner.tools)
                .map_err(|e| io_error(format!("exec in container {id}"), e)),
            exec::Prepared::Failed { exit_code, message } => Ok(exec::failed(exit_code, message)),
        }
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        Ok(self.inner.config.catalog.resolve(image)?.id)
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        Ok(self.inner.config.catalog.image(image))
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok(self.inner.config.catalog.images())
    }

    fn events(&self) -> broadcast::Receiver<ContainerEvent> {
        self.inner.events.subscribe()
    }
}
