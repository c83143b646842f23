//! [`LogBackend`]: audit events as JSON lines in a file, rotated by size
//! and pruned by count and age (kube-apiserver's `--audit-log-path`,
//! `--audit-log-maxsize`, `--audit-log-maxbackup`, `--audit-log-maxage`).
//!
//! Writing never blocks a request (upstream's `batch` mode): events go
//! through a bounded queue to a writer thread. When the queue is full the
//! event is dropped, counted ([`LogBackend::dropped`]) and reported in the
//! server's log.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use super::{AuditSink, Event};

/// Upstream's (lumberjack's) size when `--audit-log-maxsize` is 0.
const DEFAULT_MAX_SIZE: u64 = 100 << 20;

/// Where and how the log is written.
///
/// ```
/// use orchestra_core::audit::LogOptions;
///
/// let options = LogOptions::new("/var/log/orchestra/audit.log").max_size_megabytes(100).max_backups(10).max_age_days(30);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LogOptions {
    /// The log file; `-` writes to standard output (never rotated).
    pub path: PathBuf,
    /// The size at which the file is rotated, in bytes (0: 100 MiB).
    pub max_size_bytes: u64,
    /// How many rotated files are kept (0: all).
    pub max_backups: usize,
    /// How old a rotated file may get before it is removed (`None`: no limit).
    pub max_age: Option<Duration>,
    /// How many events may wait for the writer before new ones are dropped.
    pub buffer: usize,
}

impl LogOptions {
    /// Writes to `path`, rotated at 100 MiB, every backup kept, a queue of
    /// 10000 events.
    pub fn new(path: impl Into<PathBuf>) -> LogOptions {
        LogOptions { path: path.into(), max_size_bytes: 0, max_backups: 0, max_age: None, buffer: 10_000 }
    }

    /// Rotates at `megabytes` MiB (`--audit-log-maxsize`; 0: 100).
    pub fn max_size_megabytes(self, megabytes: u64) -> LogOptions {
        self.max_size_bytes(megabytes << 20)
    }

    /// Rotates at `bytes` (0: 100 MiB).
    pub fn max_size_bytes(mut self, bytes: u64) -> LogOptions {
        self.max_size_bytes = bytes;
        self
    }

    /// Keeps at most `count` rotated files (`--audit-log-maxbackup`; 0: all).
    pub fn max_backups(mut self, count: usize) -> LogOptions {
        self.max_backups = count;
        self
    }

    /// Removes rotated files older than `days` days (`--audit-log-maxage`;
    /// 0: no limit).
    pub fn max_age_days(mut self, days: u64) -> LogOptions {
        self.max_age = (days > 0).then(|| Duration::from_secs(days * 24 * 60 * 60));
        self
    }

    /// Queues at most `events` events for the writer.
    pub fn buffer(mut self, events: usize) -> LogOptions {
        self.buffer = events.max(1);
        self
    }
}

/// The log-file [`AuditSink`]. The writer thread stops once the backend
/// (every clone of the server holding it) is dropped, after writing what
/// was queued.
#[derive(Debug)]
pub struct LogBackend {
    queue: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl LogBackend {
    /// Opens (creates, appends to) the log file and starts its writer.
    pub fn open(options: LogOptions) -> io::Result<LogBackend> {
        let mut output = Output::open(options.clone())?;
        let (queue, events) = std::sync::mpsc::sync_channel(options.buffer.max(1));
        std::thread::Builder::new().name("audit-log".into()).spawn(move || output.run(events))?;
        Ok(LogBackend { queue, dropped: Arc::default() })
    }

    /// How many events were dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl AuditSink for LogBackend {
    fn process(&self, event: &Event) {
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(error) => return tracing::warn!(%error, "an audit event does not serialize"),
        };
        line.push(b'\n');
        match self.queue.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(dropped, "the audit log's queue is full: events are dropped");
                }
            }
            Err(TrySendError::Disconnected(_)) => tracing::warn!("the audit log's writer has stopped"),
        }
    }
}

/// The writer thread's side: the open file and its size.
struct Output {
    options: LogOptions,
    file: Option<BufWriter<File>>,
    size: u64,
}

impl Output {
    fn open(options: LogOptions) -> io::Result<Output> {
        let mut output = Output { options, file: None, size: 0 };
        if output.options.path != Path::new("-") {
            output.reopen()?;
        }
        Ok(output)
    }

