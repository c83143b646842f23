//! Control groups of the process backend: one cgroup per container, with the
//! container's limits, used to detect OOM kills and to find every process
//! of the container when it must die.
//!
//! Every runtime has its own *scope* below the parent, named after its state
//! directory (`runtime-<hash>`): holding the directory's lock, the runtime
//! owns everything in it, so at start-up it removes whatever a predecessor
//! left there, and when dropped it removes what it made.
//!
//! - cgroup v2 (`/sys/fs/cgroup` is `cgroup2fs` with the `memory` and `cpu`
//!   controllers): `/sys/fs/cgroup/<parent>/<scope>/<container id>` with
//!   `memory.max` (and `memory.swap.max = 0`), `cpu.max`, `cpu.weight`,
//!   `pids.max` (when the `pids` controller is there);
//!   OOM kills counted in `memory.events`.
//! - cgroup v1 (legacy or hybrid hierarchies, as inside many containers):
//!   `<memory mount>/<own cgroup>/<parent>/<scope>/<container id>` and the same
//!   under the `cpu` hierarchy, nested under the agent's own cgroups so the
//!   limits the agent lives under still hold; `memory.limit_in_bytes` (and
//!   `memory.memsw.limit_in_bytes`), `cpu.cfs_quota_us`, `cpu.shares`,
//!   `pids.max` in the `pids` hierarchy when it is writable; OOM
//!   kills counted in `memory.oom_control`.
//!
//! CPU numbers follow the kubelet: shares = request millicores × 1024 / 1000
//! (2..=262144), weight = 1 + (shares − 2) × 9999 / 262142, quota =
//! limit millicores × 100 µs per 100 ms period.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::runtime::ContainerResources;

/// The cgroup interface a host offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// Legacy hierarchies, one per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// Where containers' cgroups go.
#[derive(Debug, Clone)]
pub(crate) struct CgroupRoot {
    version: CgroupVersion,
    /// v2: the one parent; v1: the memory parent.
    memory: PathBuf,
    /// v1: the cpu parent (`None` when the cpu hierarchy is not writable).
    cpu: Option<PathBuf>,
    /// v1: the pids parent (`None` when the pids hierarchy is not
    /// writable).
    pids: Option<PathBuf>,
    /// v2: the `pids` controller is enabled for the containers' cgroups.
    pids_v2: bool,
}

/// One container's cgroup(s).
#[derive(Debug, Clone)]
pub(crate) struct ContainerCgroup {
    version: CgroupVersion,
    /// Every directory of this container (one for v2, one per hierarchy for v1).
    dirs: Vec<PathBuf>,
}

struct MountInfo {
    root: String,
    mount_point: PathBuf,
    fs_type: String,
    super_options: String,
}

fn mounts() -> io::Result<Vec<MountInfo>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            Some(MountInfo {
                root: fields.get(3)?.to_string(),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fs_type: right.first()?.to_string(),
                super_options: right.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect())
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && let Ok(value) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("x"), 8)
        {
            out.push(value);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The agent's own cgroup path in the hierarchy holding `controller`
/// (`""` for the unified hierarchy).
fn own_cgroup(controller: &str) -> io::Result<Option<String>> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    Ok(text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_owned())
    }))
}

/// Enables the `pids` controller for `dir`'s children; whether it is.
fn enable_pids(dir: &Path) -> bool {
    let current = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    current.split_whitespace().any(|c| c == "pids") || fs::write(dir.join("cgroup.subtree_control"), "+pids").is_ok()
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {value:?} to {}: {e}", path.display())))
}

