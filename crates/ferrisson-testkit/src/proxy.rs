//! An in-process TCP proxy that injects network faults between clients and a server.
//!
//! Every accepted connection gets its own upstream connection and one pump per
//! direction. Faults are read from a shared [`Faults`] value at the moment each chunk
//! is read (latency, jitter) or is due to be written (blackhole, cut direction, held
//! replies), so a test switches them at run time through the [`ProxyControl`] handle.
//!
//! No fault drops bytes from a live connection: a network cannot do that to a TCP
//! stream (the sender retransmits), and a proxy that did would desynchronise the
//! protocol and hand replies to the wrong requests. A blackhole or a cut holds bytes
//! until it is healed, as a partition does; a partition that outlasts TCP's patience is
//! [`ProxyControl::reset_all`].

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Which way bytes travel through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Requests: from the client to the server.
    ClientToServer,
    /// Replies: from the server to the client.
    ServerToClient,
}

/// The faults a [`FaultProxy`] applies now. `Faults::default()` forwards untouched.
///
/// ```
/// use std::time::Duration;
/// use ferrisson_testkit::Faults;
///
/// let slow = Faults { latency: Duration::from_millis(30), ..Faults::default() };
/// assert!(!slow.blackhole);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Added to every chunk, in both directions.
    pub latency: Duration,
    /// A uniform random extra delay in `0..jitter` per chunk (order is kept).
    pub jitter: Duration,
    /// Hold every byte in both directions until healed, then deliver them in order (a
    /// network partition under TCP); connections stay open.
    pub blackhole: bool,
    /// Keep replies (server to client) buffered until this is switched off again.
    pub hold_replies: bool,
    /// Hold every byte travelling this way until healed; the other way is untouched.
    pub cut: Option<Direction>,
}

#[derive(Debug)]
struct Shared {
    faults: watch::Sender<Faults>,
    /// Bumped by [`ProxyControl::reset_all`]; every connection watches it.
    resets: watch::Sender<u64>,
    open: AtomicUsize,
    accepted: AtomicU64,
    held_chunks: watch::Sender<usize>,
    stalled_bytes: AtomicU64,
}

/// A running fault proxy on `127.0.0.1`; stops accepting and closes its connections on
/// drop.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ferrisson_testkit::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.port()).await?;
/// let url = proxy.url(); // clients connect here instead of to the server
/// proxy.control().set_blackhole(true); // from now on nothing gets through
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    control: ProxyControl,
    accept: JoinHandle<()>,
}

