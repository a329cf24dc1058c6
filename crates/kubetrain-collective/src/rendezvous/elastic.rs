//! The elastic rendezvous of an elastic torch TrainJob (`PET_NNODES=min:max`), in the manner of torchrun's
//! c10d rendezvous: one node hosts a long-lived store ([`ElasticStore`]); every node's agent
//! ([`ElasticAgent`]) keeps one connection to it for the whole run.
//!
//! * **Rounds.** A round (torch's *generation*) closes when `max` nodes wait, or when at least `min` wait and
//!   the *last call* window (`last_call_timeout`) has passed since the `min`-th arrived; the store then
//!   assigns node ranks (survivors keep their order, newcomers follow in arrival order) and tells every
//!   admitted node the address of the round's rank 0, where the ranks' own exchange ([`super::exchange`])
//!   meets. Nodes beyond `max` wait for a later round.
//! * **Membership changes.** A node is gone when its connection closes (the process ended: the kernel
//!   closes its sockets at once) or when it misses `keep_alive_max_attempt` keep-alives of
//!   `keep_alive_interval` each (a hung or cut-off node). A node that waits while a round of fewer than
//!   `max` nodes trains is admitted at the next round. Either makes the round *stale*: the survivors learn it
//!   from their next keep-alive ([`ElasticAgent::membership_changed`]) or from a failed collective, leave the
//!   round and join the next one ([`ElasticAgent::next_round`]), which closes only once every live member of
//!   the old round has re-joined. Below `min` nodes the next round never closes and each agent fails after
//!   `join_timeout` with a message that says how many arrived.
//! * **Restarts.** Each round after an agent's first counts as a restart; more than `PET_MAX_RESTARTS` fail
//!   the agent, as torchrun's `--max-restarts` does.
//! * **End.** The first node that finishes tells the store ([`ElasticAgent::finish`]); nodes that leave after
//!   that do not re-form the group, and a node that arrives afterwards is told the job is done.
//!
//! The store lives in the process of the node that hosts it, so losing that node ends the job, as with
//! torch's c10d backend; losing any other node shrinks it.
//!
//! Wire format: one JSON object per line in each direction on the agent's connection; lines are capped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::env::{parse_count, parse_nnodes_range, parse_port};
use super::{EnvFlavour, RankEnv, RendezvousError};

const PROTOCOL: u32 = 1;
const MAX_LINE: u64 = 64 * 1024;
/// How often the store's connection threads look at the clock (last call, keep-alive and join deadlines).
const TICK: Duration = Duration::from_millis(20);

/// The settings of an elastic rendezvous, as torchrun takes them (`--nnodes`, `--rdzv-endpoint`,
/// `--rdzv-id`, `--rdzv-conf`, `--max-restarts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticSettings {
    /// The fewest nodes a round admits.
    pub min_nodes: usize,
    /// The most nodes a round admits.
    pub max_nodes: usize,
    /// Host of the store.
    pub endpoint_host: String,
    /// Port of the store.
    pub endpoint_port: u16,
    /// The job's id: agents of another job that reach the same store are refused.
    pub run_id: String,
    /// Rounds after an agent's first that it accepts before failing.
    pub max_restarts: u32,
    /// How long a round may take to close before the agent fails.
    pub join_timeout: Duration,
    /// How long a round stays open for more nodes once `min_nodes` wait.
    pub last_call: Duration,
    /// How often an agent in a round tells the store it lives.
    pub keep_alive_interval: Duration,
    /// Keep-alives a node may miss before the store drops it.
    pub keep_alive_max_attempt: u32,
    /// Whether this node hosts the store.
    pub host: StoreHost,
}

/// Which node hosts the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreHost {
    /// This node (`PET_NODE_RANK=0`, or the endpoint names this machine).
    Yes,
    /// Another node.
    No,
    /// The endpoint is a loopback address and no node rank is known: the first node to bind the port hosts.
    IfFree,
}

/// Torch's c10d defaults: `join_timeout` 600 s, `last_call_timeout` 30 s, keep-alive every 5 s, 3 misses.
impl Default for ElasticSettings {
    fn default() -> Self {
        ElasticSettings {
            min_nodes: 1,
            max_nodes: 1,
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: 29400,
            run_id: "none".into(),
            max_restarts: DEFAULT_MAX_RESTARTS,
            join_timeout: Duration::from_secs(600),
            last_call: Duration::from_secs(30),
            keep_alive_interval: Duration::from_secs(5),
            keep_alive_max_attempt: 3,
            host: StoreHost::IfFree,
        }
    }
}

/// The restarts an agent accepts when `PET_MAX_RESTARTS` is not set.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

fn invalid(var: &'static str, value: &str, reason: impl Into<String>) -> RendezvousError {
    RendezvousError::Invalid {
        var,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn seconds(var: &'static str, value: &str, key: &str) -> Result<Duration, RendezvousError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            invalid(
                var,
                value,
                format!("{key}: expected a positive number of seconds"),
            )
        })
}

