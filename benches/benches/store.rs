//! Store benchmark: Orchestra's `RocksStore` side by side with etcd.
//!
//! `cargo bench -p orchestra-benches --bench store [-- --quick]`
//!
//! Starts a private single-member etcd (`/usr/bin/etcd`, default durable
//! settings) on loopback ports and opens a `RocksStore` with default options,
//! both in one scratch directory on disk (`$ORCHESTRA_BENCH_DIR`, default
//! `/var/tmp`), then measures, alternating the two stores point by point:
//!
//! * **put** — closed loop, C clients (1, 16, 64, 256), each putting
//!   `/registry/pods/default/p-<client>-<n mod 1000>` with a 256-byte value;
//! * **get** — the same shape with linearizable reads of keys written
//!   beforehand (C = 1, 16, 64);
//! * **watch** — 1000 watchers on one prefix, one rate-limited writer whose
//!   values carry their send time; the delivery latency of every event at
//!   every watcher, and a check that every watcher saw every event in order.
//!
//! Each point prints one line (`store put clients=...`); a header describes
//! the machine and a footer summarises. `--help` lists the knobs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use orchestra_benches::args::Args;
use orchestra_benches::etcd::{self, EtcdServer};
use orchestra_benches::harness;
use orchestra_benches::load::{LoopResult, closed_loop};
use orchestra_benches::stats::{fmt_ms, fmt_rate, geomean, median};
use orchestra_benches::sys;
use orchestra_benches::watch::{self, Tracker, WatchOutcome, finish_watchers};
use orchestra_store::{KeyRange, Op, RocksOptions, RocksStore, Store, StoreOptions, Txn, WatchRequest};

const USAGE: &str = "\
usage: cargo bench -p orchestra-benches --bench store [-- OPTIONS]

  --quick                  short run (< 1 minute): 1.5 s per point, 1 run, 600 watch events
  --phases put,get,watch   which phases to run
  --put-clients 1,16,64,256
  --get-clients 1,16,64
  --duration SECONDS       measured time per point (default 5, quick 1.5)
  --warmup SECONDS         unmeasured warm-up per point (default 0.5, quick 0.25)
  --runs N                 runs of each (orchestra, etcd) pair per point; medians are printed (default 2, quick 1)
  --etcd-clients-per-conn N  load clients sharing one etcd connection (default 256: one connection;
                           on a 2-CPU machine more connections only cost etcd CPU)
  --watchers N             watchers in the fan-out test (default 1000)
  --watch-events N         values the watch writer puts (default 2000, quick 600)
  --watch-rate N           writer puts per second (default 500)
  --etcd-watch-conns N     etcd connections carrying the watches (default 4)
  --etcd-watch-mode M      'streams': one gRPC watch stream per watcher (best etcd p99, default);
                           'mux': the watches of a connection multiplexed on one stream, as clientv3 does
  --etcd-watch-prev-kv B   etcd watches ask for previous values, as kube-apiserver's do (orchestra's
                           watches always carry them). Default false: etcd 3.4 reads every previous
                           value back from its backend per watcher and collapses with it
  --etcd-serializable-get  diagnostic: serializable (local, not linearizable) etcd gets
  --etcd PATH              etcd binary (default /usr/bin/etcd)
  --etcd-args=\"ARGS\"       extra etcd flags, e.g. --etcd-args=\"--enable-pprof\" (diagnosis only)

Data goes to a scratch directory under $ORCHESTRA_BENCH_DIR (default /var/tmp), never tmpfs.";

/// Prefix of the put/get keys, as kube-apiserver lays out pods.
const POD_PREFIX: &str = "/registry/pods/default/";
/// Prefix the watch test writes and watches (disjoint from the pods).
const WATCH_PREFIX: &str = "/registry/watchbench/";
/// Value size for every write.
const VALUE_LEN: usize = 256;
/// Keys per client (`n mod KEYS_PER_CLIENT`).
const KEYS_PER_CLIENT: u64 = 1000;
static VALUE: [u8; VALUE_LEN] = [b'v'; VALUE_LEN];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EtcdWatchMode {
    /// One gRPC watch stream per watcher.
    Streams,
    /// The watches of a connection multiplexed on one gRPC stream.
    Mux,
}

