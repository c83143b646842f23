//! Copies a container's stdout and stderr into its log file, in the CRI
//! format, line by line.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::oneshot;

use crate::runtime::cri_log::{Stream, write_entry};

/// Longest line kept whole: a longer one is written as `P` entries.
pub(crate) const MAX_LINE: usize = 16 * 1024;

/// The line the start prelude writes to stderr just before it `exec`s the
/// container's program: what comes before it is the prelude's (error
/// output), what comes after is the container's.
pub(crate) const EXEC_MARKER: &[u8] = b"\x1eorchestra-exec\x1e";

/// The log file, shared by the stdout and stderr copiers.
pub(crate) type LogFile = Arc<Mutex<File>>;

/// Appends `chunk` as entries: one `F` per line, lines longer than
/// [`MAX_LINE`] cut into `P` pieces, a trailing unterminated part as `P`.
fn append(file: &LogFile, stream: Stream, chunk: &[u8]) {
    if chunk.is_empty() {
        return;
    }
    let now = SystemTime::now();
    let mut out = Vec::with_capacity(chunk.len() + 64);
    for line in chunk.split_inclusive(|&b| b == b'\n') {
        let (mut content, complete) = match line.strip_suffix(b"\n") {
            Some(content) => (content, true),
            None => (line, false),
        };
        while content.len() > MAX_LINE {
            write_entry(&mut out, now, stream, false, &content[..MAX_LINE]);
            content = &content[MAX_LINE..];
        }
        write_entry(&mut out, now, stream, complete, content);
    }
    if let Err(e) = file.lock().write_all(&out) {
        tracing::warn!(error = %e, "cannot write a container log");
    }
}

/// Copies `reader` into `file` until end of file. With `marker`, first
/// waits for [`EXEC_MARKER`]: sends `Ok` when it comes, or `Err(what came
/// before)` if the stream ends without it.
pub(crate) async fn copy(
    mut reader: impl AsyncRead + Unpin,
    stream: Stream,
    file: LogFile,
    mut marker: Option<oneshot::Sender<Result<(), String>>>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut prelude: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        if marker.is_some() {
            // Prelude lines until the marker.
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if &line[..line.len() - 1] == EXEC_MARKER {
                    let _ = marker.take().expect("marker pending").send(Ok(()));
                    break;
                }
                prelude.extend_from_slice(&line);
            }
            if marker.is_some() {
                continue;
            }
        }
        match pending.iter().rposition(|&b| b == b'\n') {
            Some(end) => {
                append(&file, stream, &pending[..=end]);
                pending.drain(..=end);
            }
            None if pending.len() >= MAX_LINE => {
                append(&file, stream, &pending);
                pending.clear();
            }
            None => {}
        }
    }
    if let Some(marker) = marker {
        prelude.extend_from_slice(&pending);
        let _ = marker.send(Err(String::from_utf8_lossy(&prelude).trim().to_owned()));
        return;
    }
    // Output without a final newline: a `P` entry.
    append(&file, stream, &pending);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri_log::parse_entry;

    async fn run(
        input: &[u8],
        with_marker: bool,
    ) -> (Vec<crate::runtime::cri_log::LogEntry>, Option<Result<(), String>>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = Arc::new(Mutex::new(File::create(&path).unwrap()));
        let (tx, rx) = oneshot::channel();
        copy(input, Stream::Stderr, file, with_marker.then_some(tx)).await;
        let text = std::fs::read(&path).unwrap();
        let entries = text.split_inclusive(|&b| b == b'\n').map(|l| parse_entry(l).unwrap()).collect();
        (entries, if with_marker { Some(rx.await.unwrap()) } else { None })
    }

    #[tokio::test]
    async fn lines_long_lines_and_unterminated_output() {
        let mut input = b"one\n\ntwo\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.extend_from_slice(b"\ntail");
        let (entries, _) = run(&input, false).await;
        let shown: Vec<(usize, bool)> = entries.iter().map(|e| (e.content.len(), e.complete)).collect();
        assert_eq!(entries[0].content, b"one");
        assert_eq!(entries[2].content, b"two");
        // The long line is split: a `P` chunk then the `F` rest (how reads
        // split it depends on the buffer size; the content is whole).
        let long: Vec<u8> = entries[3..entries.len() - 1].iter().flat_map(|e| e.content.clone()).collect();
        assert_eq!(long.len(), MAX_LINE + 10, "{shown:?}");
        assert!(!entries[3].complete && entries[entries.len() - 2].complete, "{shown:?}");
        let last = entries.last().unwrap();
        assert_eq!((last.content.as_slice(), last.complete), (&b"tail"[..], false));
    }

    #[tokio::test]
    async fn the_marker_separates_prelude_from_output() {
        let mut input = b"prelude noise\n".to_vec();
        input.extend_from_slice(EXEC_MARKER);
        input.extend_from_slice(b"\nreal\n");
        let (entries, marker) = run(&input, true).await;
        assert_eq!(marker, Some(Ok(())));
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].content, b"real");

        let (entries, marker) = run(b"orchestra: mount failed\n", true).await;
        assert!(entries.is_empty());
        assert_eq!(marker, Some(Err("orchestra: mount failed".to_owned())));
    }
}