impl ElasticSettings {
    /// Reads the process environment; see [`ElasticSettings::from_lookup`].
    pub fn from_env() -> Result<Option<Self>, RendezvousError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The elastic settings when `PET_NNODES` is an elastic range (`min:max`, `min < max`), else `None`
    /// (the static path: [`RankEnv`]).
    ///
    /// * the store is at `PET_RDZV_ENDPOINT` (`host:port`), else `PET_MASTER_ADDR:PET_MASTER_PORT`;
    /// * `PET_RDZV_BACKEND` must be `c10d` when set; `PET_RDZV_ID` names the job (default `none`);
    /// * `PET_RDZV_CONF` takes torch's `key=value` list: `join_timeout`, `last_call_timeout`,
    ///   `keep_alive_interval` (seconds) and `keep_alive_max_attempt`; other keys are ignored;
    /// * `PET_MAX_RESTARTS` (default [`DEFAULT_MAX_RESTARTS`]);
    /// * the node with `PET_NODE_RANK=0` hosts the store; without it, the pod with `JOB_COMPLETION_INDEX=0`
    ///   (the node job's first pod, which the endpoint names); without either, a loopback endpoint is
    ///   hosted by the first node that binds it, any other by the machine whose host name the endpoint
    ///   names.
    ///
    /// ```
    /// use kubetrain_collective::rendezvous::ElasticSettings;
    ///
    /// let vars = [("PET_NNODES", "2:4"), ("PET_NPROC_PER_NODE", "1"), ("PET_NODE_RANK", "1"),
    ///             ("PET_RDZV_BACKEND", "c10d"), ("PET_RDZV_ENDPOINT", "job-node-0-0.job:29400"),
    ///             ("PET_RDZV_CONF", "join_timeout=60,last_call_timeout=2")];
    /// let s = ElasticSettings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))?
    ///     .expect("elastic");
    /// assert_eq!((s.min_nodes, s.max_nodes, s.endpoint_port), (2, 4, 29400));
    /// assert_eq!(s.last_call, std::time::Duration::from_secs(2));
    /// # Ok::<(), kubetrain_collective::rendezvous::RendezvousError>(())
    /// ```
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, RendezvousError> {
        let Some(nnodes) = get("PET_NNODES") else {
            return Ok(None);
        };
        let (min_nodes, max_nodes) = parse_nnodes_range(&nnodes)?;
        if min_nodes == max_nodes {
            return Ok(None);
        }
        let mut s = ElasticSettings {
            min_nodes,
            max_nodes,
            ..ElasticSettings::default()
        };
        if let Some(nproc) = get("PET_NPROC_PER_NODE")
            && !matches!(nproc.trim(), "1")
        {
            return Err(invalid(
                "PET_NPROC_PER_NODE",
                &nproc,
                "the elastic rendezvous runs one process per node; use 1 (or torchrun for several)",
            ));
        }
        if let Some(backend) = get("PET_RDZV_BACKEND")
            && backend.trim() != "c10d"
        {
            return Err(invalid(
                "PET_RDZV_BACKEND",
                &backend,
                "the elastic rendezvous speaks c10d only",
            ));
        }
        let (host, port) = endpoint(&get)?;
        s.endpoint_host = host;
        s.endpoint_port = port;
        if let Some(id) = get("PET_RDZV_ID").filter(|v| !v.trim().is_empty()) {
            s.run_id = id.trim().to_string();
        }
        if let Some(v) = get("PET_MAX_RESTARTS") {
            s.max_restarts = u32::try_from(parse_count("PET_MAX_RESTARTS", &v, 0)?)
                .map_err(|_| invalid("PET_MAX_RESTARTS", &v, "too large"))?;
        }
        if let Some(conf) = get("PET_RDZV_CONF") {
            s.apply_conf(&conf)?;
        }
        s.host = match get("PET_NODE_RANK") {
            Some(r) => {
                if parse_count("PET_NODE_RANK", &r, 0)? == 0 {
                    StoreHost::Yes
                } else {
                    StoreHost::No
                }
            }
            // The index of an Indexed Job's pod (the kubelet sets it; so does `kubetrain run`): the node
            // job's pod 0 is the endpoint's pod.
            None if get("JOB_COMPLETION_INDEX").is_some_and(|i| !i.trim().is_empty()) => {
                let i = get("JOB_COMPLETION_INDEX").unwrap_or_default();
                if parse_count("JOB_COMPLETION_INDEX", &i, 0)? == 0 {
                    StoreHost::Yes
                } else {
                    StoreHost::No
                }
            }
            None if is_loopback(&s.endpoint_host) => StoreHost::IfFree,
            None if names_this_machine(&s.endpoint_host) => StoreHost::Yes,
            None => StoreHost::No,
        };
        Ok(Some(s))
    }

    /// Applies torch's `--rdzv-conf` list (`key=value,...`).
    fn apply_conf(&mut self, conf: &str) -> Result<(), RendezvousError> {
        for pair in conf.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                invalid(
                    "PET_RDZV_CONF",
                    conf,
                    format!("{pair:?}: expected key=value"),
                )
            })?;
            match k.trim() {
                "join_timeout" => self.join_timeout = seconds("PET_RDZV_CONF", v, k)?,
                "last_call_timeout" => self.last_call = seconds("PET_RDZV_CONF", v, k)?,
                "keep_alive_interval" => self.keep_alive_interval = seconds("PET_RDZV_CONF", v, k)?,
                "keep_alive_max_attempt" => {
                    self.keep_alive_max_attempt =
                        v.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                            invalid(
                                "PET_RDZV_CONF",
                                conf,
                                "keep_alive_max_attempt: expected a whole number ≥ 1",
                            )
                        })?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The store's `host:port`: `PET_RDZV_ENDPOINT`, else `PET_MASTER_ADDR:PET_MASTER_PORT`.
fn endpoint(get: &impl Fn(&str) -> Option<String>) -> Result<(String, u16), RendezvousError> {
    Ok(match get("PET_RDZV_ENDPOINT") {
        Some(endpoint) => {
            let (h, p) = endpoint
                .trim()
                .rsplit_once(':')
                .ok_or_else(|| invalid("PET_RDZV_ENDPOINT", &endpoint, "expected host:port"))?;
            let h = h.trim_start_matches('[').trim_end_matches(']');
            if h.is_empty() {
                return Err(invalid("PET_RDZV_ENDPOINT", &endpoint, "the host is empty"));
            }
            (h.to_string(), parse_port("PET_RDZV_ENDPOINT", p)?)
        }
        None => {
            let needs = "PET_NNODES and PET_RDZV_ENDPOINT, or PET_MASTER_ADDR and PET_MASTER_PORT";
            let missing = |var| RendezvousError::Missing {
                var,
                flavour: EnvFlavour::Torch,
                needs,
            };
            let h = get("PET_MASTER_ADDR").ok_or_else(|| missing("PET_MASTER_ADDR"))?;
            let p = get("PET_MASTER_PORT").ok_or_else(|| missing("PET_MASTER_PORT"))?;
            (h.trim().to_string(), parse_port("PET_MASTER_PORT", &p)?)
        }
    })
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether `host` is this machine's host name (or its first label, as a pod's DNS name starts).
fn names_this_machine(host: &str) -> bool {
    let Ok(me) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
        return false;
    };
    let me = me.trim();
    !me.is_empty() && (host == me || host.split('.').next() == Some(me))
}

