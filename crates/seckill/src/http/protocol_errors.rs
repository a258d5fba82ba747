//! The replies of the HTTP protocol layer in the service's error shape.
//!
//! hyper answers a request it cannot parse by itself, before any route or middleware
//! sees it: 400 for a malformed request line or header, 414 for an over-long URI, 431
//! for a request head over the limit. Those replies have an empty body, and hyper has
//! no hook to give them one. [`ProtocolErrors`] wraps the connection's socket and, on
//! the way out, turns exactly those replies (a 400, 413, 414 or 431 head with
//! `content-length: 0`: the service's own errors always carry a JSON body) into the
//! documented `{"code", "message"}` reply, and asks the client to close.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{ApiError, ErrorBody};

/// A connection's socket whose bodiless protocol error replies get the service's JSON
/// error body.
///
/// ```
/// use seckill::http::protocol_errors::rewrite;
///
/// let hyper_reply = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
/// let reply = String::from_utf8(rewrite(hyper_reply).expect("rewritten")).expect("text");
/// assert!(reply.starts_with("HTTP/1.1 431 "));
/// assert!(reply.ends_with(r#""code":"HEADERS_TOO_LARGE","message":"the request head is over 16 KiB"}"#));
/// ```
#[derive(Debug)]
pub struct ProtocolErrors<S> {
    inner: S,
    /// A rewritten reply still being written, how much of it is written, and the length
    /// of the original reply it stands for (what the writer is told was written).
    pending: Vec<u8>,
    written: usize,
    stands_for: usize,
}

impl<S> ProtocolErrors<S> {
    /// Wraps a connection's socket.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
            stands_for: 0,
        }
    }
}

/// The service's error for a status the protocol layer answers by itself.
fn protocol_error(status: &[u8]) -> Option<ApiError> {
    match status {
        b"400" => Some(ApiError::MalformedRequest),
        b"413" => Some(ApiError::PayloadTooLarge(super::extract::MAX_BODY_BYTES)),
        b"414" => Some(ApiError::UriTooLong),
        b"431" => Some(ApiError::HeadersTooLarge),
        _ => None,
    }
}

/// The reply `head` stands for with a JSON error body, if `head` is a whole bodiless
/// protocol error reply (400, 413, 414 or 431 with `content-length: 0`); `None` for
/// anything else, which passes unchanged.
pub fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    let error = protocol_error(rest.get(..3)?)?;
    // Exactly one head, no body after it.
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != head.len() {
        return None;
    }
    let text = std::str::from_utf8(&head[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let mut kept = Vec::new();
    let mut empty = false;
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("content-length") {
            empty = line.split(':').nth(1).map(str::trim) == Some("0");
        } else if !name.eq_ignore_ascii_case("connection") {
            kept.push(line);
        }
    }
    if !empty {
        return None;
    }
    let body = serde_json::to_string(&ErrorBody {
        code: error.code().to_owned(),
        message: error.to_string(),
    })
    .ok()?;
    let mut reply = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for line in kept {
        reply.push_str(line);
        reply.push_str("\r\n");
    }
    reply.push_str("\r\n");
    reply.push_str(&body);
    Some(reply.into_bytes())
}

impl<S: AsyncRead + Unpin> AsyncRead for ProtocolErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ProtocolErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_empty() {
            match rewrite(buf) {
                Some(reply) => {
                    this.pending = reply;
                    this.written = 0;
                    this.stands_for = buf.len();
                }
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        // The writer retries with the same bytes until told they are written: finish
        // the rewritten reply first, then report the original's length.
        while this.written < this.pending.len() {
            let n =
                ready!(Pin::new(&mut this.inner).poll_write(cx, &this.pending[this.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.written += n;
        }
        this.pending.clear();
        Poll::Ready(Ok(this.stands_for))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes each reply as one buffer, head and body together,
    // so a head alone really is a bodiless reply.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn only_bodiless_protocol_errors_are_rewritten() {
        let bad = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: d\r\n\r\n";
        let reply = String::from_utf8(rewrite(bad).expect("a 400")).expect("utf-8");
        let (head, body) = reply.split_once("\r\n\r\n").expect("a head");
        assert!(head.contains("\r\ndate: d"), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(json["code"], "MALFORMED_REQUEST");
        // With a body, another status, or a body after the head: untouched.
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(rewrite(with_body), None);
        assert_eq!(
            rewrite(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        assert_eq!(
            rewrite(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}"),
            None
        );
        assert!(rewrite(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n").is_some());
    }
}