#[derive(Debug, Clone)]
struct Config {
    quick: bool,
    phases: Vec<String>,
    put_clients: Vec<usize>,
    get_clients: Vec<usize>,
    duration: Duration,
    warmup: Duration,
    runs: usize,
    etcd_clients_per_conn: usize,
    watchers: usize,
    watch_events: u64,
    watch_rate: f64,
    etcd_watch_conns: usize,
    etcd_watch_mode: EtcdWatchMode,
    etcd_watch_prev_kv: bool,
    etcd_serializable_get: bool,
    etcd_binary: PathBuf,
    etcd_args: Vec<String>,
}

impl Config {
    fn from_args(args: &Args) -> Result<Config, String> {
        let quick = args.flag("quick");
        let secs = |name: &str, default: f64| -> Result<Duration, String> {
            let v: f64 = args.get(name, default)?;
            Duration::try_from_secs_f64(v).map_err(|e| format!("--{name}: {e}"))
        };
        let mode = match args.get("etcd-watch-mode", "streams".to_string())?.as_str() {
            "streams" => EtcdWatchMode::Streams,
            "mux" => EtcdWatchMode::Mux,
            other => return Err(format!("--etcd-watch-mode {other:?}: expected streams or mux")),
        };
        let config = Config {
            quick,
            phases: args.list("phases", &["put".to_string(), "get".to_string(), "watch".to_string()])?,
            put_clients: args.list("put-clients", &[1, 16, 64, 256])?,
            get_clients: args.list("get-clients", &[1, 16, 64])?,
            duration: secs("duration", if quick { 1.5 } else { 5.0 })?,
            warmup: secs("warmup", if quick { 0.25 } else { 0.5 })?,
            runs: args.get("runs", if quick { 1 } else { 2 })?,
            etcd_clients_per_conn: args.get("etcd-clients-per-conn", 256)?,
            watchers: args.get("watchers", 1000)?,
            watch_events: args.get("watch-events", if quick { 600 } else { 2000 })?,
            watch_rate: args.get("watch-rate", 500.0)?,
            etcd_watch_conns: args.get("etcd-watch-conns", 4)?,
            etcd_watch_mode: mode,
            etcd_watch_prev_kv: args.get("etcd-watch-prev-kv", false)?,
            etcd_serializable_get: args.flag("etcd-serializable-get"),
            etcd_binary: args.get("etcd", PathBuf::from(etcd::DEFAULT_BINARY))?,
            etcd_args: args.get("etcd-args", String::new())?.split_whitespace().map(String::from).collect(),
        };
        args.finish()?;
        if let Some(p) = config.phases.iter().find(|p| !["put", "get", "watch"].contains(&p.as_str())) {
            return Err(format!("--phases: unknown phase {p:?}"));
        }
        if config.runs == 0
            || config.etcd_clients_per_conn == 0
            || config.etcd_watch_conns == 0
            || config.watch_rate <= 0.0
            || config.put_clients.contains(&0)
            || config.get_clients.contains(&0)
        {
            return Err("runs, client counts, connections and rates must be positive".into());
        }
        Ok(config)
    }

    fn runs(&self, phase: &str) -> bool {
        self.phases.iter().any(|p| p == phase)
    }
}

fn main() -> ExitCode {
    let config = match harness::parse_config(&["quick", "help", "etcd-serializable-get"], USAGE, Config::from_args) {
        Ok(config) => config,
        Err(code) => return code,
    };
    harness::run_in_scratch("store", async |scratch| run(&config, scratch).await)
}

