//! Machine facts for report headers, CPU time (of the process, of each of its
//! threads and of the machine), and scratch directories on a real disk.

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

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`...) in MiB; zero if absent.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// This process's resident set size in MiB (`VmRSS`).
pub fn rss_mb() -> f64 {
    status_mib("VmRSS")
}

/// This process's peak resident set size in MiB (`VmHWM`).
pub fn peak_rss_mb() -> f64 {
    status_mib("VmHWM")
}

/// Clock ticks per second of `/proc` CPU times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// CPU time (user + system, all threads) this process has used, in seconds,
/// from `/proc/self/stat`.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name may hold spaces: the fields of interest follow its ')'.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / USER_HZ
}

/// The time fields of the `cpu` line of `/proc/stat` (all CPUs), in
/// seconds: user, nice, system, idle, iowait, irq, softirq, steal.
fn machine_cpu_fields() -> [f64; 8] {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut fields = [0.0; 8];
    if let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) {
        for (field, value) in fields.iter_mut().zip(line.split_whitespace().skip(1)) {
            *field = value.parse::<f64>().unwrap_or(0.0) / USER_HZ;
        }
    }
    fields
}

/// The kernel's clock source (`tsc`, `kvm-clock`, `hpet`, ...), from
/// `/sys/devices/system/clocksource/clocksource0`: with some of them
/// (`hpet`, `acpi_pm`) every clock read is a system call, which changes
/// what a request costs.
pub fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_owned())
}

/// Measures CPU use over a window: this process's CPU time per wall-clock
/// second (100 % = one CPU busy) and the whole machine's, to tell this
/// process's load from other users' on a shared machine, and the time the
/// hypervisor gave to other guests (steal).
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    process: f64,
    machine: [f64; 8],
    wall: std::time::Instant,
}

/// What a [`CpuMeter`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// This process: CPU seconds per second, in percent of one CPU.
    pub process_pct: f64,
    /// The whole machine's busy time, in percent of one CPU (at most
    /// `nproc() * 100`).
    pub machine_pct: f64,
    /// Everything else on the machine (`machine_pct - process_pct`, at least 0).
    pub others_pct: f64,
    /// The machine's CPU time stolen by the hypervisor (a virtual CPU
    /// ready to run but not running), in percent of all its CPU time.
    pub steal_pct: f64,
    /// Wall-clock seconds measured.
    pub seconds: f64,
}

impl CpuMeter {
    /// Starts measuring now.
    pub fn start() -> CpuMeter {
        CpuMeter { process: cpu_seconds(), machine: machine_cpu_fields(), wall: std::time::Instant::now() }
    }

    /// CPU use since [`CpuMeter::start`].
    pub fn read(&self) -> CpuUse {
        let seconds = self.wall.elapsed().as_secs_f64().max(1e-9);
        let process_pct = 100.0 * (cpu_seconds() - self.process) / seconds;
        let now = machine_cpu_fields();
        let spent: [f64; 8] = std::array::from_fn(|i| now[i] - self.machine[i]);
        let total: f64 = spent.iter().sum();
        let (machine_pct, steal_pct) = if total > 0.0 {
            // The machine's busy share of all CPUs, scaled to "percent of one CPU".
            let busy = total - spent[3] - spent[4];
            (100.0 * nproc() as f64 * busy / total, 100.0 * spent[7] / total)
        } else {
            (0.0, 0.0)
        };
        CpuUse { process_pct, machine_pct, others_pct: (machine_pct - process_pct).max(0.0), steal_pct, seconds }
    }
}

/// One thread of this process and the CPU time it has used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    /// The thread's id (its directory under `/proc/self/task`).
    pub tid: u32,
    /// Its name (`comm`, at most 15 bytes: what `std::thread::Builder::name`
    /// or tokio's `thread_name` set, cut short).
    pub name: String,
    /// CPU time (user + system) in nanoseconds.
    pub cpu_ns: u64,
    /// How many times the thread was put on a CPU (schedstat's third
    /// field): each wakeup after blocking counts one. Zero where the kernel
    /// has no schedstat.
    pub runs: u64,
}

/// Every thread of this process with its name and CPU time, from
/// `/proc/self/task/<tid>/comm` and `/proc/self/task/<tid>/schedstat` (first
/// field: nanoseconds on a CPU; third: timeslices run), or where the kernel has no schedstat,
/// `utime + stime` of `/proc/self/task/<tid>/stat` (clock ticks of 10 ms). A
/// thread that exits while it is read is left out.
pub fn thread_cpu_times() -> Vec<ThreadCpu> {
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let dir = entry.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?.trim_end_matches('\n').to_owned();
            let (cpu_ns, runs) = match std::fs::read_to_string(dir.join("schedstat")) {
                Ok(s) => {
                    let mut fields = s.split_whitespace();
                    let cpu_ns = fields.next()?.parse().ok()?;
                    (cpu_ns, fields.nth(1).and_then(|v| v.parse().ok()).unwrap_or(0))
                }
                Err(_) => {
                    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
                    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                    (((ticks(11) + ticks(12)) / USER_HZ * 1e9) as u64, 0)
                }
            };
            Some(ThreadCpu { tid, name, cpu_ns, runs })
        })
        .collect()
}

/// Measures the CPU time of each thread of this process over a window, to
/// tell apart the CPU of threads by their names (a load generator on its own
/// runtime from the server it loads, say).
///
/// A thread that starts in the window counts from zero. A thread that exits
/// in the window is left out, with its CPU time since the start
/// ([`ThreadCpuWindow::exited`] counts them): for tokio's blocking threads,
/// which exit after 10 s idle, that loses nothing in a shorter window.
#[derive(Debug, Clone)]
pub struct ThreadCpuMeter {
    start: std::collections::HashMap<u32, (u64, u64)>,
    wall: std::time::Instant,
}

/// What a [`ThreadCpuMeter`] saw.
#[derive(Debug, Clone, Default)]
pub struct ThreadCpuWindow {
    /// Each thread alive at the end with the CPU time it used in the window.
    pub threads: Vec<ThreadCpu>,
    /// Threads alive at the start but not at the end.
    pub exited: usize,
    /// Wall-clock seconds measured.
    pub seconds: f64,
}

impl ThreadCpuMeter {
    /// Starts measuring now.
    pub fn start() -> ThreadCpuMeter {
        let start = thread_cpu_times().into_iter().map(|t| (t.tid, (t.cpu_ns, t.runs))).collect();
        ThreadCpuMeter { start, wall: std::time::Instant::now() }
    }

    /// The CPU time of every thread since [`ThreadCpuMeter::start`].
    pub fn read(&self) -> ThreadCpuWindow {
        let seconds = self.wall.elapsed().as_secs_f64();
        ThreadCpuWindow::between(&self.start, thread_cpu_times(), seconds)
    }
}

impl ThreadCpuWindow {
    /// The window from the CPU times at its start (by thread id) to the threads at its end.
    fn between(
        start: &std::collections::HashMap<u32, (u64, u64)>,
        end: Vec<ThreadCpu>,
        seconds: f64,
    ) -> ThreadCpuWindow {
        let exited = start.keys().filter(|tid| !end.iter().any(|t| t.tid == **tid)).count();
        let threads = end
            .into_iter()
            .map(|t| {
                let (cpu_ns, runs) = start.get(&t.tid).copied().unwrap_or((0, 0));
                ThreadCpu { cpu_ns: t.cpu_ns.saturating_sub(cpu_ns), runs: t.runs.saturating_sub(runs), ..t }
            })
            .collect();
        ThreadCpuWindow { threads, exited, seconds }
    }

    /// CPU nanoseconds of the threads whose name `select` accepts.
    pub fn cpu_ns(&self, select: impl Fn(&str) -> bool) -> u64 {
        self.threads.iter().filter(|t| select(&t.name)).map(|t| t.cpu_ns).sum()
    }

    /// CPU nanoseconds of all threads.
    pub fn total_ns(&self) -> u64 {
        self.cpu_ns(|_| true)
    }
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
        assert!(rss_mb() > 0.0 && peak_rss_mb() >= rss_mb());
        let meter = CpuMeter::start();
        // Work until the kernel has counted a tick (10 ms), whatever the
        // optimizer makes of the loop.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while cpu_seconds() == 0.0 && started.elapsed() < std::time::Duration::from_secs(5) {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        let used = meter.read();
        assert!(x != 1 && used.process_pct >= 0.0 && cpu_seconds() > 0.0);
        assert!((0.0..=100.0).contains(&used.steal_pct), "{used:?}");
        assert!(!clocksource().is_empty());
    }

    #[test]
    fn thread_cpu_by_name() {
        let meter = ThreadCpuMeter::start();
        let spin = || {
            let started = std::time::Instant::now();
            let mut x = 0u64;
            while started.elapsed() < std::time::Duration::from_millis(50) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            x
        };
        // A thread that starts in the window and is still alive at its end.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let (ready, spun) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(move || {
                spin();
                ready.send(()).unwrap();
                wait.recv().unwrap();
            })
            .unwrap();
        spun.recv().unwrap();
        let window = meter.read();
        done.send(()).unwrap();
        worker.join().unwrap();
        let spinner = window.cpu_ns(|name| name.starts_with("cpu-test-spin"));
        // At least a little of its 50 ms, even on a busy machine; at most the window.
        assert!(spinner >= 1_000_000 && spinner as f64 <= window.seconds * 1e9 + 2e7, "{window:?}");
        assert!(window.total_ns() >= spinner && window.seconds >= 0.05);
        assert!(thread_cpu_times().iter().any(|t| t.tid == std::process::id()));
    }

    #[test]
    fn thread_windows_count_new_threads_from_zero() {
        let start = [(1, (500, 7)), (2, (100, 1))].into_iter().collect();
        let end = vec![
            ThreadCpu { tid: 1, name: "a".into(), cpu_ns: 800, runs: 10 },
            ThreadCpu { tid: 3, name: "bench-client".into(), cpu_ns: 40, runs: 2 },
        ];
        let window = ThreadCpuWindow::between(&start, end, 1.0);
        assert_eq!(window.exited, 1);
        assert_eq!(window.total_ns(), 340);
        assert_eq!(window.threads.iter().map(|t| t.runs).sum::<u64>(), 5);
        assert_eq!(window.cpu_ns(|n| n.starts_with("bench-client")), 40);
    }
}