/// Agent → store.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Hello {
        v: u32,
        run_id: String,
        min: usize,
        max: usize,
    },
    Join {
        port: u16,
    },
    Beat {
        generation: u64,
    },
    Done,
}

/// Store → agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Reply {
    Welcome,
    Round {
        generation: u64,
        node_rank: usize,
        nnodes: usize,
        master_addr: String,
        master_port: u16,
    },
    Ok,
    Reform,
    Done,
    Error {
        message: String,
    },
}

struct Member {
    /// The node's address as the store saw its connection.
    peer: IpAddr,
    /// The store's address on that connection (what the node reached it at).
    local: IpAddr,
    writer: TcpStream,
    /// Port of the listener the node offers for the ranks' exchange when it is rank 0 of a round.
    port: u16,
    waiting_since: Option<Instant>,
    /// Arrival order, for the ranks of newcomers.
    seq: u64,
    last_rank: Option<usize>,
    last_beat: Instant,
    finished: bool,
}

#[derive(Default)]
struct State {
    generation: u64,
    members: BTreeMap<u64, Member>,
    next_id: u64,
    /// When the `min`-th waiting node arrived (the last call runs from then).
    quorum_since: Option<Instant>,
    /// The members of the current round, in rank order.
    round: Vec<u64>,
    stale: bool,
    done: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    settings: ElasticSettings,
    shutdown: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The store of an elastic rendezvous: a thread that accepts agents and one thread per connected agent.
/// Dropping it stops the threads and closes every connection.
pub struct ElasticStore {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ElasticStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElasticStore")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ElasticStore {
    /// Serves the rendezvous on `listener` with `settings` (its node bounds, run id and timeouts).
    pub fn serve(
        listener: TcpListener,
        settings: ElasticSettings,
    ) -> Result<Self, RendezvousError> {
        let addr = listener
            .local_addr()
            .map_err(|e| io("read the elastic store's address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io("configure the elastic store", e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            settings,
            shutdown: AtomicBool::new(false),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("rdzv-store".into())
            .spawn(move || accept_loop(&listener, &s))
            .map_err(|e| io("start the elastic store", e))?;
        Ok(ElasticStore {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where the store listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The last round's number (0 before the first round closes).
    pub fn generation(&self) -> u64 {
        self.shared.lock().generation
    }

    /// Blocks until a round numbered at least `generation` has closed, for at most `timeout`; returns its
    /// size, or `None` on timeout. For tests and tools that watch the group.
    pub fn wait_for_generation(&self, generation: u64, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while st.generation < generation {
            let left = deadline.checked_duration_since(Instant::now())?;
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Some(st.round.len())
    }
}

impl Drop for ElasticStore {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for m in self.shared.lock().members.values() {
            let _ = m.writer.shutdown(std::net::Shutdown::Both);
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn io(context: &str, source: std::io::Error) -> RendezvousError {
    RendezvousError::Io {
        context: context.to_string(),
        source,
    }
}

fn send(mut stream: &TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let s = shared.clone();
                if let Ok(h) = std::thread::Builder::new()
                    .name("rdzv-conn".into())
                    .spawn(move || serve_agent(stream, peer, &s))
                {
                    handlers.push(h);
                }
                handlers.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Non-blocking accept: look again after a tick (and notice the shutdown).
                std::thread::park_timeout(TICK);
            }
            Err(_) => std::thread::park_timeout(TICK),
        }
    }
    for h in handlers {
        let _ = h.join();
    }
}

/// One line of at most [`MAX_LINE`] bytes; `Ok(None)` when the read timed out with nothing read.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    partial: &mut Vec<u8>,
) -> std::io::Result<Option<Vec<u8>>> {
    loop {
        let mut limited = reader.by_ref().take(MAX_LINE - partial.len() as u64);
        match limited.read_until(b'\n', partial) {
            Ok(0) if partial.len() as u64 >= MAX_LINE => {
                return Err(std::io::Error::new(ErrorKind::InvalidData, "line too long"));
            }
            Ok(0) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "closed")),
            Ok(_) if partial.ends_with(b"\n") => return Ok(Some(std::mem::take(partial))),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
}

fn serve_agent(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let cfg = &shared.settings;
    let (Ok(writer), Ok(local)) = (stream.try_clone(), stream.local_addr()) else {
        return;
    };
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut reader = BufReader::new(stream);
    let mut partial = Vec::new();
    // The hello, within the join timeout.
    let opened = Instant::now();
    let hello = loop {
        match read_request(&mut reader, &mut partial) {
            Ok(Some(line)) => break line,
            Ok(None)
                if opened.elapsed() < cfg.join_timeout
                    && !shared.shutdown.load(Ordering::SeqCst) => {}
            _ => return,
        }
    };
    if let Err(message) = check_hello(&hello, cfg) {
        let _ = send(&writer, &Reply::Error { message });
        return;
    }
    let id = {
        let mut st = shared.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.members.insert(
            id,
            Member {
                peer: peer.ip(),
                local: local.ip(),
                writer: match writer.try_clone() {
                    Ok(w) => w,
                    Err(_) => return,
                },
                port: 0,
                waiting_since: None,
                seq: id,
                last_rank: None,
                last_beat: Instant::now(),
                finished: false,
            },
        );
        id
    };
    if send(&writer, &Reply::Welcome).is_err() {
        leave(shared, id);
        return;
    }
    let gone = 'conn: loop {
        if shared.shutdown.load(Ordering::SeqCst) {
            break 'conn None;
        }
        let line = match read_request(&mut reader, &mut partial) {
            Ok(Some(line)) => line,
            Ok(None) => {
                if let Some(why) = tick(shared, id) {
                    break 'conn Some(why);
                }
                continue;
            }
            Err(_) => break 'conn None,
        };
        let Ok(request) = serde_json::from_slice::<Request>(&line) else {
            let _ = send(
                &writer,
                &Reply::Error {
                    message: "not an elastic rendezvous request".into(),
                },
            );
            break 'conn None;
        };
        handle(shared, id, &writer, request);
    };
    if let Some(message) = gone {
        let _ = send(&writer, &Reply::Error { message });
    }
    leave(shared, id);
}

/// Answers one request of member `id`.
fn handle(shared: &Shared, id: u64, writer: &TcpStream, request: Request) {
    let cfg = &shared.settings;
    let mut st = shared.lock();
    let in_round = st.round.contains(&id);
    let done = st.done;
    match request {
        Request::Hello { .. } => {}
        Request::Join { port } => {
            if done {
                let _ = send(writer, &Reply::Done);
                return;
            }
            // A member that leaves its round, or a newcomer while the round has room, re-forms it.
            if in_round || (!st.round.is_empty() && st.round.len() < cfg.max_nodes) {
                st.stale = true;
            }
            if let Some(m) = st.members.get_mut(&id) {
                m.port = port;
                m.waiting_since = Some(Instant::now());
            }
            try_close(&mut st, cfg);
            shared.changed.notify_all();
        }
        Request::Beat { generation } => {
            if let Some(m) = st.members.get_mut(&id) {
                m.last_beat = Instant::now();
            }
            let reply = if done {
                Reply::Done
            } else if !in_round || generation != st.generation || st.stale {
                Reply::Reform
            } else {
                Reply::Ok
            };
            let _ = send(writer, &reply);
        }
        Request::Done => {
            st.done = true;
            if let Some(m) = st.members.get_mut(&id) {
                m.finished = true;
            }
            let _ = send(writer, &Reply::Ok);
            // Whoever still waits for a round learns that there will be none.
            for m in st.members.values_mut() {
                if m.waiting_since.take().is_some() {
                    let _ = send(&m.writer, &Reply::Done);
                }
            }
            shared.changed.notify_all();
        }
    }
}

/// Why a hello is refused (another protocol, job or node range), if it is.
fn check_hello(hello: &[u8], cfg: &ElasticSettings) -> Result<(), String> {
    match serde_json::from_slice::<Request>(hello) {
        Ok(Request::Hello {
            v,
            run_id,
            min,
            max,
        }) => {
            if v != PROTOCOL {
                Err(format!(
                    "the agent speaks elastic rendezvous protocol {v}, the store {PROTOCOL}"
                ))
            } else if run_id != cfg.run_id {
                Err(format!(
                    "the agent belongs to job {run_id:?}, this store to {:?} (PET_RDZV_ID)",
                    cfg.run_id
                ))
            } else if (min, max) != (cfg.min_nodes, cfg.max_nodes) {
                Err(format!(
                    "the agent was started with PET_NNODES={min}:{max}, the store with {}:{}",
                    cfg.min_nodes, cfg.max_nodes
                ))
            } else {
                Ok(())
            }
        }
        _ => Err("not an elastic rendezvous hello".into()),
    }
}

/// The clock's part: a waiting member's join timeout, a member's keep-alives, the last call. `Some(why)`
/// drops the member.
fn tick(shared: &Shared, id: u64) -> Option<String> {
    let cfg = &shared.settings;
    let mut st = shared.lock();
    let in_round = st.round.contains(&id);
    let waiting = st.members.get(&id)?.waiting_since;
    if let Some(since) = waiting {
        if since.elapsed() >= cfg.join_timeout {
            let arrived = st
                .members
                .values()
                .filter(|m| m.waiting_since.is_some())
                .count();
            return Some(format!(
                "rendezvous round {} did not close within {:?}: {arrived} node(s) arrived, it needs at least {} \
                 (PET_NNODES={}:{})",
                st.generation + 1,
                cfg.join_timeout,
                cfg.min_nodes,
                cfg.min_nodes,
                cfg.max_nodes
            ));
        }
        if try_close(&mut st, cfg) {
            shared.changed.notify_all();
        }
        return None;
    }
    let m = st.members.get(&id)?;
    let allowed = cfg.keep_alive_interval * cfg.keep_alive_max_attempt.max(1);
    if in_round && !m.finished && !st.done && m.last_beat.elapsed() > allowed {
        return Some(format!(
            "no keep-alive for {:?} (keep_alive_interval {:?} × keep_alive_max_attempt {}): dropped from the group",
            m.last_beat.elapsed(),
            cfg.keep_alive_interval,
            cfg.keep_alive_max_attempt
        ));
    }
    None
}

/// Forgets a member whose connection ended; a member of the current round that had not finished makes
/// the round stale.
fn leave(shared: &Shared, id: u64) {
    let mut st = shared.lock();
    let Some(m) = st.members.remove(&id) else {
        return;
    };
    let _ = m.writer.shutdown(std::net::Shutdown::Both);
    if st.round.contains(&id) && !m.finished && !st.done {
        st.stale = true;
    }
    try_close(&mut st, &shared.settings);
    shared.changed.notify_all();
}

/// Closes the round being formed if it may close now: `max` nodes wait, or at least `min` wait and the
/// last call has passed, and no live member of the old round is still to re-join. Returns whether it
/// closed.
fn try_close(st: &mut State, cfg: &ElasticSettings) -> bool {
    if st.done {
        return false;
    }
    let mut waiting: Vec<(u64, Option<usize>, u64)> = st
        .members
        .iter()
        .filter(|(_, m)| m.waiting_since.is_some())
        .map(|(id, m)| (*id, m.last_rank, m.seq))
        .collect();
    let n = waiting.len();
    if n < cfg.min_nodes {
        st.quorum_since = None;
        return false;
    }
    let quorum_since = *st.quorum_since.get_or_insert_with(Instant::now);
    let expecting = st.round.iter().any(|id| {
        st.members
            .get(id)
            .is_some_and(|m| m.waiting_since.is_none() && !m.finished)
    });
    // A healthy full round keeps training; newcomers beyond max wait for a place.
    if expecting || (n < cfg.max_nodes && quorum_since.elapsed() < cfg.last_call) {
        return false;
    }
    // Survivors keep their order; newcomers follow in arrival order.
    waiting.sort_by_key(|(_, last, seq)| (last.is_none(), *last, *seq));
    waiting.truncate(cfg.max_nodes);
    st.generation += 1;
    st.stale = false;
    st.quorum_since = None;
    st.round = waiting.iter().map(|(id, _, _)| *id).collect();
    let leader = &st.members[&st.round[0]];
    let (leader_peer, leader_port) = (leader.peer, leader.port);
    let nnodes = st.round.len();
    for (rank, id) in st.round.clone().into_iter().enumerate() {
        let Some(m) = st.members.get_mut(&id) else {
            continue;
        };
        m.waiting_since = None;
        m.last_rank = Some(rank);
        m.last_beat = Instant::now();
        // A leader on the store's own machine (loopback) is reached where this member reached the store.
        let addr = if leader_peer.is_loopback() {
            m.local
        } else {
            leader_peer
        };
        let _ = send(
            &m.writer,
            &Reply::Round {
                generation: st.generation,
                node_rank: rank,
                nnodes,
                master_addr: addr.to_string(),
                master_port: leader_port,
            },
        );
    }
    true
}

/// One round as this node sees it: its node rank, the group's size, where rank 0's exchange meets.
#[derive(Debug)]
pub struct Round {
    /// The round's number (torch's generation), from 1.
    pub generation: u64,
    /// This node's rank in the round.
    pub node_rank: usize,
    /// Nodes in the round.
    pub nnodes: usize,
    /// Host of the round's rank 0.
    pub master_addr: String,
    /// Port of rank 0's exchange.
    pub master_port: u16,
    /// Rounds this agent joined before this one (its restarts).
    pub restarts: u32,
    /// Rank 0's listener for the exchange (this node's, when it is rank 0 of the round).
    pub store: Option<TcpListener>,
}

impl Round {
    /// The rank environment of this round (one process per node), for [`super::exchange`] and the
    /// communicators.
    pub fn rank_env(&self) -> RankEnv {
        RankEnv {
            rank: self.node_rank,
            world_size: self.nnodes,
            local_rank: 0,
            local_world_size: 1,
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
            flavour: EnvFlavour::Torch,
        }
    }
}

#[derive(Default)]
struct AgentState {
    generation: u64,
    in_round: bool,
    changed: bool,
    lost: Option<String>,
    stop: bool,
}

struct AgentShared {
    state: Mutex<AgentState>,
    cv: Condvar,
}

impl AgentShared {
    fn lock(&self) -> MutexGuard<'_, AgentState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn request(&mut self, req: &Request) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.stream.write_all(&line)
    }

    fn reply(&mut self, timeout: Duration) -> std::io::Result<Reply> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut line = String::new();
        (&mut self.reader).take(MAX_LINE).read_line(&mut line)?;
        if !line.ends_with('\n') {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "the store closed the connection",
            ));
        }
        serde_json::from_str(&line).map_err(|_| {
            std::io::Error::new(
                ErrorKind::InvalidData,
                "the store sent an unexpected answer",
            )
        })
    }
}

