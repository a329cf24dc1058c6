//! Point-to-point links between two ranks (shared memory on one host, TCP across hosts) and how they are
//! set up from the rendezvous membership.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::ctx::{LinkCtx, WaitPolicy};
use super::shm::ShmQueue;
use super::tcp::{TcpReceiver, TcpSender};
use crate::error::{CollectiveError, Result};
use crate::rendezvous::PeerInfo;

enum SendKind {
    Shm(ShmQueue),
    Tcp(TcpSender),
}

enum RecvKind {
    Shm(ShmQueue),
    Tcp(TcpReceiver),
}

/// The sending end of a link to one peer.
pub(crate) struct SendLink {
    kind: SendKind,
    pub(crate) ctx: LinkCtx,
}

/// The receiving end of a link from one peer.
pub(crate) struct RecvLink {
    kind: RecvKind,
    pub(crate) ctx: LinkCtx,
}

impl SendLink {
    /// Lets `fill` write a `len`-byte message and sends it.
    pub(crate) fn send<R>(
        &mut self,
        during: &str,
        tag: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<R>,
    ) -> Result<R> {
        match &mut self.kind {
            SendKind::Shm(q) => q.send(&self.ctx, during, tag, len, fill),
            SendKind::Tcp(t) => t.send(&self.ctx, during, tag, len, fill),
        }
    }

    /// Fails the link on both ends.
    pub(crate) fn abort(&self) {
        match &self.kind {
            SendKind::Shm(q) => q.abort(),
            SendKind::Tcp(t) => t.abort(),
        }
    }

    /// Waits until the peer has opened its end (shared memory only; TCP is connected already).
    pub(crate) fn wait_connected(&self, during: &str) -> Result<()> {
        match &self.kind {
            SendKind::Shm(q) => q.wait_attached(&self.ctx, during),
            SendKind::Tcp(_) => Ok(()),
        }
    }

    /// Whether this link goes through shared memory.
    pub(crate) fn is_shm(&self) -> bool {
        matches!(self.kind, SendKind::Shm(_))
    }
}

impl RecvLink {
    /// Receives a `len`-byte message and lets `read` consume it in place.
    pub(crate) fn recv<R>(
        &mut self,
        during: &str,
        tag: u32,
        len: usize,
        read: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        match &mut self.kind {
            RecvKind::Shm(q) => q.recv(&self.ctx, during, tag, len, read),
            RecvKind::Tcp(t) => t.recv(&self.ctx, during, tag, len, read),
        }
    }

    /// Fails the link on both ends.
    pub(crate) fn abort(&self) {
        match &self.kind {
            RecvKind::Shm(q) => q.abort(),
            RecvKind::Tcp(t) => t.abort(),
        }
    }
}

/// What a link carries; one link per (source, destination, purpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Purpose {
    Ring = 0,
    P2p = 1,
}

const HELLO_MAGIC: u64 = 0x6b75_6265_7463_7031; // "kubetcp1"

/// Link settings shared by every link of a communicator.
#[derive(Debug, Clone)]
pub(crate) struct LinkSettings {
    pub timeout: Duration,
    pub slot_bytes: usize,
    pub slots: usize,
    pub shm_dir: PathBuf,
    pub wait: WaitPolicy,
}

/// Sets up links to the peers of one membership: shared memory queues with ranks that share this host's
/// `/dev/shm`, TCP connections (identified by a hello) with the others.
pub(crate) struct Connector {
    rank: usize,
    session: u64,
    peers: Vec<PeerInfo>,
    listener: TcpListener,
    pending: HashMap<(usize, Purpose), TcpStream>,
    settings: LinkSettings,
}

impl Connector {
    pub(crate) fn new(
        rank: usize,
        session: u64,
        peers: Vec<PeerInfo>,
        listener: TcpListener,
        settings: LinkSettings,
    ) -> Self {
        Connector {
            rank,
            session,
            peers,
            listener,
            pending: HashMap::new(),
            settings,
        }
    }

    fn ctx(&self, peer: usize) -> LinkCtx {
        LinkCtx {
            rank: self.rank,
            peer,
            timeout: self.settings.timeout,
            wait: self.settings.wait,
        }
    }

    /// Whether this rank and `peer` exchange through shared memory.
    pub(crate) fn same_host(&self, peer: usize) -> bool {
        let (me, other) = (&self.peers[self.rank], &self.peers[peer]);
        me.shm && other.shm && me.host == other.host
    }

