//! The CPU backend: ring collectives over shared memory (ranks on one host) and TCP (across hosts).

mod ctx;
mod link;
mod ring;
mod shm;
mod sys;
mod tcp;

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use ctx::{WaitPolicy, tag};
use link::{Connector, LinkSettings, Purpose, RecvLink, SendLink};
use ring::Ring;

use crate::communicator::{Communicator, check};
use crate::dtype::{Element, ReduceOp};
use crate::error::{CollectiveError, Result};
use crate::rendezvous::{self, RankEnv};

/// Which transports the CPU backend may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory between ranks of one host, TCP otherwise.
    #[default]
    Auto,
    /// TCP between every pair (for testing the cross-host path on one machine).
    Tcp,
}

/// Settings of a [`CpuCommunicator`].
#[derive(Debug, Clone)]
pub struct CpuOptions {
    /// How long any wait (rendezvous, a peer's message, a free slot) may take before it is an error.
    pub timeout: Duration,
    /// Bytes per pipelined message (rounded up to 64; also the shared memory slot size).
    pub slice_bytes: usize,
    /// Messages in flight per link (shared memory slots, TCP buffers), 1..=64.
    pub slots: usize,
    /// Transport choice.
    pub transport: Transport,
    /// Directory for shared memory queues (a tmpfs, normally `/dev/shm`).
    pub shm_dir: PathBuf,
    /// Pin the calling thread to its own CPU (the n-th allowed CPU for the n-th rank on this host) when
    /// every local rank has one, as MPI binds ranks to cores. Off by default: it changes the affinity of
    /// the caller's thread, which a training process may not want.
    pub pin_to_core: bool,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            timeout: Duration::from_secs(300),
            slice_bytes: 512 * 1024,
            slots: 4,
            transport: Transport::Auto,
            shm_dir: PathBuf::from("/dev/shm"),
            pin_to_core: false,
        }
    }
}

struct RingLinks {
    next: SendLink,
    prev: RecvLink,
}

/// A communicator of the CPU backend. Create one per rank (thread or process) with [`CpuCommunicator::init`].
///
/// ```
/// use std::net::TcpListener;
/// use std::time::Duration;
/// use kubetrain_collective::{Communicator, ReduceOp};
/// use kubetrain_collective::cpu::{CpuCommunicator, CpuOptions};
/// use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
///
/// // Two ranks as threads; rank 0 hosts the store on a free loopback port.
/// let store = TcpListener::bind("127.0.0.1:0")?;
/// let port = store.local_addr()?.port();
/// let env = move |rank| RankEnv { rank, world_size: 2, local_rank: rank, local_world_size: 2,
///     master_addr: "127.0.0.1".into(), master_port: port, flavour: EnvFlavour::Generic };
/// let opts = CpuOptions { timeout: Duration::from_secs(10), ..CpuOptions::default() };
/// let o = opts.clone();
/// let peer = std::thread::spawn(move || -> kubetrain_collective::Result<Vec<f32>> {
///     let mut comm = CpuCommunicator::init(&env(1), None, o)?;
///     let mut grad = vec![3.0f32, 4.0];
///     comm.all_reduce_in_place(&mut grad, ReduceOp::Sum)?;
///     Ok(grad)
/// });
/// let mut comm = CpuCommunicator::init(&env(0), Some(store), opts)?;
/// let mut grad = vec![1.0f32, 2.0];
/// comm.all_reduce_in_place(&mut grad, ReduceOp::Sum)?;
/// assert_eq!(grad, [4.0, 6.0]);
/// assert_eq!(peer.join().unwrap()?, [4.0, 6.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CpuCommunicator {
    rank: usize,
    world_size: usize,
    slice_bytes: usize,
    ring: Option<RingLinks>,
    p2p_send: HashMap<usize, SendLink>,
    p2p_recv: HashMap<usize, RecvLink>,
    connector: Connector,
    failure: Option<String>,
}

impl std::fmt::Debug for CpuCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuCommunicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("transport", &self.transport_summary())
            .field("failure", &self.failure)
            .finish()
    }
}

