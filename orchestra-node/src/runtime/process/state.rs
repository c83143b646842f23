//! The process backend's state file: which process groups it started, so
//! that a successor on the same state directory can kill what a crashed
//! predecessor left running.
//!
//! A record is `(pid, start time)`: the start time (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot) tells a recorded process
//! from a later one that reused its pid. The successor kills only processes
//! that still match their record (and the processes still inside the
//! container's own cgroup); it never touches anything else.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::cgroup::ContainerCgroup;

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// State letter (`R`, `S`, `Z`...).
    pub state: char,
    /// Process group.
    pub pgrp: i32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) is in parentheses and may hold anything:
    // the other fields follow its last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Whether a process is alive (not gone, not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

/// One started container process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Pid, which is also the process group id.
    pub pid: i32,
    /// Its start time, from `/proc/<pid>/stat`.
    pub start_time: u64,
    /// The container's cgroup directories.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileContent {
    /// container id → record.
    containers: BTreeMap<String, Record>,
}

/// The state file, rewritten (atomically) on every change.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    content: Mutex<FileContent>,
}

/// What the cleanup of a predecessor's leftovers did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeftoverReport {
    /// Process groups found alive and matching their record, killed.
    pub killed_groups: Vec<i32>,
    /// Other processes found in the recorded containers' cgroups, killed.
    pub killed_in_cgroups: Vec<i32>,
    /// Records whose process was gone or had been replaced (pid reused):
    /// left alone.
    pub stale_records: usize,
}

impl StateFile {
    /// The state file of `state_dir`, empty.
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self { path: state_dir.join("process-runtime.json"), content: Mutex::new(FileContent::default()) }
    }

    /// Records a started process.
    pub(crate) fn add(&self, container_id: &str, record: Record) {
        let mut content = self.content.lock();
        content.containers.insert(container_id.to_owned(), record);
        self.save(&content);
    }

    /// Forgets an exited process.
    pub(crate) fn remove(&self, container_id: &str) {
        let mut content = self.content.lock();
        if content.containers.remove(container_id).is_some() {
            self.save(&content);
        }
    }

    fn save(&self, content: &FileContent) {
        let result = (|| -> io::Result<()> {
            let tmp = self.path.with_extension("json.tmp");
            fs::write(&tmp, serde_json::to_vec_pretty(content).map_err(io::Error::other)?)?;
            fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = result {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the process runtime's state file");
        }
    }

    /// Kills what the records of a predecessor's state file still match,
    /// waits (up to `patience`) for it to go, removes its cgroups and
    /// empties the file.
    pub(crate) async fn clean_leftovers(&self, patience: Duration) -> io::Result<LeftoverReport> {
        let records: FileContent = match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %self.path.display(), error = %e, "unreadable state file; nothing to clean");
                FileContent::default()
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => FileContent::default(),
            Err(e) => return Err(e),
        };
        let mut report = LeftoverReport::default();
        let mut waiting = Vec::new();
        let mut cgroups = Vec::new();
        for (id, record) in &records.containers {
            match proc_stat(record.pid) {
                Some(stat) if stat.start_time == record.start_time && stat.state != 'Z' => {
                    tracing::info!(container = %id, pid = record.pid, "killing a leftover container process group");
                    if stat.pgrp == record.pid {
                        let _ = killpg(Pid::from_raw(record.pid), Signal::SIGKILL);
                    } else {
                        let _ = kill(Pid::from_raw(record.pid), Signal::SIGKILL);
                    }
                    report.killed_groups.push(record.pid);
                    waiting.push(record.pid);
                }
                _ => report.stale_records += 1,
            }
            if !record.cgroups.is_empty() {
                let cgroup = ContainerCgroup::from_dirs(record.cgroups.clone());
                report.killed_in_cgroups.extend(cgroup.pids());
                cgroups.push(cgroup);
            }
        }
        let deadline = tokio::time::Instant::now() + patience;
        while waiting.iter().any(|&pid| alive(pid)) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for cgroup in &cgroups {
            cgroup.remove(patience).await;
        }
        self.save(&FileContent::default());
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn stat_lines_parse_whatever_the_command_name() {
        let line = "4242 (we ird) name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100 0";
        assert_eq!(parse_stat(line), Some(ProcStat { state: 'S', pgrp: 4242, start_time: 987_654 }));
        assert_eq!(parse_stat("garbage"), None);
        let own = proc_stat(std::process::id() as i32).unwrap();
        assert!(own.start_time > 0);
    }

    fn sleeper() -> std::process::Child {
        Command::new("sleep").arg("30").process_group(0).stdin(Stdio::null()).spawn().unwrap()
    }

    #[tokio::test]
    async fn only_matching_records_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut recorded = sleeper();
        let mut impostor = sleeper();
        let recorded_pid = recorded.id() as i32;
        let impostor_pid = impostor.id() as i32;
        let file = StateFile::new(dir.path());
        file.add(
            "a",
            Record { pid: recorded_pid, start_time: proc_stat(recorded_pid).unwrap().start_time, cgroups: vec![] },
        );
        // Same pid as a live process, other start time: a reused pid.
        file.add(
            "b",
            Record { pid: impostor_pid, start_time: proc_stat(impostor_pid).unwrap().start_time + 1, cgroups: vec![] },
        );
        file.add("c", Record { pid: i32::MAX - 1, start_time: 1, cgroups: vec![] });

        let successor = StateFile::new(dir.path());
        let report = successor.clean_leftovers(Duration::from_secs(10)).await.unwrap();
        assert_eq!(report.killed_groups, [recorded_pid]);
        assert_eq!(report.stale_records, 2);
        let status = recorded.wait().unwrap();
        assert!(status.code().is_none(), "killed by a signal: {status:?}");
        assert!(alive(impostor_pid), "a process whose start time does not match must be left alone");
        impostor.kill().unwrap();
        impostor.wait().unwrap();
        // The file is empty now: a second cleanup does nothing.
        let again = StateFile::new(dir.path()).clean_leftovers(Duration::from_secs(1)).await.unwrap();
        assert_eq!(again, LeftoverReport::default());
    }
}