    fn shm_path(&self, src: usize, dst: usize, purpose: Purpose) -> PathBuf {
        self.settings.shm_dir.join(format!(
            "kubetrain-{:016x}-{src}-{dst}-{}",
            self.session, purpose as u8
        ))
    }

    /// Opens the sending end of the link to `peer`. Never blocks on the peer.
    pub(crate) fn connect(&mut self, peer: usize, purpose: Purpose) -> Result<SendLink> {
        let ctx = self.ctx(peer);
        if self.same_host(peer) {
            let path = self.shm_path(self.rank, peer, purpose);
            let queue = ShmQueue::create(
                &path,
                self.settings.slots,
                self.settings.slot_bytes,
                self.settings.timeout,
            )
            .map_err(|e| {
                CollectiveError::io(format!("create shared memory queue {}", path.display()), e)
            })?;
            return Ok(SendLink {
                kind: SendKind::Shm(queue),
                ctx,
            });
        }
        let addr = &self.peers[peer].addr;
        let target = addr
            .to_socket_addrs()
            .map_err(|e| CollectiveError::io(format!("resolve rank {peer}'s address {addr}"), e))?
            .next()
            .ok_or_else(|| {
                CollectiveError::io(
                    format!("resolve rank {peer}'s address {addr}"),
                    std::io::Error::new(ErrorKind::NotFound, "no address"),
                )
            })?;
        let mut stream = TcpStream::connect_timeout(&target, self.settings.timeout)
            .map_err(|e| CollectiveError::io(format!("connect to rank {peer} at {addr}"), e))?;
        let mut hello = [0u8; 24];
        hello[..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        hello[8..16].copy_from_slice(&self.session.to_le_bytes());
        hello[16..20].copy_from_slice(&(self.rank as u32).to_le_bytes());
        hello[20] = purpose as u8;
        stream
            .write_all(&hello)
            .map_err(|e| CollectiveError::io(format!("greet rank {peer}"), e))?;
        Ok(SendLink {
            kind: SendKind::Tcp(TcpSender::new(stream, &ctx, self.settings.slots)?),
            ctx,
        })
    }

    /// Opens the receiving end of the link from `peer`, waiting for the peer to connect.
    pub(crate) fn accept(
        &mut self,
        peer: usize,
        purpose: Purpose,
        during: &str,
    ) -> Result<RecvLink> {
        let ctx = self.ctx(peer);
        if self.same_host(peer) {
            let path = self.shm_path(peer, self.rank, purpose);
            return Ok(RecvLink {
                kind: RecvKind::Shm(ShmQueue::open(&path, &ctx, during)?),
                ctx,
            });
        }
        let start = Instant::now();
        self.listener
            .set_nonblocking(true)
            .map_err(|e| CollectiveError::io("configure data listener", e))?;
        while !self.pending.contains_key(&(peer, purpose)) {
            match self.listener.accept() {
                Ok((stream, _)) => self.greet(stream)?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if start.elapsed() >= self.settings.timeout {
                        return Err(ctx.timeout_error(start.elapsed(), during));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(CollectiveError::io("accept on data listener", e)),
            }
        }
        let stream = self
            .pending
            .remove(&(peer, purpose))
            .expect("checked above");
        Ok(RecvLink {
            kind: RecvKind::Tcp(TcpReceiver::new(stream, &ctx)?),
            ctx,
        })
    }

    /// Reads an incoming connection's hello and files it under its source and purpose; strangers are dropped.
    fn greet(&mut self, mut stream: TcpStream) -> Result<()> {
        let configure = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(self.settings.timeout)));
        configure.map_err(|e| CollectiveError::io("configure data connection", e))?;
        let mut hello = [0u8; 24];
        if stream.read_exact(&mut hello).is_err() {
            return Ok(());
        }
        let magic = u64::from_le_bytes(hello[..8].try_into().expect("8 bytes"));
        let session = u64::from_le_bytes(hello[8..16].try_into().expect("8 bytes"));
        let src = u32::from_le_bytes(hello[16..20].try_into().expect("4 bytes")) as usize;
        let purpose = match hello[20] {
            0 => Purpose::Ring,
            1 => Purpose::P2p,
            _ => return Ok(()),
        };
        if magic == HELLO_MAGIC && session == self.session && src < self.peers.len() {
            self.pending.insert((src, purpose), stream);
        }
        Ok(())
    }
}
