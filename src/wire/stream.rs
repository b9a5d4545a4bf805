//! An open watch response, read event by event with a bounded, reused buffer.

use std::io::{self, BufRead, BufReader, Read};

use ureq::BodyReader;

use crate::codec::decode::{self, Encoding, FRAME_HEADER, Frame, Line};
use crate::error::Error;

/// What reading a watch stream produced.
pub(crate) enum StreamItem<'a> {
    /// One complete event: a JSON line without its newline, or a protobuf frame's message
    /// without its length (docs/protocol.md §12.3); with its number in the stream.
    Line(&'a [u8], u64),
    /// The server ended the stream cleanly.
    End,
    /// No byte arrived within the idle time; reading may go on.
    Idle,
    /// The stream broke.
    Failed(Error),
}

/// An open watch response, read event by event with a bounded, reused buffer: JSON lines, or
/// length-delimited protobuf frames (each bounded by `Config::max_line` too).
///
/// Its read timeout is fixed when the request is made (ureq cannot change it on an open
/// response): a streaming list keeps the short end-marker wait for the life of the stream. So a
/// read timeout is never the end of a stream: [`next_line`](Self::next_line) answers `Idle`, the
/// line in progress is kept, and the worker's state machine, which knows which phase the stream
/// is in, decides whether the silence has lasted too long.
pub(crate) struct WatchStream {
    reader: BufReader<BodyReader<'static>>,
    buf: Vec<u8>,
    /// `buf` holds the start of a line that a read timeout interrupted (or that
    /// [`line_ready`](Self::line_ready) read as far as the bytes received went): read on into it.
    partial: bool,
    /// What [`line_ready`](Self::line_ready) found without waiting, for the next
    /// [`next_line`](Self::next_line) to return.
    ready: Option<Outcome>,
    line: u64,
    max_line: usize,
    context: String,
    /// JSON lines or protobuf frames, as the answer's `Content-Type` said.
    encoding: Encoding,
}

/// A [`StreamItem`] that does not borrow the line (which stays in `WatchStream::buf`).
enum Outcome {
    Line(u64),
    End,
    Idle,
    Failed(Error),
}

/// The bytes a `BufReader` already holds, readable without waiting for the network: reading
/// past them is `WouldBlock` (and `read_line` keeps what it read of the line).
struct Buffered<'a, R>(&'a mut BufReader<R>);

impl<R: Read> Read for Buffered<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(out.len());
            out[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for Buffered<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.0.buffer() {
            [] => Err(io::ErrorKind::WouldBlock.into()),
            available => Ok(available),
        }
    }

    fn consume(&mut self, n: usize) {
        self.0.consume(n);
    }
}

impl WatchStream {
    pub(super) fn new(
        reader: BufReader<BodyReader<'static>>,
        max_line: usize,
        context: String,
        encoding: Encoding,
    ) -> WatchStream {
        WatchStream {
            ready: None,
            reader,
            buf: Vec::with_capacity(16 * 1024),
            partial: false,
            line: 0,
            max_line,
            context,
            encoding,
        }
    }

    /// The encoding of the stream's events.
    pub(crate) fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The bytes around each event that [`StreamItem::Line`] leaves out: a newline, or a
    /// frame's length.
    pub(crate) fn overhead(&self) -> u64 {
        match self.encoding {
            Encoding::Json => 1,
            Encoding::Protobuf => FRAME_HEADER as u64,
        }
    }

    /// Reads on as far as the bytes already received go, without waiting for the network
    /// (skipping blank keep-alive lines); true when that completed an event line (or found the
    /// end), so that the next [`next_line`](Self::next_line) returns at once. False means the
    /// next `next_line` waits for the network: the worker hands over what it holds back first.
    pub(crate) fn line_ready(&mut self) -> bool {
        if self.ready.is_none() {
            self.ready = self.advance(false);
        }
        self.ready.is_some()
    }

