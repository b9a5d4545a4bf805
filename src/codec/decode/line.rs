//! Splitting a watch stream into bounded lines.

use std::io::{self, BufRead};

/// What reading one bounded line produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line is in the buffer (without the `\n`).
    Complete,
    /// The stream ended cleanly; a partial last line, if any, is in the buffer.
    End,
    /// The line exceeded the limit; the buffer holds its first bytes.
    TooLong,
}

/// Reads up to and excluding the next `\n`, appending to `out`, which holds at most `max` bytes.
///
/// `out` is not cleared: the caller clears it once it has used a complete line. After an error
/// (a read timeout in the middle of a line) `out` keeps the bytes already read, and the next
/// call goes on with the same line.
pub(crate) fn read_line(r: &mut impl BufRead, out: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::End);
        }
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if out.len() + take > max {
            let room = max.saturating_sub(out.len()).min(take);
            out.extend_from_slice(&available[..room]);
            return Ok(Line::TooLong);
        }
        out.extend_from_slice(&available[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Complete);
        }
    }
}
