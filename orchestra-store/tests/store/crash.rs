//! Crash recovery: a child process with many concurrent writers is SIGKILLed
//! mid-stream, several times, at different points, while its tables are
//! flushed (so write-ahead log files are retired and reused). After every
//! restart each acknowledged write must be present and the revision must not
//! have gone backwards.
//!
//! The child is this same test binary, re-executed with
//! `ORCHESTRA_CRASH_CHILD` set; it prints one `ack` line per acknowledged
//! write on stdout, flushed before the next write starts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orchestra_store::{Error, KeyRange, RangeRequest, RocksOptions, RocksStore, Store, StoreOptions};

const CHILD_ENV: &str = "ORCHESTRA_CRASH_CHILD";
const ROUND_ENV: &str = "ORCHESTRA_CRASH_ROUND";
const WRITERS: usize = 32;

/// What the child acknowledged.
#[derive(Default)]
struct Acks {
    /// Unique key → (value, revision) of its create.
    created: BTreeMap<String, (String, i64)>,
    /// Per writer: the highest counter value acknowledged on its counter key.
    counters: BTreeMap<String, u64>,
    max_revision: i64,
}

impl Acks {
    fn record(&mut self, line: &str) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["ack", "create", key, value, rev] => {
                let rev: i64 = rev.parse().expect("revision");
                self.created.insert(key.to_string(), (value.to_string(), rev));
                self.max_revision = self.max_revision.max(rev);
            }
            ["ack", "counter", key, count, rev] => {
                let rev: i64 = rev.parse().expect("revision");
                let count: u64 = count.parse().expect("count");
                let entry = self.counters.entry(key.to_string()).or_default();
                *entry = (*entry).max(count);
                self.max_revision = self.max_revision.max(rev);
            }
            // A line cut short by the kill, or libtest's own output.
            _ => {}
        }
    }
}

fn options(dir: &std::path::Path) -> RocksOptions {
    RocksOptions::new(dir).store_options(StoreOptions::default().compaction(None))
}

