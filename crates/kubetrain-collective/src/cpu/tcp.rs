//! The TCP transport between ranks on different hosts.
//!
//! Each message is a 16-byte header (length, tag) and the payload. Sends go through a writer thread with a
//! bounded pool of buffers, so a rank can post a message and go on receiving: both directions of the ring
//! move at once and no rank ever blocks in `write` while its neighbour blocks in `write` too.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::ctx::{LinkCtx, mismatch};
use crate::error::{CollectiveError, Result};

const HEADER: usize = 16;

/// A buffer of u64 words, so typed views of it are aligned for every element type.
type Words = Vec<u64>;

fn bytes_mut(words: &mut Words, len: usize) -> &mut [u8] {
    let need = len.div_ceil(8);
    if words.len() < need {
        words.resize(need, 0);
    }
    &mut bytemuck::cast_slice_mut(words.as_mut_slice())[..len]
}

/// The sending end of a TCP link.
pub(crate) struct TcpSender {
    stream: TcpStream,
    work: Option<SyncSender<(Words, usize, u32)>>,
    free: Receiver<Words>,
    failure: Arc<Mutex<Option<String>>>,
    writer: Option<JoinHandle<()>>,
}

impl TcpSender {
    /// Starts the writer thread; `depth` messages may be in flight.
    pub(crate) fn new(stream: TcpStream, ctx: &LinkCtx, depth: usize) -> Result<Self> {
        stream
            .set_write_timeout(Some(ctx.timeout))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| CollectiveError::io("configure TCP link", e))?;
        let writer_stream = stream
            .try_clone()
            .map_err(|e| CollectiveError::io("clone TCP link", e))?;
        let depth = depth.max(1);
        let (work_tx, work_rx) = mpsc::sync_channel::<(Words, usize, u32)>(depth);
        let (free_tx, free_rx) = mpsc::sync_channel::<Words>(depth);
        for _ in 0..depth {
            free_tx.send(Words::new()).expect("the receiver is alive");
        }
        let failure = Arc::new(Mutex::new(None));
        let writer_failure = Arc::clone(&failure);
        let writer = std::thread::Builder::new()
            .name(format!("kubetrain-tcp-{}-{}", ctx.rank, ctx.peer))
            .spawn(move || writer_loop(writer_stream, work_rx, free_tx, writer_failure))
            .map_err(|e| CollectiveError::io("spawn TCP writer thread", e))?;
        Ok(TcpSender {
            stream,
            work: Some(work_tx),
            free: free_rx,
            failure,
            writer: Some(writer),
        })
    }

    /// Lets `fill` write `len` bytes into a free buffer and queues it for sending.
    pub(crate) fn send<R>(
        &mut self,
        ctx: &LinkCtx,
        during: &str,
        tag: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<R>,
    ) -> Result<R> {
        let mut buf = match self.free.recv_timeout(ctx.timeout) {
            Ok(buf) => buf,
            Err(RecvTimeoutError::Timeout) => return Err(ctx.timeout_error(ctx.timeout, during)),
            Err(RecvTimeoutError::Disconnected) => return Err(self.lost(ctx, during)),
        };
        let out = fill(bytes_mut(&mut buf, len))?;
        let work = self.work.as_ref().expect("set until drop");
        if work.send((buf, len, tag)).is_err() {
            return Err(self.lost(ctx, during));
        }
        Ok(out)
    }

    fn lost(&self, ctx: &LinkCtx, during: &str) -> CollectiveError {
        let reason = self
            .failure
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
            .unwrap_or_else(|| "connection closed".to_string());
        if reason.contains("timed out") || reason.contains("would block") {
            return ctx.timeout_error(ctx.timeout, during);
        }
        CollectiveError::PeerLost {
            rank: ctx.rank,
            peer: ctx.peer,
            during: during.to_string(),
            reason,
        }
    }

    /// Closes the connection so the peer sees the failure at once.
    pub(crate) fn abort(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

impl Drop for TcpSender {
    fn drop(&mut self) {
        // Let queued messages reach the peer (bounded by the write timeout) before the process may exit.
        drop(self.work.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn writer_loop(
    mut stream: TcpStream,
    work: Receiver<(Words, usize, u32)>,
    free: SyncSender<Words>,
    failure: Arc<Mutex<Option<String>>>,
) {
    for (mut buf, len, tag) in work {
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&(len as u64).to_le_bytes());
        header[8..12].copy_from_slice(&tag.to_le_bytes());
        let result = stream
            .write_all(&header)
            .and_then(|()| stream.write_all(bytes_mut(&mut buf, len)));
        if let Err(e) = result {
            if let Ok(mut f) = failure.lock() {
                *f = Some(e.to_string());
            }
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        if free.send(buf).is_err() {
            return;
        }
    }
}

/// The receiving end of a TCP link.
pub(crate) struct TcpReceiver {
    stream: TcpStream,
    buf: Words,
}

impl TcpReceiver {
    /// Wraps a connected stream; reads time out after the communicator's timeout.
    pub(crate) fn new(stream: TcpStream, ctx: &LinkCtx) -> Result<Self> {
        stream
            .set_read_timeout(Some(ctx.timeout))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| CollectiveError::io("configure TCP link", e))?;
        Ok(TcpReceiver {
            stream,
            buf: Words::new(),
        })
    }

    /// Reads the next message, checks its tag and length, and lets `read` consume it.
    pub(crate) fn recv<R>(
        &mut self,
        ctx: &LinkCtx,
        during: &str,
        tag: u32,
        len: usize,
        read: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let mut header = [0u8; HEADER];
        self.stream
            .read_exact(&mut header)
            .map_err(|e| read_error(ctx, during, e))?;
        let got_len = u64::from_le_bytes(header[..8].try_into().expect("8 bytes")) as usize;
        let got_tag = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if got_len != len || got_tag != tag {
            return Err(mismatch(ctx, tag, len, got_tag, got_len));
        }
        let data = bytes_mut(&mut self.buf, len);
        self.stream
            .read_exact(data)
            .map_err(|e| read_error(ctx, during, e))?;
        read(data)
    }

    /// Closes the connection so the peer sees the failure at once.
    pub(crate) fn abort(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn read_error(ctx: &LinkCtx, during: &str, e: std::io::Error) -> CollectiveError {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ctx.timeout_error(ctx.timeout, during),
        _ => CollectiveError::PeerLost {
            rank: ctx.rank,
            peer: ctx.peer,
            during: during.to_string(),
            reason: if e.kind() == ErrorKind::UnexpectedEof {
                "connection closed".to_string()
            } else {
                e.to_string()
            },
        },
    }
}