fn shm_usable(opts: &CpuOptions) -> bool {
    if opts.transport == Transport::Tcp {
        return false;
    }
    let probe = opts.shm_dir.join(format!(
        "kubetrain-probe-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let ok = std::fs::write(&probe, b"ok").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

impl CpuCommunicator {
    /// Reads the rendezvous environment ([`RankEnv::from_env`]) and forms the communicator.
    pub fn from_env(opts: CpuOptions) -> Result<Self> {
        let env = RankEnv::from_env()?;
        Self::init(&env, None, opts)
    }

    /// Meets the other ranks through rank 0's store and connects the ring. Rank 0 serves the store on
    /// `store` if given, else binds `0.0.0.0:master_port`.
    pub fn init(env: &RankEnv, store: Option<TcpListener>, opts: CpuOptions) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .map_err(|e| CollectiveError::io("bind the data listener", e))?;
        let data_port = listener
            .local_addr()
            .map_err(|e| CollectiveError::io("read the data listener's port", e))?
            .port();
        let shm = shm_usable(&opts);
        let membership =
            rendezvous::exchange(env, store, data_port, shm, Vec::new(), opts.timeout)?;
        let me = &membership.peers[env.rank];
        let local_ranks = membership
            .peers
            .iter()
            .filter(|p| p.shm && me.shm && p.host == me.host)
            .count();
        // Counted before pinning: a pinned thread may use one CPU.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if opts.pin_to_core {
            let local_index = membership
                .peers
                .iter()
                .filter(|p| p.host == me.host && p.shm == me.shm)
                .position(|p| p.rank == env.rank)
                .unwrap_or(0);
            if local_ranks <= cores {
                sys::pin_to_allowed_cpu(local_index);
            }
        }
        let slice_bytes = opts.slice_bytes.clamp(64, 64 << 20).next_multiple_of(64);
        let settings = LinkSettings {
            timeout: opts.timeout,
            slot_bytes: slice_bytes,
            slots: opts.slots.clamp(1, shm::MAX_SLOTS),
            shm_dir: opts.shm_dir.clone(),
            wait: WaitPolicy::for_local_ranks(local_ranks, cores),
        };
        let n = env.world_size;
        let mut connector = Connector::new(
            env.rank,
            membership.session,
            membership.peers,
            listener,
            settings,
        );
        let ring = if n > 1 {
            // Create our outgoing end first (never blocks), then wait for the incoming one.
            let next = connector.connect((env.rank + 1) % n, Purpose::Ring)?;
            let prev =
                connector.accept((env.rank + n - 1) % n, Purpose::Ring, "connecting the ring")?;
            next.wait_connected("connecting the ring")?;
            Some(RingLinks { next, prev })
        } else {
            None
        };
        Ok(CpuCommunicator {
            rank: env.rank,
            world_size: n,
            slice_bytes,
            ring,
            p2p_send: HashMap::new(),
            p2p_recv: HashMap::new(),
            connector,
            failure: None,
        })
    }

    /// `"shm"`, `"tcp"` or `"shm+tcp"` for the ring links of this rank, `"none"` for one rank.
    pub fn transport_summary(&self) -> &'static str {
        match &self.ring {
            None => "none",
            Some(r) => match (
                r.next.is_shm(),
                self.connector
                    .same_host((self.rank + self.world_size - 1) % self.world_size),
            ) {
                (true, true) => "shm",
                (false, false) => "tcp",
                _ => "shm+tcp",
            },
        }
    }

    /// Runs `f` unless the communicator already failed; a failure aborts every link so peers fail fast.
    fn guarded(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        if let Some(reason) = &self.failure {
            return Err(CollectiveError::Poisoned(reason.clone()));
        }
        match f(self) {
            Err(e) if !matches!(e, CollectiveError::InvalidArgument(_)) => {
                self.failure = Some(e.to_string());
                self.abort_links();
                Err(e)
            }
            other => other,
        }
    }

    fn abort_links(&self) {
        if let Some(r) = &self.ring {
            r.next.abort();
            r.prev.abort();
        }
        self.p2p_send.values().for_each(SendLink::abort);
        self.p2p_recv.values().for_each(RecvLink::abort);
    }

    fn ring(&mut self, during: &'static str, tag: u32) -> Ring<'_> {
        let links = self.ring.as_mut().expect("only called with world_size > 1");
        Ring {
            tx: &mut links.next,
            rx: &mut links.prev,
            rank: self.rank,
            n: self.world_size,
            slice_bytes: self.slice_bytes,
            during,
            tag,
        }
    }
}

impl Drop for CpuCommunicator {
    fn drop(&mut self) {
        // A failed rank leaves; make sure its peers do not wait for it until their timeout.
        if self.failure.is_some() {
            self.abort_links();
        }
    }
}

impl Communicator for CpuCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn all_reduce<T: Element>(&mut self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check::same_len("all_reduce", send.len(), recv.len())?;
        self.guarded(|c| {
            if c.world_size == 1 {
                recv.copy_from_slice(send);
                return Ok(());
            }
            c.ring("all_reduce", tag::ALL_REDUCE)
                .all_reduce(Some(send), recv, op)
        })
    }

    fn all_reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.guarded(|c| {
            if c.world_size == 1 {
                return Ok(());
            }
            c.ring("all_reduce", tag::ALL_REDUCE)
                .all_reduce(None, buf, op)
        })
    }

    fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        check::rank("broadcast", "root", root, self.world_size)?;
        self.guarded(|c| {
            if c.world_size == 1 {
                return Ok(());
            }
            c.ring("broadcast", tag::BROADCAST).broadcast(buf, root)
        })
    }

    fn reduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        check::reduce(send.len(), recv.len(), root, self.rank, self.world_size)?;
        self.guarded(|c| {
            if c.world_size == 1 {
                recv.copy_from_slice(send);
                return Ok(());
            }
            c.ring("reduce", tag::REDUCE).reduce(send, recv, op, root)
        })
    }

    fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.world_size;
        let count = check::all_gather(send.len(), recv.len(), n)?;
        self.guarded(|c| {
            let own = c.rank * count..(c.rank + 1) * count;
            recv[own].copy_from_slice(send);
            if n == 1 {
                return Ok(());
            }
            c.ring("all_gather", tag::ALL_GATHER)
                .all_gather(recv, count)
        })
    }

    fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let count = check::divisible("all_gather", buf.len(), self.world_size)?;
        self.guarded(|c| {
            if c.world_size == 1 {
                return Ok(());
            }
            c.ring("all_gather", tag::ALL_GATHER).all_gather(buf, count)
        })
    }

    fn reduce_scatter<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let n = self.world_size;
        let count = check::reduce_scatter(send.len(), recv.len(), n)?;
        self.guarded(|c| {
            if n == 1 {
                recv.copy_from_slice(send);
                return Ok(());
            }
            c.ring("reduce_scatter", tag::REDUCE_SCATTER)
                .reduce_scatter(Some(send), recv, count, op)
        })
    }

    fn reduce_scatter_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let count = check::divisible("reduce_scatter", buf.len(), self.world_size)?;
        self.guarded(|c| {
            if c.world_size == 1 {
                return Ok(());
            }
            c.ring("reduce_scatter", tag::REDUCE_SCATTER)
                .reduce_scatter(None, buf, count, op)
        })
    }

    fn send<T: Element>(&mut self, buf: &[T], peer: usize) -> Result<()> {
        check::peer("send", peer, self.rank, self.world_size)?;
        self.guarded(|c| {
            if !c.p2p_send.contains_key(&peer) {
                let link = c.connector.connect(peer, Purpose::P2p)?;
                c.p2p_send.insert(peer, link);
            }
            let link = c.p2p_send.get_mut(&peer).expect("inserted above");
            ring::p2p_send(link, buf, c.slice_bytes, tag::P2P)
        })
    }

    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize) -> Result<()> {
        check::peer("recv", peer, self.rank, self.world_size)?;
        self.guarded(|c| {
            if !c.p2p_recv.contains_key(&peer) {
                let link = c.connector.accept(peer, Purpose::P2p, "recv")?;
                c.p2p_recv.insert(peer, link);
            }
            let link = c.p2p_recv.get_mut(&peer).expect("inserted above");
            ring::p2p_recv(link, buf, c.slice_bytes, tag::P2P)
        })
    }

    fn barrier(&mut self) -> Result<()> {
        self.guarded(|c| {
            if c.world_size == 1 {
                return Ok(());
            }
            let mut token = [0u8];
            c.ring("barrier", tag::BARRIER)
                .all_reduce(None, &mut token, ReduceOp::Max)
        })
    }
}
