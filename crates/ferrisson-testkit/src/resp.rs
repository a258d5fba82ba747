//! The kit's own RESP2 client: one command over a fresh connection, one parsed reply.
//!
//! The kit reads the servers' state (cluster views, sentinel answers, replication) with
//! this instead of redis-rs, so what it reports does not depend on the client the tests
//! examine.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

/// How long the kit waits for a reply before it calls the server unresponsive.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Nesting deeper than this is no reply the kit asks for; it stops a hostile stream.
const MAX_DEPTH: usize = 8;

/// One RESP2 reply as a server sent it.
///
/// ```no_run
/// use ferrisson_testkit::{RedisServer, Reply};
///
/// let server = RedisServer::start()?;
/// assert_eq!(server.query(&["PING"])?, Reply::Status("PONG".into()));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+...`: a simple string such as `OK`.
    Status(String),
    /// `-...`: an error, with its code (`MOVED 3999 127.0.0.1:7002`).
    Error(String),
    /// `:...`: an integer.
    Integer(i64),
    /// `$...`: a bulk string.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`: no value.
    Nil,
    /// `*...`: an array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or a bulk string; `None` for other replies or non-UTF-8 bytes.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::Status(text) => Some(text),
            Self::Bulk(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The integer of an integer reply.
    pub fn integer(&self) -> Option<i64> {
        match self {
            Self::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The elements of an array reply.
    pub fn elements(&self) -> Option<&[Reply]> {
        match self {
            Self::Array(elements) => Some(elements),
            _ => None,
        }
    }

    /// This reply, or an error naming the command when it is an error reply.
    ///
    /// # Errors
    ///
    /// When the reply is [`Reply::Error`].
    pub fn ok_or_error(self, command: &str) -> io::Result<Self> {
        match self {
            Self::Error(message) => Err(io::Error::other(format!("{command}: {message}"))),
            reply => Ok(reply),
        }
    }

    /// The one-line form [`RedisServer::command`](crate::RedisServer::command) returns:
    /// a bulk string's text, `*N` for an array, the type byte and text otherwise.
    pub(crate) fn into_line(self) -> io::Result<String> {
        Ok(match self {
            Self::Status(text) => format!("+{text}"),
            Self::Error(text) => format!("-{text}"),
            Self::Integer(n) => format!(":{n}"),
            Self::Bulk(bytes) => String::from_utf8(bytes).map_err(io::Error::other)?,
            Self::Nil => "$-1".to_owned(),
            Self::Array(elements) => format!("*{}", elements.len()),
        })
    }
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The text of a status or bulk reply, or why there is none.
pub(crate) fn text_of(node: &crate::RedisServer, command: &[&str]) -> Result<String, String> {
    let port = node.port();
    let reply = node
        .query(command)
        .map_err(|e| format!("port {port}: {} failed: {e}", command.join(" ")))?;
    reply
        .text()
        .map(str::to_owned)
        .ok_or_else(|| format!("port {port}: {} answered {reply:?}", command.join(" ")))
}

/// Where the kit reaches a server, and as whom.
#[derive(Clone)]
pub(crate) struct Access {
    pub(crate) address: Address,
    /// `AUTH user password` before each command, for servers whose default user is off.
    pub(crate) auth: Option<(String, String)>,
}

/// A server's plain TCP port on 127.0.0.1, or its Unix socket (a server whose TCP port
/// speaks TLS only).
#[derive(Debug, Clone)]
pub(crate) enum Address {
    Tcp(u16),
    Unix(std::path::PathBuf),
}

/// Sends one command over a fresh connection as `access` says (authenticating first when
/// it has credentials) and reads its reply.
pub(crate) fn query_at<A: AsRef<[u8]>>(access: &Access, args: &[A]) -> io::Result<Reply> {
    match &access.address {
        Address::Tcp(port) => {
            let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, *port))?;
            stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
            stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
            exchange(stream, access.auth.as_ref(), args)
        }
        Address::Unix(path) => {
            let stream = std::os::unix::net::UnixStream::connect(path)?;
            stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
            stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
            exchange(stream, access.auth.as_ref(), args)
        }
    }
}

fn exchange<S: io::Read + Write, A: AsRef<[u8]>>(
    mut stream: S,
    auth: Option<&(String, String)>,
    args: &[A],
) -> io::Result<Reply> {
    let mut request = Vec::new();
    if let Some((user, password)) = auth {
        request.extend(encode(&["AUTH", user.as_str(), password.as_str()]));
    }
    request.extend(encode(args));
    stream.write_all(&request)?;
    let mut reader = BufReader::new(stream);
    if auth.is_some() {
        // The password is never part of the error: only the server's answer is.
        if let Reply::Error(e) = read_reply(&mut reader, 0)? {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("AUTH refused: {e}"),
            ));
        }
    }
    read_reply(&mut reader, 0)
}

fn encode<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut header = String::new();
    let _ = write!(header, "*{}\r\n", args.len());
    let mut request = header.into_bytes();
    for arg in args {
        let arg = arg.as_ref();
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
    request
}

fn read_reply(reader: &mut impl BufRead, depth: usize) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection before replying",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(malformed)?;
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => rest.parse().map(Reply::Integer).map_err(|_| malformed()),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| malformed())?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Nil);
            };
            let mut payload = vec![0; len + 2];
            reader.read_exact(&mut payload)?;
            payload.truncate(len);
            Ok(Reply::Bulk(payload))
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| malformed())?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Nil);
            };
            if depth >= MAX_DEPTH {
                return Err(malformed());
            }
            (0..len)
                .map(|_| read_reply(reader, depth + 1))
                .collect::<io::Result<_>>()
                .map(Reply::Array)
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut io::Cursor::new(bytes), 0)
    }

    #[test]
    fn nested_arrays_bulk_strings_and_nils_are_read_whole() {
        let reply = parse(b"*3\r\n$2\r\nab\r\n*2\r\n:7\r\n$-1\r\n+OK\r\n").expect("reply");
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Bulk(b"ab".to_vec()),
                Reply::Array(vec![Reply::Integer(7), Reply::Nil]),
                Reply::Status("OK".into()),
            ])
        );
        assert_eq!(reply.into_line().expect("line"), "*3");
    }

    #[test]
    fn a_bulk_string_may_hold_line_breaks() {
        let reply = parse(b"$7\r\na\r\nb\r\nc\r\n").expect("reply");
        assert_eq!(reply.text(), Some("a\r\nb\r\nc"));
    }

    #[test]
    fn garbage_and_truncated_replies_are_errors_not_panics() {
        for bad in [
            &b"?x\r\n"[..],
            b"",
            b"\r\n",
            b":x\r\n",
            b"$5\r\nab",
            b"*2\r\n:1\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn arguments_are_sent_as_bulk_strings_with_their_byte_length() {
        assert_eq!(
            encode(&["GET", "k é"]),
            b"*2\r\n$3\r\nGET\r\n$4\r\nk \xc3\xa9\r\n"
        );
    }
}