impl CgroupRoot {
    /// Finds a writable cgroup interface and creates `<parent>` in it, or
    /// says why there is none.
    pub(crate) fn detect(parent: &str) -> Result<Self, String> {
        let mounts = mounts().map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
        // v2: the unified hierarchy, with its controllers.
        if let Some(unified) =
            mounts.iter().find(|m| m.fs_type == "cgroup2" && m.mount_point == Path::new("/sys/fs/cgroup"))
        {
            return Self::detect_v2(&unified.mount_point, parent);
        }
        // v1: the memory (and cpu) hierarchies, under the agent's own cgroup.
        let dir_of = |controller: &str| -> Option<PathBuf> {
            let mount =
                mounts.iter().find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == controller))?;
            let own = own_cgroup(controller).ok()??;
            let relative = own.strip_prefix(mount.root.as_str()).unwrap_or(&own).trim_start_matches('/').to_owned();
            Some(mount.mount_point.join(relative).join(parent))
        };
        let Some(memory) = dir_of("memory") else {
            return Err("no cgroup2 at /sys/fs/cgroup and no cgroup v1 memory hierarchy".into());
        };
        fs::create_dir_all(&memory).map_err(|e| format!("cannot create cgroup {}: {e}", memory.display()))?;
        static PROBES: AtomicU64 = AtomicU64::new(0);
        let probe = memory.join(format!("probe-{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed)));
        let probed = fs::create_dir(&probe)
            .and_then(|()| write(&probe.join("memory.limit_in_bytes"), "1073741824"))
            .map_err(|e| format!("cgroup v1 memory hierarchy is not usable: {e}"));
        let _ = fs::remove_dir(&probe);
        probed?;
        let cpu = dir_of("cpu").and_then(|cpu| fs::create_dir_all(&cpu).ok().map(|()| cpu));
        let pids = dir_of("pids").and_then(|pids| fs::create_dir_all(&pids).ok().map(|()| pids));
        Ok(Self { version: CgroupVersion::V1, memory, cpu, pids, pids_v2: false })
    }

    fn detect_v2(mount: &Path, parent: &str) -> Result<Self, String> {
        let controllers = fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if !has("memory") || !has("cpu") {
            return Err(format!("cgroup2 at {} lacks the memory or cpu controller ({controllers:?})", mount.display()));
        }
        let base = mount.join(parent);
        let enable = |dir: &Path| -> Result<(), String> {
            let current = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if current.split_whitespace().any(|c| c == "memory") && current.split_whitespace().any(|c| c == "cpu") {
                return Ok(());
            }
            write(&dir.join("cgroup.subtree_control"), "+memory +cpu").map_err(|e| e.to_string())
        };
        enable(mount)?;
        fs::create_dir_all(&base).map_err(|e| format!("cannot create cgroup {}: {e}", base.display()))?;
        enable(&base)?;
        // pids is optional: without it, pids.max is not enforced.
        let pids_v2 = has("pids") && enable_pids(mount) && enable_pids(&base);
        Ok(Self { version: CgroupVersion::V2, memory: base, cpu: None, pids: None, pids_v2 })
    }

    /// Whether containers' cgroups get `pids.max`.
    pub(crate) fn has_pids(&self) -> bool {
        self.pids_v2 || self.pids.is_some()
    }

    /// The sub-parent `scope` (one per runtime state directory), created:
    /// the runtime owns everything below it.
    pub(crate) fn scoped(&self, scope: &str) -> io::Result<Self> {
        let memory = self.memory.join(scope);
        fs::create_dir_all(&memory)?;
        let mut pids_v2 = false;
        if self.version == CgroupVersion::V2 {
            let current = fs::read_to_string(memory.join("cgroup.subtree_control")).unwrap_or_default();
            if !(current.contains("memory") && current.contains("cpu")) {
                write(&memory.join("cgroup.subtree_control"), "+memory +cpu")?;
            }
            pids_v2 = self.pids_v2 && enable_pids(&memory);
        }
        let scoped = |parent: &Option<PathBuf>| -> io::Result<Option<PathBuf>> {
            match parent {
                Some(parent) => {
                    let dir = parent.join(scope);
                    fs::create_dir_all(&dir)?;
                    Ok(Some(dir))
                }
                None => Ok(None),
            }
        };
        let cpu = scoped(&self.cpu)?;
        let pids = scoped(&self.pids).ok().flatten();
        Ok(Self { version: self.version, memory, cpu, pids, pids_v2 })
    }

    /// Every container cgroup below this one (a predecessor's leftovers
    /// when called at start-up), keyed by container id.
    pub(crate) fn children(&self) -> Vec<ContainerCgroup> {
        let mut by_id: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
        for parent in std::iter::once(&self.memory).chain(self.cpu.as_ref()).chain(self.pids.as_ref()) {
            for entry in fs::read_dir(parent).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    by_id.entry(entry.file_name().to_string_lossy().into_owned()).or_default().push(entry.path());
                }
            }
        }
        by_id.into_values().map(|dirs| ContainerCgroup { version: self.version, dirs }).collect()
    }

    /// Removes this (scope) cgroup if it is empty; best effort.
    pub(crate) fn remove_if_empty(&self) {
        for dir in std::iter::once(&self.memory).chain(self.cpu.as_ref()).chain(self.pids.as_ref()) {
            let _ = fs::remove_dir(dir);
        }
    }

    /// The interface in use.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Creates the container's cgroup and writes its limits.
    pub(crate) fn create(&self, id: &str, resources: &ContainerResources) -> io::Result<ContainerCgroup> {
        let mut cgroup = ContainerCgroup { version: self.version, dirs: Vec::new() };
        let result = self.create_into(&mut cgroup, id, resources);
        if result.is_err() {
            cgroup.remove_now();
        }
        result.map(|()| cgroup)
    }

    fn create_into(&self, cgroup: &mut ContainerCgroup, id: &str, resources: &ContainerResources) -> io::Result<()> {
        let memory = self.memory.join(id);
        fs::create_dir(&memory)?;
        cgroup.dirs.push(memory.clone());
        let shares = resources.cpu_request_millis.map(|m| (m * 1024 / 1000).clamp(2, 262_144));
        let quota = resources.cpu_limit_millis.map(|m| (m * 100).max(1000));
        match self.version {
            CgroupVersion::V2 => {
                if let Some(bytes) = resources.memory_limit_bytes {
                    write(&memory.join("memory.max"), &bytes.to_string())?;
                    let _ = fs::write(memory.join("memory.swap.max"), "0");
                }
                if let Some(quota) = quota {
                    write(&memory.join("cpu.max"), &format!("{quota} 100000"))?;
                }
                if let Some(shares) = shares {
                    write(&memory.join("cpu.weight"), &(1 + (shares - 2) * 9999 / 262_142).to_string())?;
                }
                if let (true, Some(limit)) = (self.pids_v2, resources.pids_limit) {
                    write(&memory.join("pids.max"), &limit.to_string())?;
                }
            }
            CgroupVersion::V1 => {
                if let Some(bytes) = resources.memory_limit_bytes {
                    write(&memory.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    // Without swap accounting the file is absent: fine.
                    let _ = fs::write(memory.join("memory.memsw.limit_in_bytes"), bytes.to_string());
                }
                if let Some(cpu) = &self.cpu {
                    let cpu = cpu.join(id);
                    fs::create_dir(&cpu)?;
                    cgroup.dirs.push(cpu.clone());
                    if let Some(quota) = quota {
                        write(&cpu.join("cpu.cfs_period_us"), "100000")?;
                        write(&cpu.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    }
                    if let Some(shares) = shares {
                        write(&cpu.join("cpu.shares"), &shares.to_string())?;
                    }
                }
                if let Some(pids) = &self.pids {
                    let pids = pids.join(id);
                    fs::create_dir(&pids)?;
                    cgroup.dirs.push(pids.clone());
                    if let Some(limit) = resources.pids_limit {
                        write(&pids.join("pids.max"), &limit.to_string())?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl ContainerCgroup {
    /// The `cgroup.procs` files a process writes its pid to, to join.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The cgroup directories (recorded in the state file).
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// A cgroup rebuilt from recorded directories (leftovers of a crash).
    pub(crate) fn from_dirs(dirs: Vec<PathBuf>) -> Self {
        let version = if dirs.first().is_some_and(|d| d.join("memory.events").exists()) {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        };
        Self { version, dirs }
    }

    /// Whether the kernel's OOM killer killed a process of this cgroup.
    pub(crate) fn oom_killed(&self) -> bool {
        let (file, dir) = match self.version {
            CgroupVersion::V2 => ("memory.events", self.dirs.first()),
            CgroupVersion::V1 => ("memory.oom_control", self.dirs.first()),
        };
        let Some(text) = dir.and_then(|d| fs::read_to_string(d.join(file)).ok()) else {
            return false;
        };
        text.lines().any(|line| {
            line.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()).is_some_and(|n| n > 0)
        })
    }

    /// Pids still in the cgroup.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .procs_files()
            .iter()
            .filter_map(|f| fs::read_to_string(f).ok())
            .flat_map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// SIGKILLs every process of the cgroup (all of them are the
    /// container's: the cgroup is its own).
    pub(crate) fn kill_all(&self) {
        if self.version == CgroupVersion::V2
            && let Some(dir) = self.dirs.first()
            && fs::write(dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    /// Kills what is left and removes the directories, blocking up to
    /// `patience` (for `Drop`, where nothing can be awaited).
    pub(crate) fn remove_blocking(&self, patience: Duration) {
        let deadline = std::time::Instant::now() + patience;
        loop {
            self.kill_all();
            if self.remove_now() || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn remove_now(&self) -> bool {
        let mut all = true;
        for dir in &self.dirs {
            match fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => all = false,
            }
        }
        all
    }

    /// Kills what is left and removes the directories, waiting up to
    /// `patience` for the processes to go.
    pub(crate) async fn remove(&self, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            self.kill_all();
            if self.remove_now() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(dirs = ?self.dirs, "cgroup still busy; left in place");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_fields_unescape() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\"), r"/end\");
    }
}
