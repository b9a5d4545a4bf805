//! Protobuf watch streams: length-delimited frames (docs/protocol.md §12.3), read with a bounded,
//! reused buffer. The 4-byte big-endian length is the server's value: it is checked against the
//! limit before the frame is read, and the buffer grows only with the bytes that arrive, never
//! to a length announced alone.

use std::io::{self, BufRead};

/// The bytes of the length that starts every frame.
pub(crate) const FRAME_HEADER: usize = 4;

/// What reading one frame found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// `buf` holds one whole frame: its header, then the message (`buf[FRAME_HEADER..]`).
    Complete,
    /// The stream ended; `buf` holds what it had of a frame (nothing: a clean end).
    End,
    /// The header announces a frame of this many bytes, more than the limit.
    TooLong(u64),
}

/// Reads on into `buf` until it holds one whole frame. `buf` may hold the start of one already
/// (read before a read timeout): reading resumes there. On an error (a timeout, `WouldBlock`),
/// what was read stays in `buf` for the next call.
pub(crate) fn read_frame<R: BufRead + ?Sized>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<Frame> {
    loop {
        let need = match buf.first_chunk::<FRAME_HEADER>() {
            Some(header) => {
                let len = u64::from(u32::from_be_bytes(*header));
                // `max` fits a usize, so a length within it does too.
                match usize::try_from(len) {
                    Ok(n) if n <= max => {
                        let have = buf.len() - FRAME_HEADER;
                        if have == n {
                            return Ok(Frame::Complete);
                        }
                        n - have
                    }
                    _ => return Ok(Frame::TooLong(len)),
                }
            }
            None => FRAME_HEADER - buf.len(),
        };
        let available = match r.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Frame::End);
        }
        let n = need.min(available.len());
        buf.extend_from_slice(&available[..n]);
        r.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &[u8]) -> Vec<u8> {
        let mut out = u32::try_from(message.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn frames_are_read_one_by_one_and_an_empty_one_is_a_frame() {
        let mut data = frame(b"abc");
        data.extend(frame(b""));
        data.extend(frame(b"de"));
        let mut r = io::BufReader::with_capacity(2, &data[..]);
        let mut got = Vec::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match read_frame(&mut r, &mut buf, 10).unwrap() {
                Frame::Complete => got.push(buf[FRAME_HEADER..].to_vec()),
                Frame::End => break,
                Frame::TooLong(n) => panic!("{n}"),
            }
        }
        assert_eq!(got, [&b"abc"[..], b"", b"de"]);
    }

    #[test]
    fn an_announced_length_past_the_limit_is_refused_before_reading_it() {
        let mut data = u32::MAX.to_be_bytes().to_vec();
        data.extend_from_slice(b"xx");
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut &data[..], &mut buf, 1 << 20).unwrap(), Frame::TooLong(u64::from(u32::MAX)));
        assert_eq!(buf.len(), FRAME_HEADER);
        assert!(buf.capacity() < 1024, "nothing is allocated from the length");
    }

    #[test]
    fn a_truncated_frame_ends_with_its_start_kept() {
        let data = &frame(b"abcdef")[..7];
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut &data[..], &mut buf, 100).unwrap(), Frame::End);
        assert_eq!(&buf[FRAME_HEADER..], b"abc");
    }

    #[test]
    fn a_frame_resumes_after_a_read_timeout() {
        struct Pausing(std::collections::VecDeque<&'static [u8]>);
        impl io::Read for Pausing {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                match self.0.pop_front() {
                    None => Ok(0),
                    Some(b"") => Err(io::ErrorKind::TimedOut.into()),
                    Some(part) => {
                        out[..part.len()].copy_from_slice(part);
                        Ok(part.len())
                    }
                }
            }
        }
        let parts: Vec<&'static [u8]> = vec![b"\0\0", b"", b"\0\x05ab", b"", b"cde"];
        let mut r = io::BufReader::new(Pausing(parts.into()));
        let mut buf = Vec::new();
        assert!(read_frame(&mut r, &mut buf, 100).is_err());
        assert!(read_frame(&mut r, &mut buf, 100).is_err());
        assert_eq!(read_frame(&mut r, &mut buf, 100).unwrap(), Frame::Complete);
        assert_eq!(&buf[FRAME_HEADER..], b"abcde");
    }
}
