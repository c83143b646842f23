//! Machine facts for report headers, and scratch directories on a real disk.

use std::path::{Path, PathBuf};

/// The environment variable that overrides where scratch directories go.
pub const SCRATCH_ENV: &str = "ORCHESTRA_BENCH_DIR";

/// Logical CPUs available to this process.
pub fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU model name, from `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The kernel release, from `/proc/sys/kernel/osrelease`.
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "unknown".into(), |s| s.trim().to_owned())
}

/// Total memory in GiB, from `/proc/meminfo`.
pub fn memory_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib / (1024.0 * 1024.0))
        })
        .unwrap_or(0.0)
}

/// The 1, 5 and 15 minute load averages, from `/proc/loadavg` (`"0.12 0.30 0.25"`).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The mount a path lives on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The filesystem type (`ext4`, `xfs`, `tmpfs`, `overlay`, ...).
    pub fs_type: String,
    /// The device or source (`/dev/vda`, `tmpfs`, ...).
    pub source: String,
}

impl Mount {
    /// True for filesystems that live in memory, where `fsync` costs nothing.
    pub fn is_memory_backed(&self) -> bool {
        matches!(self.fs_type.as_str(), "tmpfs" | "ramfs" | "devtmpfs")
    }
}

/// The mount `path` lives on (the longest mount point that contains it),
/// from `/proc/self/mountinfo`.
pub fn mount_of(path: &Path) -> Option<Mount> {
    let path = path.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = PathBuf::from(left.split_whitespace().nth(4)?.replace("\\040", " "));
            let mut right = right.split_whitespace();
            let fs_type = right.next()?.to_owned();
            let source = right.next().unwrap_or("").to_owned();
            path.starts_with(&mount_point).then_some(Mount { mount_point, fs_type, source })
        })
        // Later lines shadow earlier ones mounted on the same point.
        .fold(None, |best: Option<Mount>, m| match best {
            Some(b) if b.mount_point.components().count() > m.mount_point.components().count() => Some(b),
            _ => Some(m),
        })
}

/// A fresh temporary directory for benchmark data under `$ORCHESTRA_BENCH_DIR`
/// or else `/var/tmp` (which, unlike `/tmp`, is normally on disk). Removed
/// when dropped. Fails if the parent is memory-backed, because durable-write
/// numbers measured on tmpfs are meaningless.
pub fn scratch_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let parent = std::env::var_os(SCRATCH_ENV).map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    if let Some(mount) = mount_of(&parent)
        && mount.is_memory_backed()
    {
        return Err(std::io::Error::other(format!(
            "{} is on {} ({}), which is memory-backed; set {SCRATCH_ENV} to a directory on disk",
            parent.display(),
            mount.mount_point.display(),
            mount.fs_type
        )));
    }
    tempfile::Builder::new().prefix(prefix).tempdir_in(parent)
}

/// Total size of the files under `path`, in bytes.
pub fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_root_mount() {
        let m = mount_of(Path::new("/")).expect("/ is mounted");
        assert_eq!(m.mount_point, PathBuf::from("/"));
        assert!(nproc() >= 1);
    }
}
