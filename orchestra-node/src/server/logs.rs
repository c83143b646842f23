//! Reading a container's CRI log file the way `kubectl logs` asks for it:
//! `tailLines`, `sinceSeconds`/`sinceTime`, `timestamps`, `limitBytes`, and
//! `follow` (keep streaming while the container runs).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::Stream;
use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use crate::runtime::cri_log::{self, LogEntry};

/// The query of `GET /containerLogs/...` (and of the API server's
/// `pods/<name>/log`), in upstream's parameter names.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LogOptions {
    /// Keep the stream open and send new lines as they are written.
    #[serde(default, deserialize_with = "flag")]
    pub follow: bool,
    /// The previous instance of the container (after a restart).
    #[serde(default, deserialize_with = "flag")]
    pub previous: bool,
    /// Prefix every line with its RFC 3339 timestamp.
    #[serde(default, deserialize_with = "flag")]
    pub timestamps: bool,
    /// Only the last N lines.
    #[serde(default, deserialize_with = "number")]
    pub tail_lines: Option<i64>,
    /// Only lines newer than this many seconds.
    #[serde(default, deserialize_with = "number")]
    pub since_seconds: Option<i64>,
    /// Only lines newer than this RFC 3339 time.
    pub since_time: Option<String>,
    /// Stop after this many bytes.
    #[serde(default, deserialize_with = "number")]
    pub limit_bytes: Option<i64>,
}

fn flag<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let text = String::deserialize(deserializer)?;
    match text.as_str() {
        "" | "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(serde::de::Error::custom(format!("invalid boolean {other:?}"))),
    }
}

fn number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map(Some).map_err(|_| serde::de::Error::custom(format!("invalid integer {text:?}")))
}

/// Why log options are refused: the message of the 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidLogOptions(String);

impl LogOptions {
    /// Checks the values as the API server does.
    pub fn validate(&self) -> Result<(), InvalidLogOptions> {
        if self.tail_lines.is_some_and(|n| n < 0) {
            return Err(InvalidLogOptions("tailLines: must be greater than or equal to 0".into()));
        }
        if self.since_seconds.is_some_and(|n| n < 1) {
            return Err(InvalidLogOptions("sinceSeconds: must be greater than 0".into()));
        }
        if self.limit_bytes.is_some_and(|n| n < 1) {
            return Err(InvalidLogOptions("limitBytes: must be greater than 0".into()));
        }
        if self.since_seconds.is_some() && self.since_time.is_some() {
            return Err(InvalidLogOptions("at most one of sinceTime or sinceSeconds may be specified".into()));
        }
        if let Some(since) = &self.since_time {
            time::OffsetDateTime::parse(since, &time::format_description::well_known::Rfc3339)
                .map_err(|_| InvalidLogOptions(format!("sinceTime: invalid RFC 3339 time {since:?}")))?;
        }
        Ok(())
    }

    fn since(&self) -> Option<SystemTime> {
        if let Some(seconds) = self.since_seconds {
            return SystemTime::now().checked_sub(Duration::from_secs(seconds.max(0) as u64));
        }
        let since = self.since_time.as_ref()?;
        time::OffsetDateTime::parse(since, &time::format_description::well_known::Rfc3339).ok().map(Into::into)
    }
}

