//! Minimal HTTP/1.1 over a plain or TLS stream: request parsing with size caps, and response
//! writing with `Content-Length` or chunked bodies.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use super::util::parse_query;

/// Largest request head (request line plus headers) accepted, like the real server's 1 MiB.
const MAX_HEAD: usize = 1 << 20;
/// Largest request body accepted (the real server caps requests at 3 MiB).
pub(crate) const MAX_BODY: usize = 3 << 20;

/// A connection's byte stream: plain TCP or TLS over TCP.
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS; boxed because the connection state is large.
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Stream {
    /// The underlying TCP socket.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// The DER of the client certificate the peer presented, if any.
    pub(crate) fn peer_cert(&self) -> Option<Vec<u8>> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(s) => s.conn.peer_certificates().and_then(|c| c.first()).map(|c| c.as_ref().to_vec()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A parsed request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Method, as sent.
    pub method: String,
    /// Path without query, not decoded.
    pub path: String,
    /// Query without `?`.
    pub raw_query: String,
    /// Decoded query pairs.
    pub query: Vec<(String, String)>,
    /// Headers with lowercased names.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunked if needed).
    pub body: Vec<u8>,
    /// Whether the client asked to close the connection after this request.
    pub close: bool,
    /// Answer in protobuf where the answer has a protobuf form: the client's `Accept` lists it
    /// first and the server is not JSON-only (set once the request is admitted).
    pub protobuf: bool,
}

impl Request {
    /// First value of a header (name must be lowercase).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// First value of a query parameter.
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// A boolean query parameter decoded leniently, like the real server: present and not
    /// `false`/`0` means true.
    pub(crate) fn flag(&self, key: &str) -> Option<bool> {
        self.param(key).map(|v| !(v.eq_ignore_ascii_case("false") || v == "0"))
    }
}

/// Why a request could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The client closed the connection (or went idle) between requests.
    Closed,
    /// A transport error.
    Io(io::Error),
    /// The request is malformed: answer with this status and message, then close.
    Bad(u16, String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn read_line_capped<R: BufRead>(r: &mut R, budget: &mut usize) -> Result<String, ReadError> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Err(if line.is_empty() {
                ReadError::Closed
            } else {
                ReadError::Io(io::ErrorKind::UnexpectedEof.into())
            });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if take > *budget {
            return Err(ReadError::Bad(431, "request header fields too large".into()));
        }
        *budget -= take;
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            while line.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
                line.pop();
            }
            return String::from_utf8(line).map_err(|_| ReadError::Bad(400, "request head is not valid utf-8".into()));
        }
    }
}

/// Reads one request. `Closed` means a clean end between requests.
pub(crate) fn read_request<R: BufRead + Write>(r: &mut R) -> Result<Request, ReadError> {
    let mut budget = MAX_HEAD;
    let mut line = read_line_capped(r, &mut budget)?;
    // Tolerate stray empty lines between requests (RFC 9112 §2.2).
    while line.is_empty() {
        line = read_line_capped(r, &mut budget)?;
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ReadError::Bad(400, "malformed request line".into()));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(ReadError::Bad(505, "http version not supported".into()));
    }
    let http10 = version == "HTTP/1.0";
    let mut headers = Vec::new();
    loop {
        let h = match read_line_capped(r, &mut budget) {
            Err(ReadError::Closed) => {
                return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            other => other?,
        };
        if h.is_empty() {
            break;
        }
        let Some((name, value)) = h.split_once(':') else {
            return Err(ReadError::Bad(400, "malformed header line".into()));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let (path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut req = Request {
        method: method.to_string(),
        query: parse_query(&raw_query),
        path,
        raw_query,
        headers,
        body: Vec::new(),
        close: false,
        protobuf: false,
    };
    let connection = req.header("connection").map(str::to_ascii_lowercase);
    req.close = match connection.as_deref() {
        Some(c) if c.contains("close") => true,
        Some(c) if c.contains("keep-alive") => false,
        _ => http10,
    };
    if req.header("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue")) {
        r.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        r.flush()?;
    }
    let chunked = req.header("transfer-encoding").is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    if chunked {
        req.body = read_chunked_body(r)?;
    } else if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| ReadError::Bad(400, "invalid content-length".into()))?;
        if len > MAX_BODY {
            return Err(ReadError::Bad(413, "request entity too large".into()));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        req.body = body;
    }
    Ok(req)
}

fn read_chunked_body<R: BufRead>(r: &mut R) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let mut budget = 4096;
        let line = match read_line_capped(r, &mut budget) {
            Err(ReadError::Closed) => {
                return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            other => other?,
        };
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| ReadError::Bad(400, "invalid chunk size".into()))?;
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let mut budget = 8192;
                if read_line_capped(r, &mut budget)?.is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(ReadError::Bad(413, "request entity too large".into()));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(ReadError::Bad(400, "malformed chunk".into()));
        }
    }
}