/// A cheap, cloneable handle that switches a [`FaultProxy`]'s faults at run time.
#[derive(Debug, Clone)]
pub struct ProxyControl {
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:upstream_port`. Must be called inside a tokio runtime, which runs the
    /// proxy's tasks.
    ///
    /// # Errors
    ///
    /// When no port could be bound.
    pub async fn start(upstream_port: u16) -> io::Result<Self> {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            faults: watch::Sender::new(Faults::default()),
            resets: watch::Sender::new(0),
            open: AtomicUsize::new(0),
            accepted: AtomicU64::new(0),
            held_chunks: watch::Sender::new(0),
            stalled_bytes: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&shared)));
        Ok(Self {
            addr,
            control: ProxyControl { shared },
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// A handle that switches faults; it outlives nothing: faults stop with the proxy.
    pub fn control(&self) -> ProxyControl {
        self.control.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.control.reset_all();
    }
}

impl ProxyControl {
    /// The faults in force now.
    pub fn faults(&self) -> Faults {
        *self.shared.faults.borrow()
    }

    /// Replaces every fault at once (`Faults::default()` heals everything except resets
    /// already done).
    pub fn set(&self, faults: Faults) {
        self.shared.faults.send_replace(faults);
    }

    /// Adds `latency` plus a random `0..jitter` to every chunk in both directions.
    pub fn set_latency(&self, latency: Duration, jitter: Duration) {
        self.shared.faults.send_modify(|f| {
            f.latency = latency;
            f.jitter = jitter;
        });
    }

    /// Holds all traffic (`true`) or delivers what was held, in order, and lets traffic
    /// flow again (`false`); connections stay open.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.faults.send_modify(|f| f.blackhole = on);
    }

    /// Buffers replies until called again with `false`, which delivers them in order.
    pub fn set_hold_replies(&self, on: bool) {
        self.shared.faults.send_modify(|f| f.hold_replies = on);
    }

    /// Holds traffic in one direction only (`None` delivers what was held and restores
    /// both).
    pub fn set_cut(&self, direction: Option<Direction>) {
        self.shared.faults.send_modify(|f| f.cut = direction);
    }

    /// Closes every open connection with a TCP reset (both sides); buffered bytes are
    /// lost. New connections are accepted as usual.
    pub fn reset_all(&self) {
        self.shared.resets.send_modify(|g| *g += 1);
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Connections accepted since the start.
    pub fn accepted_connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Bytes that had to wait for a blackhole or cut to heal, so far.
    pub fn stalled_bytes(&self) -> u64 {
        self.shared.stalled_bytes.load(Ordering::SeqCst)
    }

    /// Reply chunks held back now by [`ProxyControl::set_hold_replies`].
    pub fn held_replies(&self) -> usize {
        *self.shared.held_chunks.borrow()
    }

    /// Waits until at least one reply is held back: the server has answered a request
    /// the client has not seen yet.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn held_reply(&self) {
        let mut rx = self.shared.held_chunks.subscribe();
        // The sender lives in `shared`, which we hold: the wait cannot fail.
        let _ = rx.wait_for(|n| *n > 0).await;
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or similar: do not spin while it lasts.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                let _ = client.set_zero_linger();
                return;
            };
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            shared.open.fetch_add(1, Ordering::SeqCst);
            connection(client, server, &shared).await;
            shared.open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Runs one proxied connection until both directions end or a reset is ordered.
async fn connection(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) {
    let mut resets = shared.resets.subscribe();
    resets.mark_unchanged();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Zero linger: dropping a socket sends RST, which is what a reset must look like.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pipe(
        client_read,
        server_write,
        Direction::ClientToServer,
        Arc::clone(shared),
    );
    let down = pipe(
        server_read,
        client_write,
        Direction::ServerToClient,
        Arc::clone(shared),
    );
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = resets.changed() => {}
    }
}

struct Chunk {
    bytes: Vec<u8>,
    deliver_at: Instant,
}

/// One direction: a reader applies delays, a writer applies blackholes, cuts and holds and
/// writes in order.
async fn pipe(
    mut read: OwnedReadHalf,
    mut write: OwnedWriteHalf,
    direction: Direction,
    shared: Arc<Shared>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Chunk>();
    let reader = async {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last_delivery = Instant::now();
        loop {
            let n = match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let faults = *shared.faults.borrow();
            let delay = faults.latency + random_below(faults.jitter);
            // Jitter must not reorder a byte stream.
            let deliver_at = (Instant::now() + delay).max(last_delivery);
            last_delivery = deliver_at;
            if tx
                .send(Chunk {
                    bytes: buf[..n].to_vec(),
                    deliver_at,
                })
                .is_err()
            {
                break;
            }
        }
        drop(tx);
    };
    let writer = async {
        let mut faults = shared.faults.subscribe();
        let stalled = |f: &Faults| f.blackhole || f.cut == Some(direction);
        let held = |f: &Faults| direction == Direction::ServerToClient && f.hold_replies;
        while let Some(chunk) = rx.recv().await {
            tokio::time::sleep_until(chunk.deliver_at).await;
            let now = *faults.borrow_and_update();
            if stalled(&now) {
                shared
                    .stalled_bytes
                    .fetch_add(chunk.bytes.len() as u64, Ordering::SeqCst);
            }
            if held(&now) {
                shared.held_chunks.send_modify(|n| *n += 1);
            }
            // The sender lives in `shared`, which we hold: the wait cannot fail.
            let _ = faults.wait_for(|f| !stalled(f) && !held(f)).await;
            if held(&now) {
                shared.held_chunks.send_modify(|n| *n -= 1);
            }
            if write.write_all(&chunk.bytes).await.is_err() {
                return;
            }
        }
        // The source closed: pass the half-close on.
        let _ = write.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// A uniform duration in `0..max` (zero when `max` is zero).
fn random_below(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::random_range(0..nanos))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed step fails the test
mod tests {
    use super::*;
    use crate::RedisServer;

    /// Sends one RESP command and reads one reply line, with a deadline.
    async fn roundtrip(stream: &mut TcpStream, wait: Duration) -> io::Result<Option<String>> {
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
        let mut buf = [0u8; 64];
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(0)) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(Ok(n)) => Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(None),
        }
    }

    async fn setup() -> (RedisServer, FaultProxy, TcpStream) {
        let server = RedisServer::start().expect("redis-server");
        let proxy = FaultProxy::start(server.port()).await.expect("proxy");
        let stream = TcpStream::connect(proxy.addr()).await.expect("connect");
        (server, proxy, stream)
    }

    #[tokio::test]
    async fn forwards_untouched_by_default() {
        let (_server, proxy, mut stream) = setup().await;
        let reply = roundtrip(&mut stream, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(reply.as_deref(), Some("+PONG\r\n"));
        assert_eq!(proxy.control().accepted_connections(), 1);
    }

    #[tokio::test]
    async fn latency_delays_each_direction() {
        let (_server, proxy, mut stream) = setup().await;
        proxy
            .control()
            .set_latency(Duration::from_millis(100), Duration::from_millis(20));
        let start = std::time::Instant::now();
        let reply = roundtrip(&mut stream, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(reply.as_deref(), Some("+PONG\r\n"));
        // Once on the way in and once on the way out: a lower bound, not a speed claim.
        assert!(start.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn blackhole_holds_until_healed_and_keeps_the_stream_in_order() {
        let (server, proxy, mut stream) = setup().await;
        let control = proxy.control();
        control.set_blackhole(true);
        stream
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        let early = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
        assert!(early.is_err(), "nothing gets through");
        assert_eq!(server.command(&["EXISTS", "k"]).unwrap(), ":0", "nor in");
        assert!(control.stalled_bytes() > 0);
        control.set_blackhole(false);
        // The held request runs now, and its reply comes before the next one's.
        let reply = roundtrip(&mut stream, Duration::from_secs(5))
            .await
            .unwrap();
        let mut got = reply.unwrap_or_default();
        while got.len() < "+OK\r\n+PONG\r\n".len() {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert_eq!(got, "+OK\r\n+PONG\r\n");
        assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
    }

    #[tokio::test]
    async fn cut_one_direction_executes_without_answering() {
        let (server, proxy, mut stream) = setup().await;
        proxy.control().set_cut(Some(Direction::ServerToClient));
        stream
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
        assert!(read.is_err(), "no reply gets through");
        // The request did reach the server.
        assert_eq!(server.command(&["GET", "k"]).unwrap().trim(), "v");

        // Cutting the other way heals this one: the held reply arrives.
        proxy.control().set_cut(Some(Direction::ClientToServer));
        let held = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..held], b"+OK\r\n");
        let reply = roundtrip(&mut stream, Duration::from_millis(300))
            .await
            .unwrap();
        assert_eq!(reply, None);
    }

    #[tokio::test]
    async fn held_replies_arrive_in_order_on_release() {
        let (server, proxy, mut stream) = setup().await;
        let control = proxy.control();
        control.set_hold_replies(true);
        stream
            .write_all(b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), control.held_reply())
            .await
            .expect("the server answered");
        assert_eq!(server.command(&["GET", "n"]).unwrap().trim(), "2");
        let mut buf = [0u8; 16];
        let early = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
        assert!(early.is_err(), "nothing is delivered while held");
        control.set_hold_replies(false);
        let mut got = Vec::new();
        while got.len() < 8 {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b":1\r\n:2\r\n");
        assert_eq!(control.held_replies(), 0);
    }

    #[tokio::test]
    async fn reset_closes_open_connections() {
        let (_server, proxy, mut stream) = setup().await;
        let control = proxy.control();
        assert!(
            roundtrip(&mut stream, Duration::from_secs(5))
                .await
                .unwrap()
                .is_some()
        );
        control.reset_all();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the reset is seen at once");
        match read {
            Ok(0) => {}
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
            Ok(n) => panic!("unexpected {n} bytes after reset"),
        }
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        let reply = roundtrip(&mut again, Duration::from_secs(5)).await.unwrap();
        assert_eq!(reply.as_deref(), Some("+PONG\r\n"));
        assert_eq!(control.accepted_connections(), 2);
    }
}