/// Formats one entry as `kubectl logs` prints it: the content, a newline
/// after a complete line (a partial entry continues on the next), and the
/// timestamp in front when asked for — as the kubelet does.
fn render(entry: &LogEntry, timestamps: bool, out: &mut Vec<u8>) {
    if timestamps {
        out.extend_from_slice(cri_log::format_timestamp(entry.timestamp).as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(&entry.content);
    if entry.complete {
        out.push(b'\n');
    }
}

/// Whether the container is still writing to its log (for `follow`).
pub type StillRunning = Box<dyn FnMut() -> futures::future::BoxFuture<'static, bool> + Send>;

/// How often a followed log is polled for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Streams the log at `path` as `options` ask. With `follow`, new lines are
/// sent as they are written until `still_running` says the container has
/// stopped and the file is drained, or the receiver goes away.
pub fn stream(
    path: PathBuf,
    options: LogOptions,
    mut still_running: StillRunning,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send {
    async_stream(move |tx| async move {
        let since = options.since();
        let mut budget = options.limit_bytes.map(|n| n.max(0) as usize);
        let mut file = tokio::fs::File::open(&path).await?;
        let mut content = Vec::new();
        file.read_to_end(&mut content).await?;
        // Only whole lines now; a line being written is picked up later.
        let complete_len = content.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut offset = complete_len as u64;
        let lines: Vec<&[u8]> = content[..complete_len].split_inclusive(|&b| b == b'\n').collect();
        let skip = match options.tail_lines {
            Some(n) => lines.len().saturating_sub(n.max(0) as usize),
            None => 0,
        };
        let mut out = Vec::new();
        for line in &lines[skip..] {
            if let Ok(entry) = cri_log::parse_entry(line)
                && since.is_none_or(|since| entry.timestamp >= since)
            {
                render(&entry, options.timestamps, &mut out);
            }
        }
        if !send(&tx, &mut out, &mut budget).await {
            return Ok(());
        }
        if !options.follow {
            return Ok(());
        }
        let mut partial = Vec::new();
        loop {
            let running = still_running().await;
            file.seek(std::io::SeekFrom::Start(offset)).await?;
            let mut fresh = Vec::new();
            file.read_to_end(&mut fresh).await?;
            offset += fresh.len() as u64;
            partial.extend_from_slice(&fresh);
            let complete_len = partial.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            for line in partial[..complete_len].split_inclusive(|&b| b == b'\n') {
                if let Ok(entry) = cri_log::parse_entry(line) {
                    render(&entry, options.timestamps, &mut out);
                }
            }
            partial.drain(..complete_len);
            if !send(&tx, &mut out, &mut budget).await {
                return Ok(());
            }
            if !running && fresh.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    })
}

/// Sends what `out` holds, within the byte budget. `false` when the stream
/// must end (budget spent or receiver gone).
async fn send(
    tx: &tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    out: &mut Vec<u8>,
    budget: &mut Option<usize>,
) -> bool {
    if let Some(left) = budget {
        out.truncate(*left);
        *left -= out.len();
    }
    if !out.is_empty() && tx.send(Ok(Bytes::from(std::mem::take(out)))).await.is_err() {
        return false;
    }
    budget.is_none_or(|left| left > 0)
}

/// A stream fed by a task: the task ends when it returns or when the
/// receiver is dropped (its next send fails).
fn async_stream<F, Fut>(body: F) -> impl Stream<Item = std::io::Result<Bytes>> + Send
where
    F: FnOnce(tokio::sync::mpsc::Sender<std::io::Result<Bytes>>) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let errors = tx.clone();
    let task = body(tx);
    tokio::spawn(async move {
        if let Err(error) = task.await {
            let _ = errors.send(Err(error)).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::StreamExt as _;

    use super::*;
    use crate::runtime::cri_log::{Stream as Out, write_output};

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn not_running() -> StillRunning {
        Box::new(|| Box::pin(async { false }))
    }

    async fn read_all(path: PathBuf, options: LogOptions) -> String {
        let chunks: Vec<_> = stream(path, options, not_running()).collect().await;
        String::from_utf8(chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect()).unwrap()
    }

    fn sample() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut out = Vec::new();
        write_output(&mut out, at(1_700_000_000), Out::Stdout, b"one\ntwo\n");
        write_output(&mut out, at(1_700_000_001), Out::Stderr, b"thr");
        write_output(&mut out, at(1_700_000_002), Out::Stderr, b"ee\nfour\n");
        std::fs::write(&path, out).unwrap();
        (dir, path)
    }

    #[tokio::test]
    async fn options_shape_the_output() {
        let (_dir, path) = sample();
        assert_eq!(read_all(path.clone(), LogOptions::default()).await, "one\ntwo\nthree\nfour\n");
        let tail = LogOptions { tail_lines: Some(2), ..Default::default() };
        assert_eq!(read_all(path.clone(), tail).await, "ee\nfour\n", "tail counts log entries, as the kubelet does");
        let stamped = LogOptions { timestamps: true, tail_lines: Some(1), ..Default::default() };
        assert_eq!(read_all(path.clone(), stamped).await, "2023-11-14T22:13:22.000000000Z four\n");
        let since = LogOptions { since_time: Some("2023-11-14T22:13:21Z".into()), ..Default::default() };
        assert_eq!(read_all(path.clone(), since).await, "three\nfour\n");
        let limited = LogOptions { limit_bytes: Some(6), ..Default::default() };
        assert_eq!(read_all(path, limited).await, "one\ntw");
    }

    #[tokio::test]
    async fn follow_streams_until_the_container_stops() {
        let (_dir, path) = sample();
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let still_running: StillRunning = Box::new(move || {
            let flag = flag.clone();
            Box::pin(async move { flag.load(Ordering::SeqCst) })
        });
        let mut logs = Box::pin(stream(path.clone(), LogOptions { follow: true, ..Default::default() }, still_running));
        let mut out = Vec::new();
        write_output(&mut out, SystemTime::now(), Out::Stdout, b"five\n");
        use std::io::Write as _;
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&out).unwrap();
        let mut seen = Vec::new();
        while !seen.ends_with(b"five\n") {
            let chunk = tokio::time::timeout(Duration::from_secs(10), logs.next()).await.unwrap().unwrap().unwrap();
            seen.extend_from_slice(&chunk);
        }
        assert_eq!(seen, b"one\ntwo\nthree\nfour\nfive\n");
        running.store(false, Ordering::SeqCst);
        let end = tokio::time::timeout(Duration::from_secs(10), logs.next()).await.unwrap();
        assert!(end.is_none(), "the stream ends once the container stopped");
    }

    #[test]
    fn invalid_options_are_refused() {
        assert!(LogOptions { tail_lines: Some(-1), ..Default::default() }.validate().is_err());
        assert!(
            LogOptions {
                since_seconds: Some(1),
                since_time: Some("2023-11-14T22:13:21Z".into()),
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(LogOptions { since_time: Some("yesterday".into()), ..Default::default() }.validate().is_err());
        let parsed: LogOptions = serde_urlencoded_like("follow=true&tailLines=5&timestamps=false");
        assert_eq!(parsed, LogOptions { follow: true, tail_lines: Some(5), ..Default::default() });
    }

    fn serde_urlencoded_like(query: &str) -> LogOptions {
        axum::extract::Query::<LogOptions>::try_from_uri(&format!("/x?{query}").parse().unwrap()).unwrap().0
    }
}