/// The reason phrase for a status code.
pub(crate) fn reason_phrase(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "Request Entity Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A complete (non-streaming) response.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// Status code.
    pub status: u16,
    /// Headers besides `Content-Length`/`Transfer-Encoding`/`Date`.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Send the body chunked instead of with `Content-Length`.
    pub chunked: bool,
    /// Close the connection after sending.
    pub close: bool,
}

impl Response {
    /// A response with a body and content type.
    pub(crate) fn new(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
            chunked: false,
            close: false,
        }
    }

    /// A JSON response.
    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Response {
        Response::new(status, "application/json", serde_json::to_vec(value).unwrap_or_default())
    }

    /// A plain-text response.
    pub(crate) fn text(status: u16, text: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", text.as_bytes().to_vec())
    }

    /// Adds a header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// Writes a status line and headers (plus `Date`).
pub(crate) fn write_head<W: Write>(w: &mut W, status: u16, headers: &[(String, String)]) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("Date: ");
    head.push_str(&http_date());
    head.push_str("\r\n\r\n");
    w.write_all(head.as_bytes())
}

/// Writes a whole response; `head_only` for HEAD requests.
pub(crate) fn write_response<W: Write>(w: &mut W, resp: &Response, head_only: bool) -> io::Result<()> {
    let mut headers = resp.headers.clone();
    if resp.close {
        headers.push(("Connection".into(), "close".into()));
    }
    if resp.chunked {
        headers.push(("Transfer-Encoding".into(), "chunked".into()));
        write_head(w, resp.status, &headers)?;
        if !head_only {
            for piece in resp.body.chunks(32 * 1024) {
                write_chunk(w, piece)?;
            }
            write_last_chunk(w)?;
        }
    } else {
        headers.push(("Content-Length".into(), resp.body.len().to_string()));
        write_head(w, resp.status, &headers)?;
        if !head_only {
            w.write_all(&resp.body)?;
        }
    }
    w.flush()
}

/// Writes one chunk (nothing for empty data, which would end the body).
pub(crate) fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut buf = Vec::with_capacity(data.len() + 12);
    buf.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    w.write_all(&buf)
}

/// Writes the terminating zero-length chunk.
pub(crate) fn write_last_chunk<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

/// The current time as an HTTP date.
fn http_date() -> String {
    let now = std::time::SystemTime::now();
    let secs = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let rfc = super::util::rfc3339(now);
    // rfc3339 gives YYYY-MM-DDTHH:MM:SSZ.
    let (y, m, d) = (&rfc[0..4], &rfc[5..7], &rfc[8..10]);
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        [m.parse::<usize>().unwrap_or(1).clamp(1, 12) - 1];
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][((secs / 86_400) % 7) as usize];
    format!("{weekday}, {d} {month} {y} {} GMT", &rfc[11..19])
}

/// A connection: buffered reads, unbuffered writes, over one stream.
pub(crate) struct Conn {
    reader: BufReader<Stream>,
}

impl Conn {
    /// Wraps a stream.
    pub(crate) fn new(stream: Stream) -> Conn {
        Conn { reader: BufReader::with_capacity(16 * 1024, stream) }
    }

    /// The stream.
    pub(crate) fn stream(&self) -> &Stream {
        self.reader.get_ref()
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader.read(buf)
    }
}

impl BufRead for Conn {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.reader.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.reader.consume(amt)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.reader.get_mut().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.reader.get_mut().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    struct Duplex(Cursor<Vec<u8>>, Vec<u8>);
    impl Read for Duplex {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.0.read(b)
        }
    }
    impl BufRead for Duplex {
        fn fill_buf(&mut self) -> io::Result<&[u8]> {
            self.0.fill_buf()
        }
        fn consume(&mut self, n: usize) {
            self.0.consume(n)
        }
    }
    impl Write for Duplex {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.1.write(b)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn chunked_request_bodies_are_decoded() {
        let raw = b"POST /x?a=1&b=%2C HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
        let mut d = Duplex(Cursor::new(raw.to_vec()), Vec::new());
        let req = read_request(&mut d).unwrap();
        assert_eq!(req.body, b"abcde");
        assert_eq!(req.param("b"), Some(","));
        assert!(matches!(read_request(&mut d), Err(ReadError::Closed)));
    }

    #[test]
    fn oversized_heads_are_refused() {
        let mut raw = b"GET / HTTP/1.1\r\nX: ".to_vec();
        raw.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        let mut d = Duplex(Cursor::new(raw), Vec::new());
        assert!(matches!(read_request(&mut d), Err(ReadError::Bad(431, _))));
    }
}
