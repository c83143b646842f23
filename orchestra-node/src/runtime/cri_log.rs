//! The CRI container log format, one line per chunk of output:
//!
//! ```text
//! 2016-10-06T00:17:09.669794202Z stdout F log content
//! 2016-10-06T00:17:09.669794202Z stderr P a partial line, continued on the next
//! ```
//!
//! Runtimes write it; the agent parses it to serve `kubectl logs` (with
//! `timestamps`, `tailLines`, `sinceSeconds`). `F` marks the end of a line of
//! the container's output, `P` a chunk that the next entry continues (the
//! container wrote a line longer than the runtime's buffer, or exited without
//! a final newline).

use std::time::SystemTime;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Which output a log entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One parsed log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// When the runtime read the output.
    pub timestamp: SystemTime,
    /// stdout or stderr.
    pub stream: Stream,
    /// `false` for a `P` entry: the next entry continues this line.
    pub complete: bool,
    /// The output, without the trailing newline.
    pub content: Vec<u8>,
}

/// A line that is not in the CRI log format.
#[derive(Debug, thiserror::Error)]
#[error("malformed CRI log line: {0}")]
pub struct ParseError(&'static str);

/// Formats a timestamp as the CRI log format and `kubectl logs --timestamps`
/// do: RFC 3339 in UTC with nanoseconds.
pub fn format_timestamp(at: SystemTime) -> String {
    let at = OffsetDateTime::from(at);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.nanosecond()
    )
}

/// Appends one entry, newline-terminated, to `out`. `content` must not
/// contain a newline (split the output first).
pub fn write_entry(out: &mut Vec<u8>, timestamp: SystemTime, stream: Stream, complete: bool, content: &[u8]) {
    debug_assert!(!content.contains(&b'\n'), "one CRI log entry per line");
    out.extend_from_slice(format_timestamp(timestamp).as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.extend_from_slice(if complete { b" F " } else { b" P " });
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// Splits a chunk of a container's output into entries: one `F` entry per
/// newline-terminated line, and a `P` entry for a trailing unterminated part.
pub fn write_output(out: &mut Vec<u8>, timestamp: SystemTime, stream: Stream, chunk: &[u8]) {
    let mut rest = chunk;
    while !rest.is_empty() {
        match rest.iter().position(|&b| b == b'\n') {
            Some(end) => {
                write_entry(out, timestamp, stream, true, &rest[..end]);
                rest = &rest[end + 1..];
            }
            None => {
                write_entry(out, timestamp, stream, false, rest);
                rest = &[];
            }
        }
    }
}

/// Parses one line (with or without its trailing newline).
pub fn parse_entry(line: &[u8]) -> Result<LogEntry, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |&b| b == b' ');
    let timestamp = parts.next().ok_or(ParseError("no timestamp"))?;
    let timestamp = std::str::from_utf8(timestamp).map_err(|_| ParseError("timestamp is not UTF-8"))?;
    let timestamp = OffsetDateTime::parse(timestamp, &Rfc3339).map_err(|_| ParseError("timestamp is not RFC 3339"))?;
    let stream = match parts.next() {
        Some(b"stdout") => Stream::Stdout,
        Some(b"stderr") => Stream::Stderr,
        _ => return Err(ParseError("stream is neither stdout nor stderr")),
    };
    let complete = match parts.next() {
        Some(b"F") => true,
        Some(b"P") => false,
        _ => return Err(ParseError("tag is neither F nor P")),
    };
    let content = parts.next().unwrap_or_default().to_vec();
    Ok(LogEntry { timestamp: timestamp.into(), stream, complete, content })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn round_trip_keeps_everything() {
        let at = SystemTime::UNIX_EPOCH + Duration::new(1_475_713_029, 669_794_202);
        let mut out = Vec::new();
        write_output(&mut out, at, Stream::Stderr, b"one\ntwo words\npart");
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(
            text,
            "2016-10-06T00:17:09.669794202Z stderr F one\n\
             2016-10-06T00:17:09.669794202Z stderr F two words\n\
             2016-10-06T00:17:09.669794202Z stderr P part\n"
        );
        let entries: Vec<_> = text.lines().map(|l| parse_entry(l.as_bytes()).unwrap()).collect();
        assert_eq!(entries[1].content, b"two words");
        assert_eq!(entries[1].timestamp, at);
        assert!(entries[1].complete);
        assert!(!entries[2].complete);
        assert_eq!(entries[2].stream, Stream::Stderr);
    }

    #[test]
    fn empty_lines_survive() {
        let mut out = Vec::new();
        write_output(&mut out, SystemTime::UNIX_EPOCH, Stream::Stdout, b"\n\n");
        let entries: Vec<_> = out.split_inclusive(|&b| b == b'\n').map(|l| parse_entry(l).unwrap()).collect();
        assert_eq!(entries.len(), 2);
        assert!(entries.iter().all(|e| e.content.is_empty() && e.complete));
    }

    #[test]
    fn malformed_lines_are_refused() {
        for line in
            [&b""[..], b"yesterday stdout F x", b"2016-10-06T00:17:09Z stdin F x", b"2016-10-06T00:17:09Z stdout X x"]
        {
            assert!(parse_entry(line).is_err(), "{:?}", String::from_utf8_lossy(line));
        }
    }
}
