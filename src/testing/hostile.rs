//! Hostile bodies for memory-bound tests: an endless watch line, an endless list and a gzip
//! bomb. Each is generated as it is written, so the fake itself holds only one block.

use std::io::{self, Write};

use super::http::{Conn, write_chunk, write_head, write_last_chunk};
use super::state::{Flow, ServerCore};

/// Filler written per chunk.
const BLOCK: usize = 64 * 1024;

fn chunked_head(conn: &mut Conn, extra: &[(&str, &str)]) -> io::Result<()> {
    let mut headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("Transfer-Encoding".to_string(), "chunked".to_string()),
    ];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    write_head(conn, 200, &headers)?;
    conn.flush()
}

/// Watch: 200, then one line that never ends, until the client leaves or shutdown.
pub(crate) fn endless_line(shared: &ServerCore, conn: &mut Conn) -> io::Result<Flow> {
    chunked_head(conn, &[])?;
    write_chunk(conn, br#"{"type":"ADDED","object":{"metadata":{"name":""#)?;
    let filler = vec![b'x'; BLOCK];
    while !shared.is_shutdown() {
        // A write error means the client left: the point of the exercise.
        write_chunk(conn, &filler)?;
    }
    Ok(Flow::Close)
}

/// List: 200, a list header, then the same small item over and over, until the client leaves
/// or shutdown.
pub(crate) fn endless_list(shared: &ServerCore, conn: &mut Conn, kind: &str, api_version: &str) -> io::Result<Flow> {
    chunked_head(conn, &[])?;
    let rv = shared.lock().store.revision;
    let head = format!(
        r#"{{"kind":"{kind}List","apiVersion":"{api_version}","metadata":{{"resourceVersion":"{rv}"}},"items":["#
    );
    write_chunk(conn, head.as_bytes())?;
    let item = format!(
        r#"{{"metadata":{{"name":"endless","namespace":"default","uid":"endless","resourceVersion":"{rv}"}}}}"#
    );
    let mut block = Vec::with_capacity(BLOCK + item.len() + 1);
    block.extend_from_slice(item.as_bytes());
    while block.len() < BLOCK {
        block.push(b',');
        block.extend_from_slice(item.as_bytes());
    }
    block.push(b',');
    while !shared.is_shutdown() {
        write_chunk(conn, &block)?;
    }
    Ok(Flow::Close)
}

/// List: 200 with `Content-Encoding: gzip` (whether or not the client offered it); the body
/// inflates to `bytes`: a list header, then one item whose name never ends. Compressed about
/// 1000:1; compression stops as soon as the client leaves.
pub(crate) fn gzip_bomb(shared: &ServerCore, conn: &mut Conn, kind: &str, bytes: u64) -> io::Result<Flow> {
    chunked_head(conn, &[("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")])?;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let head = format!(r#"{{"kind":"{kind}List","apiVersion":"v1","metadata":{{}},"items":[{{"metadata":{{"name":""#);
    enc.write_all(head.as_bytes())?;
    let filler = vec![b'a'; BLOCK];
    let mut left = bytes.saturating_sub(head.len() as u64);
    while left > 0 && !shared.is_shutdown() {
        let n = usize::try_from(left).unwrap_or(BLOCK).min(BLOCK);
        enc.write_all(&filler[..n])?;
        left -= n as u64;
        let out = std::mem::take(enc.get_mut());
        write_chunk(conn, &out)?;
    }
    let rest = enc.finish()?;
    write_chunk(conn, &rest)?;
    write_last_chunk(conn)?;
    Ok(Flow::KeepAlive)
}