/// What the footer summarises.
#[derive(Default)]
struct Summary {
    put_ratios: Vec<(usize, f64)>,
    get_ratios: Vec<(usize, f64)>,
    watch: Option<(Duration, Duration)>,
    watch_writers: Vec<String>,
    /// Worth knowing, not failures.
    notes: Vec<String>,
    /// Failures: errors, lost or reordered events. Make the run fail.
    problems: Vec<String>,
}

async fn run(config: &Config, scratch: &Path) -> Result<(), String> {
    let started = Instant::now();
    let etcd = EtcdServer::start(&config.etcd_binary, scratch, &config.etcd_args, Duration::from_secs(30)).await?;
    eprintln!("  etcd pid {} serving {}", etcd.pid(), etcd.endpoint());
    let etcd_version = etcd.version().await.map_err(|e| format!("etcd status: {e}"))?;
    let rocks_dir = scratch.join("orchestra");
    let store = RocksStore::open_with(RocksOptions::new(&rocks_dir).store_options(StoreOptions::default()))
        .await
        .map_err(|e| format!("cannot open RocksStore in {}: {e}", rocks_dir.display()))?;

    print_header(config, &etcd_version, scratch);
    let mut summary = Summary::default();
    let mut etcd = etcd;

    if config.runs("put") {
        for &clients in &config.put_clients {
            let (o, e) =
                compare(config, || put_orchestra(config, &store, clients), || put_etcd(config, &etcd, clients)).await?;
            print_point("put", clients, &o, &e, &mut summary.problems);
            summary.put_ratios.push((clients, o.throughput / e.throughput.max(1e-9)));
            check_etcd(&mut etcd)?;
        }
    }

    if config.runs("get") {
        let max_clients = config.get_clients.iter().copied().max().unwrap_or(1);
        preload(&store, &etcd, max_clients).await?;
        for &clients in &config.get_clients {
            let (o, e) =
                compare(config, || get_orchestra(config, &store, clients), || get_etcd(config, &etcd, clients)).await?;
            print_point("get", clients, &o, &e, &mut summary.problems);
            summary.get_ratios.push((clients, o.throughput / e.throughput.max(1e-9)));
            check_etcd(&mut etcd)?;
        }
    }

    if config.runs("watch") {
        let o = watch_orchestra(config, &store).await?;
        let e = watch_etcd(config, &etcd).await?;
        println!(
            "store watch watchers={} orchestra_p99={}ms etcd_p99={}ms orchestra_p50={}ms etcd_p50={}ms \
             delivered_orchestra={}/{} delivered_etcd={}/{}",
            config.watchers,
            fmt_ms(o.latencies.percentile(99.0)),
            fmt_ms(e.latencies.percentile(99.0)),
            fmt_ms(o.latencies.percentile(50.0)),
            fmt_ms(e.latencies.percentile(50.0)),
            o.delivered,
            o.expected,
            e.delivered,
            e.expected,
        );
        for (name, outcome) in [("orchestra", &o), ("etcd", &e)] {
            let rate = outcome.events as f64 / outcome.writer_time.as_secs_f64().max(1e-9);
            eprintln!(
                "  watch {name}: writer put {}/{} values at {rate:.0}/s (target {:.0}/s) in {:.2}s; \
                 delivery max {}ms, p99.9 {}ms",
                outcome.events,
                config.watch_events,
                config.watch_rate,
                outcome.writer_time.as_secs_f64(),
                fmt_ms(outcome.latencies.max()),
                fmt_ms(outcome.latencies.percentile(99.9)),
            );
            summary
                .watch_writers
                .push(format!("{name} {}/{} values at {rate:.0}/s", outcome.events, config.watch_events));
            if outcome.events < config.watch_events {
                summary.notes.push(format!(
                    "watch {name}: the writer could not keep {:.0} puts/s and stopped after {:.1}s",
                    config.watch_rate,
                    outcome.writer_time.as_secs_f64()
                ));
            } else if rate < 0.9 * config.watch_rate {
                summary.notes.push(format!(
                    "watch {name}: with the fan-out running its puts slowed the writer to {rate:.0}/s \
                     (asked {:.0}/s), so its delivery latencies were measured under a lighter load",
                    config.watch_rate
                ));
            }
            if outcome.anomalies > 0 || outcome.first_problem.is_some() {
                summary.problems.push(format!(
                    "watch {name}: {} out-of-order, duplicate or missing events{}",
                    outcome.anomalies,
                    outcome.first_problem.as_ref().map(|p| format!(" (first: {p})")).unwrap_or_default()
                ));
            } else if outcome.delivered < outcome.expected {
                summary.notes.push(format!(
                    "watch {name}: {} events not yet delivered {:.0}s after the last write (late, none out of order)",
                    outcome.expected - outcome.delivered,
                    watch::watch_grace(config.quick).as_secs_f64()
                ));
            }
        }
        summary.watch = Some((o.latencies.percentile(99.0), e.latencies.percentile(99.0)));
        check_etcd(&mut etcd)?;
    }

    let orchestra_bytes = sys::dir_size(&rocks_dir);
    let etcd_bytes = sys::dir_size(etcd.data_dir());
    drop(store);
    drop(etcd);
    print_footer(&summary, started.elapsed(), orchestra_bytes, etcd_bytes);
    if summary.problems.is_empty() { Ok(()) } else { Err(format!("{} problem(s), see above", summary.problems.len())) }
}