/// A node's side of the elastic rendezvous: hosts the store if this node is the host, keeps one connection
/// to it, joins rounds and sends keep-alives from a thread of its own while in a round.
pub struct ElasticAgent {
    settings: ElasticSettings,
    store: Option<ElasticStore>,
    conn: Arc<Mutex<Conn>>,
    /// The connection, to shut it down without waiting for a keep-alive in flight.
    closer: TcpStream,
    shared: Arc<AgentShared>,
    beater: Option<JoinHandle<()>>,
    rounds: u32,
    target: String,
}

impl std::fmt::Debug for ElasticAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElasticAgent")
            .field("store", &self.target)
            .field("rounds", &self.rounds)
            .finish()
    }
}

impl ElasticAgent {
    /// Hosts the store when this node is the host (binding `0.0.0.0:<port>`, or `store` when given), then
    /// connects to it (retrying until the join timeout) and says hello.
    pub fn start(
        settings: ElasticSettings,
        store: Option<TcpListener>,
    ) -> Result<Self, RendezvousError> {
        let hosted = match (store, settings.host) {
            (Some(l), _) => Some(ElasticStore::serve(l, settings.clone())?),
            (None, StoreHost::Yes) => {
                let addr =
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), settings.endpoint_port);
                let l = TcpListener::bind(addr)
                    .map_err(|e| io(&format!("bind the elastic rendezvous store on {addr}"), e))?;
                Some(ElasticStore::serve(l, settings.clone())?)
            }
            (None, StoreHost::IfFree) => {
                match TcpListener::bind((settings.endpoint_host.as_str(), settings.endpoint_port)) {
                    Ok(l) => Some(ElasticStore::serve(l, settings.clone())?),
                    // Another node hosts it.
                    Err(e) if e.kind() == ErrorKind::AddrInUse => None,
                    Err(e) => return Err(io("bind the elastic rendezvous store", e)),
                }
            }
            (None, StoreHost::No) => None,
        };
        let target = format!("{}:{}", settings.endpoint_host, settings.endpoint_port);
        let stream = connect(&target, settings.join_timeout)?;
        let reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| io("clone the rendezvous connection", e))?,
        );
        let closer = stream
            .try_clone()
            .map_err(|e| io("clone the rendezvous connection", e))?;
        let mut conn = Conn { stream, reader };
        conn.request(&Request::Hello {
            v: PROTOCOL,
            run_id: settings.run_id.clone(),
            min: settings.min_nodes,
            max: settings.max_nodes,
        })
        .map_err(|e| io(&format!("say hello to the elastic store at {target}"), e))?;
        match conn.reply(settings.join_timeout) {
            Ok(Reply::Welcome) => {}
            Ok(Reply::Error { message }) => {
                return Err(RendezvousError::Rejected(format!(
                    "the elastic store at {target} refused: {message}"
                )));
            }
            Ok(other) => {
                return Err(RendezvousError::Rejected(format!(
                    "the elastic store at {target} answered the hello with {other:?}"
                )));
            }
            Err(e) => return Err(io(&format!("hello to the elastic store at {target}"), e)),
        }
        let conn = Arc::new(Mutex::new(conn));
        let shared = Arc::new(AgentShared {
            state: Mutex::new(AgentState::default()),
            cv: Condvar::new(),
        });
        let beater = {
            let (conn, shared, settings) = (conn.clone(), shared.clone(), settings.clone());
            std::thread::Builder::new()
                .name("rdzv-keepalive".into())
                .spawn(move || keep_alive(&conn, &shared, &settings))
                .map_err(|e| io("start the keep-alive thread", e))?
        };
        Ok(ElasticAgent {
            settings,
            store: hosted,
            conn,
            closer,
            shared,
            beater: Some(beater),
            rounds: 0,
            target,
        })
    }

    /// The store this agent hosts, if it does.
    pub fn hosted_store(&self) -> Option<&ElasticStore> {
        self.store.as_ref()
    }

    /// Leaves the current round (if any) and waits for the next one to close; `Ok(None)` when the job has
    /// finished meanwhile (another node reported [`ElasticAgent::finish`]). Fails after the join timeout
    /// (too few nodes), when the store is gone, or past `max_restarts`.
    pub fn next_round(&mut self) -> Result<Option<Round>, RendezvousError> {
        if self.rounds > self.settings.max_restarts {
            return Err(RendezvousError::Rejected(format!(
                "the group re-formed {} times, more than PET_MAX_RESTARTS={}",
                self.rounds - 1,
                self.settings.max_restarts
            )));
        }
        {
            let mut st = self.shared.lock();
            st.in_round = false;
            st.changed = false;
        }
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .map_err(|e| io("bind a listener for the ranks' exchange", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| io("read the exchange listener's address", e))?
            .port();
        let mut conn = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let target = &self.target;
        conn.request(&Request::Join { port })
            .map_err(|e| self.lost(&format!("join a round at the elastic store at {target}"), e))?;
        let reply = conn.reply(self.settings.join_timeout + Duration::from_secs(5));
        drop(conn);
        match reply {
            Ok(Reply::Round {
                generation,
                node_rank,
                nnodes,
                master_addr,
                master_port,
            }) => {
                let restarts = self.rounds;
                self.rounds += 1;
                {
                    let mut st = self.shared.lock();
                    st.generation = generation;
                    st.in_round = true;
                    st.changed = false;
                }
                self.shared.cv.notify_all();
                Ok(Some(Round {
                    generation,
                    node_rank,
                    nnodes,
                    master_addr,
                    master_port,
                    restarts,
                    store: (node_rank == 0).then_some(listener),
                }))
            }
            Ok(Reply::Done) => Ok(None),
            Ok(Reply::Error { message }) => Err(RendezvousError::Rejected(message)),
            Ok(other) => Err(RendezvousError::Rejected(format!(
                "the elastic store at {target} answered a join with {other:?}"
            ))),
            Err(e) => Err(self.lost(
                &format!("wait for a round at the elastic store at {target}"),
                e,
            )),
        }
    }

    fn lost(&self, what: &str, e: std::io::Error) -> RendezvousError {
        RendezvousError::Rejected(format!(
            "{what}: {e} (the store lives in the process of the node that hosts it; when that node is lost the \
             elastic job ends, as with torch's c10d rendezvous)"
        ))
    }

    /// Whether the current round is stale: a node was lost, one waits to be admitted, or the connection to
    /// the store is gone. The training loop checks it between steps and, when set, leaves at a step every
    /// rank agrees on and calls [`ElasticAgent::next_round`].
    pub fn membership_changed(&self) -> bool {
        self.shared.lock().changed
    }

    /// Waits up to `timeout` for [`ElasticAgent::membership_changed`] to become true.
    pub fn wait_for_change(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while !st.changed {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            st = self
                .shared
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Why the connection to the store was lost, if it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.shared.lock().lost.clone()
    }

    /// Tells the store that the job finished: nodes that leave from now on do not re-form the group. A store
    /// already gone is no error: its host ends once it has finished too (or was lost), and nobody is left
    /// to tell.
    pub fn finish(&mut self) -> Result<(), RendezvousError> {
        self.shared.lock().in_round = false;
        let mut conn = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match conn.request(&Request::Done) {
            Ok(()) => {}
            Err(e) if closed_by_peer(&e) => return Ok(()),
            Err(e) => return Err(io("tell the elastic store the job finished", e)),
        }
        // The answer (or the end of the store's process) is enough.
        let _ = conn.reply(Duration::from_secs(5));
        Ok(())
    }
}

impl Drop for ElasticAgent {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.cv.notify_all();
        let _ = self.closer.shutdown(std::net::Shutdown::Both);
        if let Some(b) = self.beater.take() {
            let _ = b.join();
        }
        // The hosted store goes last, so that the other nodes see this node leave before the store ends.
        self.store.take();
    }
}

