//! # orchestra-benches
//!
//! Shared helpers for Orchestra's benchmarks, which measure Orchestra's
//! components side by side with the systems they replace (see
//! `/work/shared/BENCHMARKS.md`). The benchmarks themselves are the targets
//! under `benches/benches/`; this library holds what they have in common:
//!
//! * [`etcd`] — starts a private single-member etcd on loopback ports in a
//!   temporary data directory and stops it again (also on panic).
//! * [`load`] — a closed-loop load driver: C concurrent clients, each issuing
//!   one operation after the other for a fixed time, every latency recorded.
//! * [`stats`] — latency percentiles and medians.
//! * [`sys`] — machine facts for report headers, this process's RSS and CPU
//!   time (in all, per thread, and the whole machine's, to tell other users'
//!   load apart), and a scratch directory on a real disk (not tmpfs), so
//!   durable writes are measured as durable.
//! * [`args`] — the tiny command-line parser the benchmarks share.
//! * [`harness`] — what every benchmark's `main` does: parse arguments, run
//!   in a scratch directory on a runtime, stop on Ctrl-C or SIGTERM.
//! * [`watch`] — watch fan-out measurement: the per-watcher [`watch::Tracker`]
//!   of stamped events, the writer, and ending stalled watchers.

/// The benchmarks allocate with mimalloc, as the `orchestra` binary does: a
/// control plane in one process allocates and frees small objects (decoded
/// API objects, JSON buffers) from many threads, where glibc's allocator
/// spends a third of the CPU and keeps freed memory fragmented.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod args;
pub mod etcd;
pub mod harness;
pub mod load;
pub mod stats;
pub mod sys;
pub mod watch;