fn print_header(config: &Config, etcd_version: &str, scratch: &Path) {
    let mount = sys::mount_of(scratch);
    let mode = if config.quick { "quick" } else { "full" };
    println!(
        "# store benchmark ({mode}): orchestra RocksStore (in process) vs etcd {etcd_version} (1 member, loopback gRPC)"
    );
    println!(
        "# machine: nproc={} cpu=\"{}\" mem={:.1}GiB kernel={} loadavg(start)={}",
        sys::nproc(),
        sys::cpu_model(),
        sys::memory_gib(),
        sys::kernel(),
        sys::load_average()
    );
    println!(
        "# data: {} on {} ({} {}); both stores durable (RocksDB synced WAL, etcd fsync'd WAL)",
        scratch.display(),
        mount.as_ref().map_or("?".into(), |m| m.mount_point.display().to_string()),
        mount.as_ref().map_or("?", |m| m.fs_type.as_str()),
        mount.as_ref().map_or("?", |m| m.source.as_str()),
    );
    println!(
        "# load: closed loop, {VALUE_LEN}-byte values, keys {POD_PREFIX}p-<client>-<n mod {KEYS_PER_CLIENT}>, \
         {:.2}s per point after {:.2}s warm-up, {} run(s) per store per point (medians), \
         etcd: {} clients per connection",
        config.duration.as_secs_f64(),
        config.warmup.as_secs_f64(),
        config.runs,
        config.etcd_clients_per_conn
    );
    if config.runs("watch") {
        println!(
            "# watch: {} watchers on {WATCH_PREFIX}, 1 writer putting {} stamped {VALUE_LEN}-byte values at {:.0}/s \
             (gives up after {:.1}s); etcd: {} over {} connections, prev_kv={} (orchestra events always carry it)",
            config.watchers,
            config.watch_events,
            config.watch_rate,
            watch::writer_budget(config.watch_events, config.watch_rate).as_secs_f64(),
            match config.etcd_watch_mode {
                EtcdWatchMode::Streams => "one gRPC stream per watch",
                EtcdWatchMode::Mux => "watches multiplexed on one gRPC stream per connection",
            },
            config.etcd_watch_conns,
            config.etcd_watch_prev_kv,
        );
    }
}