/// The child: writers that create unique keys and bump a per-writer counter
/// with optimistic concurrency, forever, printing every acknowledgement.
fn child(dir: String, round: String) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let store = Arc::new(RocksStore::open_with(options(dir.as_ref())).await.expect("child opens the store"));
        // Frequent table flushes retire write-ahead log files, so later
        // commits go to recycled ones and the kills land in those too.
        let flusher = store.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                flusher.flush().await.expect("flush");
            }
        });
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let store = store.clone();
            let round = round.clone();
            tasks.push(tokio::spawn(async move {
                let counter_key = format!("/crash/counter/{writer}");
                let mut counter = match store.get(&counter_key).await.unwrap() {
                    Some(kv) => (String::from_utf8_lossy(&kv.value).parse::<u64>().unwrap(), kv.mod_revision),
                    None => (0, 0),
                };
                for n in 0u64.. {
                    let key = format!("/crash/keys/{round}/{writer}/{n}");
                    let value = format!("v{round}.{writer}.{n}");
                    let kv = store.create(&key, Bytes::from(value.clone()), None).await.expect("create");
                    println_flush(&format!("ack create {key} {value} {}", kv.mod_revision));
                    if n % 4 == 0 {
                        let next = counter.0 + 1;
                        let value = Bytes::from(next.to_string());
                        let kv = if counter.1 == 0 {
                            store.create(&counter_key, value, None).await
                        } else {
                            store.update(&counter_key, value, counter.1, None).await
                        }
                        .expect("only this writer updates its counter");
                        counter = (next, kv.mod_revision);
                        println_flush(&format!("ack counter {counter_key} {next} {}", kv.mod_revision));
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}

fn println_flush(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Runs the child until it acknowledged `acks_before_kill` writes (plus a
/// little jitter), SIGKILLs it and returns what it acknowledged.
fn run_and_kill(dir: &std::path::Path, round: usize, acks_before_kill: usize) -> Acks {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash::crash_recovery", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(ROUND_ENV, round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let reader = {
        let seen = seen.clone();
        // Reads until the pipe closes: lines written before the kill are
        // acknowledgements too.
        std::thread::spawn(move || {
            let mut acks = Acks::default();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                acks.record(&line);
                seen.fetch_add(1, Ordering::Relaxed);
            }
            acks
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.load(Ordering::Relaxed) < acks_before_kill {
        assert!(Instant::now() < deadline, "round {round}: the child is too slow");
        assert!(child.try_wait().unwrap().is_none(), "round {round}: the child exited on its own");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis((round as u64 * 7) % 13));
    child.kill().expect("SIGKILL the child");
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must have been killed, not exited");
    reader.join().expect("reader thread")
}

#[test]
fn crash_recovery() {
    if let (Ok(dir), Ok(round)) = (std::env::var(CHILD_ENV), std::env::var(ROUND_ENV)) {
        return child(dir, round);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut last_revision = 0;
    let mut all_created: BTreeMap<String, (String, i64)> = BTreeMap::new();
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    // Kill points: early (during the first group commits), and later.
    for (round, kill_after) in [50usize, 400, 1500, 4000, 9000].into_iter().enumerate() {
        let acks = run_and_kill(dir.path(), round, kill_after);
        assert!(!acks.created.is_empty(), "round {round}: the child acknowledged nothing");
        for (key, count) in &acks.counters {
            let entry = counters.entry(key.clone()).or_default();
            *entry = (*entry).max(*count);
        }
        all_created.extend(acks.created.clone());
        let max_acked = acks.max_revision;
        // A runtime per round: dropping it drops every task that could still
        // hold the database open when the next child starts.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let store = RocksStore::open_with(options(dir.path())).await.expect("reopen after the kill");
            let status = store.status().await.unwrap();
            assert!(
                status.revision >= max_acked,
                "round {round}: revision {} is behind the acknowledged {max_acked}",
                status.revision
            );
            assert!(status.revision >= last_revision, "round {round}: revision went backwards");
            eprintln!(
                "crash round {round}: killed after {} acknowledged creates (max acknowledged revision {max_acked}); \
                 recovered revision {}",
                acks.created.len(),
                status.revision
            );
            last_revision = status.revision;
            // Every acknowledged create, from this and every earlier round.
            let mut page = RangeRequest::new(KeyRange::prefix("/crash/keys/")).with_limit(5000);
            let mut found = BTreeMap::new();
            loop {
                let response = store.range(page.clone()).await.unwrap();
                for kv in &response.kvs {
                    found.insert(kv.key.clone(), (String::from_utf8(kv.value.to_vec()).unwrap(), kv.mod_revision));
                }
                match page.next_page(&response) {
                    Some(next) => page = next,
                    None => break,
                }
            }
            for (key, (value, rev)) in &all_created {
                assert_eq!(found.get(key), Some(&(value.clone(), *rev)), "round {round}: acknowledged {key} lost");
            }
            // Every acknowledged counter bump (the child may have written more).
            for (key, count) in &counters {
                let kv = store.get(key).await.unwrap().unwrap_or_else(|| panic!("{key} lost"));
                let stored: u64 = String::from_utf8_lossy(&kv.value).parse().unwrap();
                assert!(stored >= *count, "round {round}: {key} is {stored}, acknowledged {count}");
                assert_eq!(kv.version as u64, stored, "{key}: one version per bump");
            }
            // The store still takes writes at the next revision.
            let kv = store.put("/crash/after", Bytes::from_static(b"x"), None).await.unwrap();
            assert_eq!(kv.mod_revision, status.revision + 1);
            last_revision = kv.mod_revision;
            assert!(matches!(store.create("/crash/after", Bytes::new(), None).await, Err(Error::AlreadyExists { .. })));
        });
    }
}