    fn reopen(&mut self) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        if let Some(parent) = self.options.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        let file = fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&self.options.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(BufWriter::new(file));
        Ok(())
    }

    fn run(&mut self, events: Receiver<Vec<u8>>) {
        while let Ok(first) = events.recv() {
            let mut next = Some(first);
            while let Some(line) = next {
                if let Err(error) = self.write(&line) {
                    tracing::warn!(%error, path = %self.options.path.display(), "cannot write the audit log");
                }
                next = events.try_recv().ok();
            }
            // Nothing more queued: what was written reaches the file.
            let flushed = match &mut self.file {
                Some(file) => file.flush(),
                None => io::stdout().flush(),
            };
            if let Err(error) = flushed {
                tracing::warn!(%error, "cannot flush the audit log");
            }
        }
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            return io::stdout().write_all(line);
        }
        let limit = if self.options.max_size_bytes == 0 { DEFAULT_MAX_SIZE } else { self.options.max_size_bytes };
        if self.size > 0 && self.size + line.len() as u64 > limit {
            self.rotate()?;
        }
        self.file.as_mut().expect("open").write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Renames the file to `<name>-<UTC time>.<ext>` (lumberjack's names),
    /// opens a new one and prunes the backups.
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
        let (stem, ext) = stem_and_ext(&self.options.path);
        let now = k8s_openapi::jiff::Timestamp::now();
        let stamp = format!("{}.{:03}", now.strftime("%Y-%m-%dT%H-%M-%S"), now.subsec_millisecond());
        let mut backup = self.options.path.with_file_name(format!("{stem}-{stamp}{ext}"));
        let mut n = 1;
        while backup.exists() {
            backup = self.options.path.with_file_name(format!("{stem}-{stamp}-{n}{ext}"));
            n += 1;
        }
        fs::rename(&self.options.path, &backup)?;
        self.reopen()?;
        self.prune();
        Ok(())
    }

    /// Removes backups beyond the count and older than the age limits.
    fn prune(&self) {
        let mut backups = backups(&self.options.path);
        // Newest first.
        backups.sort_by_key(|backup| std::cmp::Reverse(backup.1));
        let now = SystemTime::now();
        for (i, (path, modified)) in backups.iter().enumerate() {
            let too_many = self.options.max_backups > 0 && i >= self.options.max_backups;
            let too_old = self
                .options
                .max_age
                .is_some_and(|age| now.duration_since(*modified).is_ok_and(|elapsed| elapsed > age));
            if (too_many || too_old)
                && let Err(error) = fs::remove_file(path)
            {
                tracing::warn!(%error, path = %path.display(), "cannot remove an old audit log");
            }
        }
    }
}

/// `audit` and `.log` for `audit.log`.
fn stem_and_ext(path: &Path) -> (String, String) {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    (stem, ext)
}

/// The rotated files of the log at `path`, with their modification times.
pub(super) fn backups(path: &Path) -> Vec<(PathBuf, SystemTime)> {
    let (stem, ext) = stem_and_ext(path);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("{stem}-")) && name.ends_with(&ext) && entry.path() != path
        })
        .filter_map(|entry| Some((entry.path(), entry.metadata().ok()?.modified().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Event {
        Event::new(format!("id-{n:04}"), "get", "/".repeat(100))
    }

    fn eventually(mut check: impl FnMut() -> bool) {
        for _ in 0..500 {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("not reached in time");
    }

    #[test]
    fn rotates_by_size_and_keeps_max_backups() {
        // (max backups, events written, rotated files expected)
        for (max_backups, events, expected_backups) in [(0, 40, 3), (2, 40, 2), (1, 25, 1), (3, 10, 0)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("audit.log");
            let one = serde_json::to_vec(&line(0)).unwrap().len() as u64 + 1;
            let backend =
                LogBackend::open(LogOptions::new(&path).max_size_bytes(one * 10).max_backups(max_backups)).unwrap();
            for n in 0..events {
                backend.process(&line(n));
                // One at a time: every rotation happens, whatever the timing.
                eventually(|| fs::read_to_string(&path).is_ok_and(|t| t.contains(&format!("id-{n:04}"))));
            }
            let kept = backups(&path);
            assert_eq!(kept.len(), expected_backups, "max {max_backups}, {events} events: {kept:?}");
            let current = fs::read_to_string(&path).unwrap();
            assert!(current.lines().count() <= 10);
            for text in current.lines() {
                let event: serde_json::Value = serde_json::from_str(text).unwrap();
                assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
            }
            // The newest backup holds the ten events before the current file's.
            if let Some((newest, _)) = kept.iter().max_by_key(|(_, modified)| *modified) {
                assert_eq!(fs::read_to_string(newest).unwrap().lines().count(), 10, "{newest:?}");
            }
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn a_full_queue_drops_events_instead_of_blocking() {
        // A queue of two that no writer drains.
        let (queue, _events) = std::sync::mpsc::sync_channel(2);
        let backend = LogBackend { queue, dropped: Arc::default() };
        for n in 0..5 {
            backend.process(&line(n));
        }
        assert_eq!(backend.dropped(), 3);
    }

    #[test]
    fn old_backups_are_removed_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let old = dir.path().join("audit-2001-01-01T00-00-00.000.log");
        fs::write(&old, "{}\n").unwrap();
        let file = File::options().write(true).open(&old).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(3 * 24 * 3600)).unwrap();
        let mut output = Output::open(LogOptions::new(&path).max_size_bytes(10).max_age_days(2)).unwrap();
        output.write(b"0123456789\n").unwrap();
        output.write(b"0123456789\n").unwrap();
        assert!(!old.exists(), "older than two days");
        assert_eq!(backups(&path).len(), 1, "the new backup is kept");
    }
}