fn print_footer(summary: &Summary, elapsed: Duration, orchestra_bytes: u64, etcd_bytes: u64) {
    let ratios = |points: &[(usize, f64)]| {
        let each: Vec<String> = points.iter().map(|(c, r)| format!("c{c}={r:.2}")).collect();
        let g = geomean(&points.iter().map(|(_, r)| *r).collect::<Vec<_>>());
        format!("{} geomean={g:.2}", each.join(" "))
    };
    if !summary.put_ratios.is_empty() {
        println!("# summary put ratio (orchestra/etcd throughput): {}", ratios(&summary.put_ratios));
    }
    if !summary.get_ratios.is_empty() {
        println!("# summary get ratio (orchestra/etcd throughput): {}", ratios(&summary.get_ratios));
    }
    if let Some((o, e)) = summary.watch {
        println!(
            "# summary watch p99 delivery: orchestra={}ms etcd={}ms (writers: {})",
            fmt_ms(o),
            fmt_ms(e),
            summary.watch_writers.join(", ")
        );
    }
    for note in &summary.notes {
        println!("# note: {note}");
    }
    println!(
        "# summary on disk at the end: orchestra={:.1}MiB etcd={:.1}MiB; total time {:.1}s; loadavg(end)={}; {}",
        orchestra_bytes as f64 / (1 << 20) as f64,
        etcd_bytes as f64 / (1 << 20) as f64,
        elapsed.as_secs_f64(),
        sys::load_average(),
        if summary.problems.is_empty() { "no errors".to_string() } else { summary.problems.join("; ") }
    );
}

fn check_etcd(etcd: &mut EtcdServer) -> Result<(), String> {
    if etcd.is_running() { Ok(()) } else { Err(format!("etcd died; log:\n{}", etcd.log_tail(30))) }
}

/// One point's figures for one store (medians over the runs).
struct Point {
    throughput: f64,
    p50: Duration,
    p99: Duration,
    errors: u64,
    first_error: Option<String>,
}

/// Runs the orchestra and the etcd variant of a point `config.runs` times,
/// alternating, and takes the medians.
async fn compare<FO, FutO, FE, FutE>(config: &Config, orchestra: FO, etcd: FE) -> Result<(Point, Point), String>
where
    FO: Fn() -> FutO,
    FutO: Future<Output = LoopResult>,
    FE: Fn() -> FutE,
    FutE: Future<Output = Result<LoopResult, String>>,
{
    let (mut o, mut e) = (Vec::new(), Vec::new());
    for _ in 0..config.runs {
        o.push(orchestra().await);
        e.push(etcd().await?);
    }
    Ok((point(&o), point(&e)))
}

fn point(results: &[LoopResult]) -> Point {
    let pick = |f: &dyn Fn(&LoopResult) -> f64| median(&results.iter().map(f).collect::<Vec<_>>());
    Point {
        throughput: pick(&|r| r.throughput()),
        p50: Duration::from_secs_f64(pick(&|r| r.latencies.percentile(50.0).as_secs_f64())),
        p99: Duration::from_secs_f64(pick(&|r| r.latencies.percentile(99.0).as_secs_f64())),
        errors: results.iter().map(|r| r.errors).sum(),
        first_error: results.iter().find_map(|r| r.first_error.clone()),
    }
}

fn print_point(op: &str, clients: usize, o: &Point, e: &Point, problems: &mut Vec<String>) {
    println!(
        "store {op} clients={clients} orchestra={}/s etcd={}/s ratio={:.2} orchestra_p99={}ms etcd_p99={}ms",
        fmt_rate(o.throughput),
        fmt_rate(e.throughput),
        o.throughput / e.throughput.max(1e-9),
        fmt_ms(o.p99),
        fmt_ms(e.p99),
    );
    eprintln!("  {op} c={clients}: p50 orchestra={}ms etcd={}ms", fmt_ms(o.p50), fmt_ms(e.p50));
    for (name, p) in [("orchestra", o), ("etcd", e)] {
        if p.errors > 0 {
            let problem = format!(
                "{op} clients={clients} {name}: {} failed operations (first: {})",
                p.errors,
                p.first_error.as_deref().unwrap_or("?")
            );
            eprintln!("warning: {problem}");
            problems.push(problem);
        }
    }
}

fn pod_key(client: usize, n: u64) -> String {
    format!("{POD_PREFIX}p-{client}-{}", n % KEYS_PER_CLIENT)
}