/// Whether `e` says the other end of a connection has closed it.
fn closed_by_peer(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::UnexpectedEof
    )
}

fn connect(target: &str, timeout: Duration) -> Result<TcpStream, RendezvousError> {
    let start = Instant::now();
    loop {
        let attempt = target
            .to_socket_addrs()
            .and_then(|mut a| {
                a.next()
                    .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address"))
            })
            .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)));
        match attempt {
            Ok(s) => return Ok(s),
            // The host node may not be up yet: retry until the deadline.
            Err(_) if start.elapsed() < timeout => {
                std::thread::park_timeout(Duration::from_millis(50))
            }
            Err(e) => {
                return Err(RendezvousError::Unreachable {
                    addr: target.to_string(),
                    waited: start.elapsed(),
                    last_error: e.to_string(),
                });
            }
        }
    }
}

fn keep_alive(conn: &Mutex<Conn>, shared: &AgentShared, settings: &ElasticSettings) {
    loop {
        let generation = {
            let st = shared.lock();
            let st = shared
                .cv
                .wait_timeout_while(st, settings.keep_alive_interval, |s| !s.stop)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            if st.stop {
                return;
            }
            if !st.in_round {
                continue;
            }
            st.generation
        };
        let mut c = conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A join may have started while this thread waited for the connection.
        if !shared.lock().in_round {
            continue;
        }
        let answer = c.request(&Request::Beat { generation }).and_then(|()| {
            c.reply(settings.keep_alive_interval * settings.keep_alive_max_attempt.max(1))
        });
        drop(c);
        let mut st = shared.lock();
        match answer {
            Ok(Reply::Ok | Reply::Done) => {}
            Ok(Reply::Reform) => st.changed = true,
            Ok(Reply::Error { message }) => {
                st.lost = Some(message);
                st.changed = true;
            }
            Ok(_) => {}
            Err(e) => {
                st.lost = Some(format!("the elastic store stopped answering: {e}"));
                st.changed = true;
            }
        }
        let stop = st.lost.is_some();
        drop(st);
        shared.cv.notify_all();
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> Result<Option<ElasticSettings>, RendezvousError> {
        ElasticSettings::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn static_counts_are_not_elastic() {
        assert_eq!(lookup(&[("PET_NNODES", "3")]).unwrap(), None);
        assert_eq!(lookup(&[("PET_NNODES", "3:3")]).unwrap(), None);
        assert_eq!(lookup(&[]).unwrap(), None);
    }

    #[test]
    fn torchrun_c10d_env_is_read() {
        let s = lookup(&[
            ("PET_NNODES", "1:3"),
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_NODE_RANK", "0"),
            ("PET_MASTER_ADDR", "m"),
            ("PET_MASTER_PORT", "29500"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ID", "ns/job"),
            ("PET_MAX_RESTARTS", "7"),
            ("PET_RDZV_CONF", "join_timeout=9, last_call_timeout=0.5,keep_alive_interval=0.2,keep_alive_max_attempt=4,read_timeout=60"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((s.min_nodes, s.max_nodes), (1, 3));
        assert_eq!((s.endpoint_host.as_str(), s.endpoint_port), ("m", 29500));
        assert_eq!(
            (s.run_id.as_str(), s.max_restarts, s.host),
            ("ns/job", 7, StoreHost::Yes)
        );
        assert_eq!(s.join_timeout, Duration::from_secs(9));
        assert_eq!(s.last_call, Duration::from_millis(500));
        assert_eq!(s.keep_alive_interval, Duration::from_millis(200));
        assert_eq!(s.keep_alive_max_attempt, 4);
        // The endpoint wins over the master address; without a node rank a loopback endpoint is first-come.
        let s = lookup(&[
            ("PET_NNODES", "2:4"),
            ("PET_RDZV_ENDPOINT", "127.0.0.1:4000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.endpoint_port, s.host, s.max_restarts),
            (4000, StoreHost::IfFree, DEFAULT_MAX_RESTARTS)
        );
        // What the torch plugin renders for an elastic policy (no PET_NODE_RANK): the Indexed Job's pod 0
        // hosts the store.
        let rendered = |index: &'static str| {
            lookup(&[
                ("PET_NNODES", "2:4"),
                ("PET_NPROC_PER_NODE", "1"),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_RDZV_ENDPOINT", "job-node-0-0.job:29500"),
                ("PET_RDZV_ID", "job"),
                ("JOB_COMPLETION_INDEX", index),
            ])
            .unwrap()
            .unwrap()
            .host
        };
        assert_eq!(
            (rendered("0"), rendered("2")),
            (StoreHost::Yes, StoreHost::No)
        );
    }

    #[test]
    fn bad_elastic_env_names_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("PET_NNODES", "4:2")],
                "PET_NNODES=\"4:2\": the minimum 4 is above the maximum 2",
            ),
            (
                &[("PET_NNODES", "1:2"), ("PET_RDZV_BACKEND", "etcd")],
                "c10d only",
            ),
            (
                &[("PET_NNODES", "1:2"), ("PET_NPROC_PER_NODE", "4")],
                "one process per node",
            ),
            (&[("PET_NNODES", "1:2")], "PET_MASTER_ADDR is not set"),
            (
                &[("PET_NNODES", "1:2"), ("PET_RDZV_ENDPOINT", "nohost")],
                "expected host:port",
            ),
            (
                &[
                    ("PET_NNODES", "1:2"),
                    ("PET_RDZV_ENDPOINT", "h:1"),
                    ("PET_RDZV_CONF", "join_timeout=-1"),
                ],
                "join_timeout: expected a positive number of seconds",
            ),
            (
                &[
                    ("PET_NNODES", "1:2"),
                    ("PET_RDZV_ENDPOINT", "h:1"),
                    ("PET_MAX_RESTARTS", "x"),
                ],
                "PET_MAX_RESTARTS",
            ),
        ];
        for (vars, want) in cases {
            let err = lookup(vars).unwrap_err().to_string();
            assert!(err.contains(want), "{vars:?}: {err}");
        }
    }

    #[test]
    fn the_static_path_points_elastic_ranges_to_the_agent() {
        let vars = [
            ("PET_NNODES", "1:4"),
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_NODE_RANK", "0"),
            ("PET_MASTER_ADDR", "m"),
            ("PET_MASTER_PORT", "1"),
        ];
        let err = RankEnv::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap_err();
        assert!(
            matches!(err, RendezvousError::Elastic { min: 1, max: 4 }),
            "{err}"
        );
    }

    fn settings(min: usize, max: usize, port: u16) -> ElasticSettings {
        ElasticSettings {
            min_nodes: min,
            max_nodes: max,
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: port,
            run_id: "test".into(),
            max_restarts: 10,
            join_timeout: Duration::from_secs(20),
            last_call: Duration::from_millis(300),
            keep_alive_interval: Duration::from_millis(50),
            keep_alive_max_attempt: 3,
            host: StoreHost::No,
        }
    }

    /// A hosting agent and `others` more, every one joining its first round on a thread of its own.
    fn group(min: usize, max: usize, others: usize) -> (Vec<ElasticAgent>, Vec<Round>, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let host = ElasticAgent::start(settings(min, max, port), Some(listener)).unwrap();
        let mut agents = vec![host];
        for _ in 0..others {
            agents.push(ElasticAgent::start(settings(min, max, port), None).unwrap());
        }
        let (agents, rounds) = all_join(agents);
        (agents, rounds, port)
    }

    fn all_join(agents: Vec<ElasticAgent>) -> (Vec<ElasticAgent>, Vec<Round>) {
        let handles: Vec<_> = agents
            .into_iter()
            .map(|mut a| {
                std::thread::spawn(move || {
                    let r = a.next_round().unwrap().expect("a round");
                    (a, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).unzip()
    }

    /// Every rank of a round meets the others through the round's rank 0 (what the communicators do).
    fn exchange_all(rounds: &mut [Round]) {
        let handles: Vec<_> = rounds
            .iter_mut()
            .map(|r| {
                let (env, store) = (r.rank_env(), r.store.take());
                std::thread::spawn(move || {
                    super::super::exchange(&env, store, 1, false, vec![], Duration::from_secs(10))
                })
            })
            .collect();
        let sessions: Vec<u64> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap().session)
            .collect();
        assert!(sessions.windows(2).all(|w| w[0] == w[1]), "{sessions:?}");
    }

    fn ranks(rounds: &[Round]) -> Vec<(u64, usize, usize)> {
        let mut v: Vec<_> = rounds
            .iter()
            .map(|r| (r.generation, r.node_rank, r.nnodes))
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_full_group_closes_at_once_and_reforms_without_a_lost_node_and_with_a_new_one() {
        let (mut agents, mut rounds, port) = group(2, 3, 2);
        assert_eq!(ranks(&rounds), vec![(1, 0, 3), (1, 1, 3), (1, 2, 3)]);
        exchange_all(&mut rounds);
        // Node 2 is lost (its process ends: the connection closes); the survivors notice by keep-alive.
        let lost = rounds.iter().position(|r| r.node_rank == 2).unwrap();
        drop(agents.remove(lost));
        rounds.remove(lost);
        for a in &agents {
            assert!(
                a.wait_for_change(Duration::from_secs(10)),
                "a survivor never saw the loss"
            );
        }
        let (mut agents, mut rounds) = all_join(agents);
        // The survivors keep their order, at n-1 >= min, after the last call.
        assert_eq!(ranks(&rounds), vec![(2, 0, 2), (2, 1, 2)]);
        assert!(rounds.iter().all(|r| r.restarts == 1));
        exchange_all(&mut rounds);
        // A new node arrives: the group re-forms with it at the next round, and it is full again.
        let newcomer = ElasticAgent::start(settings(2, 3, port), None).unwrap();
        let waiting = std::thread::spawn(move || {
            let mut n = newcomer;
            let r = n.next_round().unwrap().unwrap();
            (n, r)
        });
        for a in &agents {
            assert!(
                a.wait_for_change(Duration::from_secs(10)),
                "nobody saw the newcomer"
            );
        }
        let (again, mut next) = all_join(agents);
        agents = again;
        let (n, r) = waiting.join().unwrap();
        agents.push(n);
        next.push(r);
        assert_eq!(ranks(&next), vec![(3, 0, 3), (3, 1, 3), (3, 2, 3)]);
        // The newcomer follows the survivors.
        assert_eq!(next.last().unwrap().node_rank, 2);
        exchange_all(&mut next);
        assert_eq!(agents[0].hosted_store().unwrap().generation(), 3);
        // The job ends: a node that leaves afterwards does not re-form the group, a late one hears it is done.
        agents[0].finish().unwrap();
        drop(agents.pop());
        assert!(!agents[1].wait_for_change(Duration::from_millis(300)));
        let mut late = ElasticAgent::start(settings(2, 3, port), None).unwrap();
        assert!(late.next_round().unwrap().is_none());
    }

    #[test]
    fn below_the_minimum_the_round_never_closes_and_says_how_many_came() {
        let (mut agents, _rounds, _) = group(2, 2, 1);
        drop(agents.pop());
        let survivor = agents.pop().unwrap();
        assert!(survivor.wait_for_change(Duration::from_secs(10)));
        // Alone below the minimum: a store with a short join timeout says so.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut cfg = settings(2, 3, port);
        cfg.join_timeout = Duration::from_millis(400);
        let mut lonely = ElasticAgent::start(cfg, Some(listener)).unwrap();
        let err = lonely.next_round().unwrap_err().to_string();
        assert!(
            err.contains("1 node(s) arrived, it needs at least 2 (PET_NNODES=2:3)"),
            "{err}"
        );
    }

    #[test]
    fn a_node_that_stops_sending_keep_alives_is_dropped() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut host = ElasticAgent::start(settings(1, 2, port), Some(listener)).unwrap();
        // A hung node: it joins, then never speaks again (its connection stays open).
        let hung = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            for line in [
                r#"{"op":"hello","v":1,"run_id":"test","min":1,"max":2}"#,
                r#"{"op":"join","port":9}"#,
            ] {
                s.write_all(line.as_bytes()).unwrap();
                s.write_all(b"\n").unwrap();
            }
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut lines = Vec::new();
            loop {
                let mut l = String::new();
                if r.read_line(&mut l).unwrap_or(0) == 0 {
                    break lines;
                }
                lines.push(l);
            }
        });
        let round = host.next_round().unwrap().unwrap();
        assert_eq!(round.nnodes, 2);
        assert!(
            host.wait_for_change(Duration::from_secs(10)),
            "the hung node was never dropped"
        );
        let said = hung.join().unwrap();
        assert!(said.last().unwrap().contains("no keep-alive"), "{said:?}");
        let round = host.next_round().unwrap().unwrap();
        assert_eq!((round.generation, round.nnodes), (2, 1));
    }

    #[test]
    fn finishing_after_the_host_has_finished_and_ended_succeeds() {
        let (mut agents, mut rounds, _) = group(2, 2, 1);
        exchange_all(&mut rounds);
        let mut other = agents.pop().unwrap();
        // The host finishes first and its process ends, taking the store with it.
        let mut host = agents.pop().unwrap();
        host.finish().unwrap();
        drop(host);
        // The other node learns the connection is gone (its keep-alive fails), then finishes too.
        assert!(other.wait_for_change(Duration::from_secs(10)));
        assert!(other.lost_reason().is_some());
        other.finish().unwrap();
    }

    #[test]
    fn an_agent_of_another_job_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _host = ElasticAgent::start(settings(1, 2, port), Some(listener)).unwrap();
        let mut other = settings(1, 2, port);
        other.run_id = "another".into();
        let err = ElasticAgent::start(other, None).unwrap_err().to_string();
        assert!(err.contains("belongs to job \"another\""), "{err}");
        let err = ElasticAgent::start(settings(1, 3, port), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("PET_NNODES=1:3, the store with 1:2"), "{err}");
    }
}