    pub(crate) fn next_line(&mut self) -> StreamItem<'_> {
        let outcome = match self.ready.take() {
            Some(outcome) => outcome,
            // Cannot be `None`: only a read that must not wait stops short.
            None => self.advance(true).unwrap_or(Outcome::Idle),
        };
        match outcome {
            Outcome::Line(n) => match self.encoding {
                Encoding::Json => StreamItem::Line(&self.buf, n),
                Encoding::Protobuf => StreamItem::Line(&self.buf[FRAME_HEADER..], n),
            },
            Outcome::End => StreamItem::End,
            Outcome::Idle => StreamItem::Idle,
            Outcome::Failed(e) => StreamItem::Failed(e),
        }
    }

    /// Reads the next protobuf frame into `buf` (see [`advance`](Self::advance)).
    fn advance_frame(&mut self, wait: bool) -> Option<Outcome> {
        if !std::mem::take(&mut self.partial) {
            self.buf.clear();
        }
        let read = if wait {
            decode::read_frame(&mut self.reader, &mut self.buf, self.max_line)
        } else {
            decode::read_frame(&mut Buffered(&mut self.reader), &mut self.buf, self.max_line)
        };
        match read {
            Ok(Frame::Complete) => {
                self.line += 1;
                Some(Outcome::Line(self.line))
            }
            Ok(Frame::End) if self.buf.is_empty() => Some(Outcome::End),
            Ok(Frame::End) => Some(Outcome::Failed(Error::transport(
                self.context.as_str(),
                format!("stream ended inside frame {} after {} bytes", self.line + 1, self.buf.len()),
            ))),
            Ok(Frame::TooLong(len)) => Some(Outcome::Failed(Error::Decode(Box::new(decode::decode_error(
                &self.context,
                Some(self.line + 1),
                &self.buf,
                format!(
                    "protobuf frame announces {len} bytes, more than the {} byte limit (Config::max_line)",
                    self.max_line
                ),
            ))))),
            Err(e) => self.read_failed(e, wait),
        }
    }

    /// What a failed read means, for lines and frames alike: with `wait` off, no more bytes
    /// yet (`None`); the read timeout, `Idle`; anything else ends the stream. What was read of
    /// the line or frame is kept in `buf` for the next read.
    fn read_failed(&mut self, e: io::Error, wait: bool) -> Option<Outcome> {
        if !wait && e.kind() == io::ErrorKind::WouldBlock {
            self.partial = true;
            return None;
        }
        Some(match ureq::Error::from(e) {
            ureq::Error::Timeout(ureq::Timeout::PerRead) => {
                self.partial = true;
                Outcome::Idle
            }
            other => Outcome::Failed(ureq_error(&self.context, other)),
        })
    }

    /// Reads the next event line into `buf`. `wait`: whether it may wait for the network;
    /// without, `None` when the bytes received so far hold no complete line (what they hold of
    /// one is kept in `buf`).
    fn advance(&mut self, wait: bool) -> Option<Outcome> {
        if self.encoding == Encoding::Protobuf {
            return self.advance_frame(wait);
        }
        loop {
            if !std::mem::take(&mut self.partial) {
                self.buf.clear();
            }
            let read = if wait {
                decode::read_line(&mut self.reader, &mut self.buf, self.max_line)
            } else {
                decode::read_line(&mut Buffered(&mut self.reader), &mut self.buf, self.max_line)
            };
            match read {
                Ok(Line::Complete) => {
                    self.line += 1;
                    // Tolerate CRLF and blank keep-alive lines.
                    while self.buf.last() == Some(&b'\r') {
                        self.buf.pop();
                    }
                    if !self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Some(Outcome::Line(self.line));
                    }
                }
                Ok(Line::End) if self.buf.iter().all(u8::is_ascii_whitespace) => return Some(Outcome::End),
                Ok(Line::End) => {
                    return Some(Outcome::Failed(Error::transport(
                        self.context.as_str(),
                        format!(
                            "stream ended inside an event after {} bytes of line {}",
                            self.buf.len(),
                            self.line + 1
                        ),
                    )));
                }
                Ok(Line::TooLong) => {
                    return Some(Outcome::Failed(Error::Decode(Box::new(decode::decode_error(
                        &self.context,
                        Some(self.line + 1),
                        &self.buf,
                        format!("line longer than the {} byte limit", self.max_line),
                    )))));
                }
                Err(e) => return self.read_failed(e, wait),
            }
        }
    }
}

/// How a ureq error reads in an error message (one wording for the transport and the streams).
pub(super) fn ureq_message(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// A failed request or read, named by `context`.
pub(super) fn ureq_error(context: &str, e: ureq::Error) -> Error {
    Error::transport(context, ureq_message(&e))
}

// Through the transport (`http.rs`, which opens the streams), against the fake API server.
#[cfg(all(test, feature = "testing"))]
mod tests;