/// Connections for `clients` load clients: one per `etcd_clients_per_conn`.
async fn etcd_pool(config: &Config, etcd: &EtcdServer, clients: usize) -> Result<Vec<etcd_client::KvClient>, String> {
    let connections = clients.div_ceil(config.etcd_clients_per_conn);
    let pool = etcd.connect_pool(connections).await.map_err(|e| format!("etcd connect: {e}"))?;
    Ok((0..clients).map(|c| pool[c % pool.len()].kv_client()).collect())
}

async fn put_orchestra(config: &Config, store: &RocksStore, clients: usize) -> LoopResult {
    let value = Bytes::from_static(&VALUE);
    closed_loop(vec![store.clone(); clients], config.warmup, config.duration, move |store, client, n| {
        let value = value.clone();
        async move {
            let result = store.put(&pod_key(client, n), value, None).await.map(drop);
            (store, result)
        }
    })
    .await
}

async fn put_etcd(config: &Config, etcd: &EtcdServer, clients: usize) -> Result<LoopResult, String> {
    let kvs = etcd_pool(config, etcd, clients).await?;
    Ok(closed_loop(kvs, config.warmup, config.duration, |mut kv, client, n| async move {
        let result = kv.put(pod_key(client, n), VALUE.to_vec(), None).await.map(drop);
        (kv, result)
    })
    .await)
}

/// Writes every key the get phase reads, to both stores, in transactions of
/// 100 puts.
async fn preload(store: &RocksStore, etcd: &EtcdServer, clients: usize) -> Result<(), String> {
    const BATCH: u64 = 100;
    let started = Instant::now();
    let batches: Vec<(usize, u64)> =
        (0..clients).flat_map(|c| (0..KEYS_PER_CLIENT).step_by(BATCH as usize).map(move |n| (c, n))).collect();
    let orchestra = futures::stream::iter(batches.clone())
        .map(|(c, n0)| {
            let store = store.clone();
            async move {
                let ops: Vec<Op> = (n0..(n0 + BATCH).min(KEYS_PER_CLIENT))
                    .map(|n| Op::Put { key: pod_key(c, n), value: Bytes::from_static(&VALUE), ttl: None })
                    .collect();
                store.txn(Txn::new().and_then(ops)).await.map(drop)
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    if let Some(Err(e)) = orchestra.into_iter().find(Result::is_err) {
        return Err(format!("orchestra preload: {e}"));
    }
    let pool = etcd.connect_pool(4).await.map_err(|e| format!("etcd connect: {e}"))?;
    let etcd_results = futures::stream::iter(batches.into_iter().enumerate())
        .map(|(i, (c, n0))| {
            let mut kv = pool[i % pool.len()].kv_client();
            async move {
                let ops: Vec<etcd_client::TxnOp> = (n0..(n0 + BATCH).min(KEYS_PER_CLIENT))
                    .map(|n| etcd_client::TxnOp::put(pod_key(c, n), VALUE.to_vec(), None))
                    .collect();
                kv.txn(etcd_client::Txn::new().and_then(ops)).await.map(drop)
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    if let Some(Err(e)) = etcd_results.into_iter().find(Result::is_err) {
        return Err(format!("etcd preload: {e}"));
    }
    eprintln!(
        "  preloaded {} keys into each store in {:.2}s",
        clients as u64 * KEYS_PER_CLIENT,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn get_orchestra(config: &Config, store: &RocksStore, clients: usize) -> LoopResult {
    closed_loop(vec![store.clone(); clients], config.warmup, config.duration, |store, client, n| async move {
        let key = pod_key(client, n);
        let result = match store.get(&key).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!("{key} is missing")),
            Err(e) => Err(e.to_string()),
        };
        (store, result)
    })
    .await
}

async fn get_etcd(config: &Config, etcd: &EtcdServer, clients: usize) -> Result<LoopResult, String> {
    let kvs = etcd_pool(config, etcd, clients).await?;
    let serializable = config.etcd_serializable_get;
    Ok(closed_loop(kvs, config.warmup, config.duration, move |mut kv, client, n| async move {
        let key = pod_key(client, n);
        let options = serializable.then(|| etcd_client::GetOptions::new().with_serializable());
        let result = match kv.get(key.as_str(), options).await {
            Ok(r) if !r.kvs().is_empty() => Ok(()),
            Ok(_) => Err(format!("{key} is missing")),
            Err(e) => Err(e.to_string()),
        };
        (kv, result)
    })
    .await)
}

// ---------------------------------------------------------------------------
// Watch fan-out
// ---------------------------------------------------------------------------

/// A watch-test value: sequence number and send time (nanoseconds since the
/// test's base instant), padded to `VALUE_LEN`.
fn stamped_value(seq: u64, sent_ns: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE_LEN);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&sent_ns.to_le_bytes());
    v.resize(VALUE_LEN, b'w');
    v
}

fn read_stamp(value: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(value.get(0..8)?.try_into().ok()?);
    let sent = u64::from_le_bytes(value.get(8..16)?.try_into().ok()?);
    Some((seq, sent))
}

fn watch_key(seq: u64) -> String {
    format!("{WATCH_PREFIX}obj-{}", seq % 100)
}

async fn watch_orchestra(config: &Config, store: &RocksStore) -> Result<WatchOutcome, String> {
    let base = Instant::now();
    let start = store.status().await.map_err(|e| e.to_string())?.revision + 1;
    let (control, controlled) = watch::control_channel(config.watch_events);
    let mut tasks = Vec::with_capacity(config.watchers);
    for _ in 0..config.watchers {
        let request = WatchRequest::new(KeyRange::prefix(WATCH_PREFIX)).from_revision(start);
        let stream = store.watch(request).await.map_err(|e| format!("orchestra watch: {e}"))?;
        let tracker = Tracker::new(base, config.watch_events);
        let follow = watch::follow(tracker, controlled.clone(), stream, |tracker, response| {
            let now = tracker.now_ns();
            for event in &response.events {
                tracker.record(read_stamp(&event.kv.value), now);
            }
            true
        });
        tasks.push(tokio::spawn(async move { [follow.await] }));
    }
    let (written, writer_time) = watch::run_writer(config.watch_events, config.watch_rate, base, |seq, sent| {
        let store = store.clone();
        let (key, value) = (watch_key(seq), stamped_value(seq, sent));
        async move { store.put(&key, Bytes::from(value), None).await.map(drop) }
    })
    .await?;
    let trackers = finish_watchers(tasks, control, written, watch::watch_grace(config.quick)).await;
    Ok(WatchOutcome::collect(trackers, written, writer_time))
}

async fn watch_etcd(config: &Config, etcd: &EtcdServer) -> Result<WatchOutcome, String> {
    let base = Instant::now();
    let pool = etcd.connect_pool(config.etcd_watch_conns).await.map_err(|e| format!("etcd connect: {e}"))?;
    // The writer has a connection of its own, so watch traffic cannot delay its puts.
    let mut kv = etcd.connect().await.map_err(|e| format!("etcd connect: {e}"))?.kv_client();
    let head = kv.get(WATCH_PREFIX, None).await.map_err(|e| format!("etcd get: {e}"))?;
    let start = head.header().map_or(0, |h| h.revision()) + 1;
    let options = || {
        let options = etcd_client::WatchOptions::new().with_prefix().with_start_revision(start);
        if config.etcd_watch_prev_kv { options.with_prev_key() } else { options }
    };
    let (control, controlled) = watch::control_channel(config.watch_events);
    let mut tasks = Vec::new();
    let created = Arc::new(tokio::sync::Semaphore::new(0));
    match config.etcd_watch_mode {
        EtcdWatchMode::Streams => {
            for w in 0..config.watchers {
                let mut client = pool[w % pool.len()].watch_client();
                let stream =
                    client.watch(WATCH_PREFIX, Some(options())).await.map_err(|e| format!("etcd watch: {e}"))?;
                let tracker = Tracker::new(base, config.watch_events);
                let (control, created) = (controlled.clone(), created.clone());
                tasks.push(tokio::spawn(async move {
                    // Keep the client (and the request side of the stream) alive.
                    let _client = client;
                    let tracker = watch::follow(tracker, control, stream, |tracker, response| {
                        if response.created() {
                            created.add_permits(1);
                        }
                        let now = tracker.now_ns();
                        for event in response.events() {
                            if let Some(kv) = event.kv() {
                                tracker.record(read_stamp(kv.value()), now);
                            }
                        }
                        if response.canceled() {
                            tracker.fail(format!("watch canceled: {}", response.cancel_reason()));
                        }
                        !response.canceled()
                    });
                    vec![tracker.await]
                }));
            }
        }
        EtcdWatchMode::Mux => {
            for (k, connection) in pool.iter().enumerate() {
                let count = (k..config.watchers).step_by(pool.len()).count();
                if count == 0 {
                    continue;
                }
                let mut client = connection.watch_client();
                let mut stream =
                    client.watch(WATCH_PREFIX, Some(options())).await.map_err(|e| format!("etcd watch: {e}"))?;
                for _ in 1..count {
                    stream.watch(WATCH_PREFIX, Some(options())).await.map_err(|e| format!("etcd watch: {e}"))?;
                }
                let mut trackers: std::collections::HashMap<i64, Tracker> = std::collections::HashMap::new();
                let (base, mut total) = (base, config.watch_events);
                let mut control = controlled.clone();
                let created = created.clone();
                tasks.push(tokio::spawn(async move {
                    let _client = client;
                    let mut problem = None;
                    loop {
                        if trackers.len() == count && trackers.values().all(Tracker::done) {
                            break;
                        }
                        tokio::select! {
                            item = stream.message() => match item {
                                Ok(Some(response)) => {
                                    if response.created() {
                                        created.add_permits(1);
                                    }
                                    let tracker = trackers
                                        .entry(response.watch_id())
                                        .or_insert_with(|| Tracker::new(base, total));
                                    let now = tracker.now_ns();
                                    for event in response.events() {
                                        if let Some(kv) = event.kv() {
                                            tracker.record(read_stamp(kv.value()), now);
                                        }
                                    }
                                    if response.canceled() {
                                        problem = Some(format!("watch canceled: {}", response.cancel_reason()));
                                        break;
                                    }
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    problem = Some(format!("watch failed: {e}"));
                                    break;
                                }
                            },
                            Ok(()) = control.changed() => {
                                let c = *control.borrow_and_update();
                                total = total.min(c.target);
                                trackers.values_mut().for_each(|t| t.limit(total));
                                if c.stop {
                                    break;
                                }
                            }
                        }
                    }
                    let mut trackers: Vec<Tracker> = trackers.into_values().collect();
                    // Watches that never reported count as delivering nothing.
                    trackers.resize_with(count.max(trackers.len()), || Tracker::new(base, total));
                    if let (Some(p), Some(t)) = (problem, trackers.first_mut()) {
                        t.fail(p);
                    }
                    trackers
                }));
            }
        }
    }
    // Every watch must be registered before the first write; the start
    // revision makes this a formality, but it keeps the timing honest.
    let all_created = created.acquire_many(config.watchers as u32);
    match tokio::time::timeout(Duration::from_secs(30), all_created).await {
        Ok(Ok(permits)) => permits.forget(),
        _ => return Err("etcd watches were not all created within 30s".into()),
    }
    let (written, writer_time) = watch::run_writer(config.watch_events, config.watch_rate, base, |seq, sent| {
        let mut kv = kv.clone();
        let (key, value) = (watch_key(seq), stamped_value(seq, sent));
        async move { kv.put(key, value, None).await.map(drop) }
    })
    .await?;
    let trackers = finish_watchers(tasks, control, written, watch::watch_grace(config.quick)).await;
    drop(pool);
    Ok(WatchOutcome::collect(trackers, written, writer_time))
}
