//! Rank 0's rendezvous store: every other rank connects, says who it is and where its data listener is;
//! once all have arrived rank 0 answers each with the full membership and its payload.
//!
//! Wire format: one JSON object per line in each direction; lines are capped so a stranger cannot make
//! rank 0 buffer without bound.

use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{RankEnv, RendezvousError};

const PROTOCOL: u32 = 1;
const MAX_LINE: u64 = 1 << 20;

/// One rank as the others see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Global rank.
    pub rank: usize,
    /// Identifies the host and its shared memory ([`host_key`]); equal keys can use shared memory.
    pub host: String,
    /// `ip:port` of the rank's data listener, as rank 0 saw the rank's address.
    pub addr: String,
    /// Process id (to notice a local peer that died).
    pub pid: u32,
    /// Whether the rank can create shared memory queues.
    pub shm: bool,
}

/// What this rank tells the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hello {
    v: u32,
    rank: usize,
    world_size: usize,
    host: String,
    data_port: u16,
    pid: u32,
    shm: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Reply {
    #[serde(rename = "ok")]
    Ok {
        session: u64,
        peers: Vec<PeerInfo>,
        payload: Vec<u8>,
    },
    #[serde(rename = "error")]
    Error(String),
}

/// The ranks that met, as every rank sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// This rank.
    pub rank: usize,
    /// A random id shared by the ranks of this meeting (names shared memory queues).
    pub session: u64,
    /// Every rank, indexed by rank.
    pub peers: Vec<PeerInfo>,
    /// Rank 0's payload (the NCCL unique id, or empty).
    pub payload: Vec<u8>,
}

/// A key that is equal exactly for processes that share a host's shared memory and process ids:
/// host name, boot id and the IPC and PID namespaces.
pub fn host_key() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .ok()
    };
    let link = |p: &str| std::fs::read_link(p).ok().map(|l| l.display().to_string());
    let host = read("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_string());
    let boot = read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ipc = link("/proc/self/ns/ipc").unwrap_or_default();
    let pid = link("/proc/self/ns/pid").unwrap_or_default();
    format!("{host}/{boot}/{ipc}/{pid}")
}

/// Meets the other ranks through rank 0's store and returns the membership.
///
/// Rank 0 serves the store on `store` if given (tests bind port 0), else binds `0.0.0.0:master_port`; the
/// other ranks retry connecting to `master_addr:master_port` until `timeout`. `data_port` is this rank's
/// data listener; `payload` (rank 0 only) is handed to every rank.
pub fn exchange(
    env: &RankEnv,
    store: Option<TcpListener>,
    data_port: u16,
    shm: bool,
    payload: Vec<u8>,
    timeout: Duration,
) -> Result<Membership, RendezvousError> {
    let hello = Hello {
        v: PROTOCOL,
        rank: env.rank,
        world_size: env.world_size,
        host: host_key(),
        data_port,
        pid: std::process::id(),
        shm,
    };
    if env.rank == 0 {
        let listener = match store {
            Some(l) => l,
            None => {
                let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), env.master_port);
                TcpListener::bind(addr)
                    .map_err(|e| io(format!("bind the rendezvous store on {addr}"), e))?
            }
        };
        serve(listener, env.world_size, hello, payload, timeout)
    } else {
        join(env, hello, timeout)
    }
}

fn io(context: String, source: std::io::Error) -> RendezvousError {
    RendezvousError::Io { context, source }
}

fn random_session() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn read_line(stream: &TcpStream) -> std::io::Result<String> {
    let mut line = String::new();
    BufReader::new(stream.take(MAX_LINE)).read_line(&mut line)?;
    if !line.ends_with('\n') {
        return Err(std::io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed before a full line",
        ));
    }
    Ok(line)
}

fn send_line<T: Serialize>(mut stream: &TcpStream, value: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

/// Reads a rank's hello on a new connection (blocking, for at most `remaining`); `None` for a connection
/// that sends no hello, which is told so when it sent a line.
fn read_hello(stream: &TcpStream, remaining: Duration) -> Option<Hello> {
    if stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(remaining)))
        .is_err()
    {
        return None;
    }
    let line = read_line(stream).ok()?;
    let Ok(hello) = serde_json::from_str::<Hello>(&line) else {
        let _ = send_line(
            stream,
            &Reply::Error("not a kubetrain rendezvous hello".into()),
        );
        return None;
    };
    Some(hello)
}

/// Why rank 0 refuses a hello (another protocol or world size, a rank out of range or taken), if it does.
fn hello_problem(hello: &Hello, world_size: usize, slots: &[Option<PeerInfo>]) -> Option<String> {
    if hello.v != PROTOCOL {
        Some(format!(
            "rank {} speaks rendezvous protocol {} but rank 0 speaks {PROTOCOL}",
            hello.rank, hello.v
        ))
    } else if hello.world_size != world_size {
        Some(format!(
            "rank {} was started with world size {} but rank 0 with {world_size}; every rank must see the same \
             WORLD_SIZE / PET_NNODES × PET_NPROC_PER_NODE / JAX_NUM_PROCESSES",
            hello.rank, hello.world_size
        ))
    } else if hello.rank == 0 || hello.rank >= world_size {
        Some(format!(
            "a second process claims rank {} of {world_size}",
            hello.rank
        ))
    } else if slots[hello.rank].is_some() {
        Some(format!(
            "two processes claim rank {}; check RANK / PET_NODE_RANK / LOCAL_RANK",
            hello.rank
        ))
    } else {
        None
    }
}

fn serve(
    listener: TcpListener,
    world_size: usize,
    mine: Hello,
    payload: Vec<u8>,
    timeout: Duration,
) -> Result<Membership, RendezvousError> {
    let start = Instant::now();
    let mut slots: Vec<Option<PeerInfo>> = vec![None; world_size];
    let mut streams: Vec<TcpStream> = Vec::new();
    let mut my_ip: Option<IpAddr> = None;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("configure the rendezvous store".into(), e))?;
    let fail = |streams: &[TcpStream], msg: String| {
        for s in streams {
            let _ = send_line(s, &Reply::Error(msg.clone()));
        }
        RendezvousError::Rejected(msg)
    };
    while streams.len() + 1 < world_size {
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if start.elapsed() >= timeout {
                    let missing = (1..world_size).filter(|&r| slots[r].is_none()).collect();
                    let err = RendezvousError::Incomplete {
                        waited: start.elapsed(),
                        missing,
                    };
                    let _ = fail(&streams, err.to_string());
                    return Err(err);
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(io("accept on the rendezvous store".into(), e)),
        };
        let remaining = timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        // A stranger (port scanner, health check) that sends nothing useful is dropped, not fatal.
        let Some(hello) = read_hello(&stream, remaining) else {
            continue;
        };
        let problem = hello_problem(&hello, world_size, &slots);
        streams.push(stream);
        if let Some(msg) = problem {
            return Err(fail(&streams, msg));
        }
        let stream = streams.last().expect("just pushed");
        my_ip.get_or_insert_with(|| {
            stream
                .local_addr()
                .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip())
        });
        slots[hello.rank] = Some(PeerInfo {
            rank: hello.rank,
            host: hello.host,
            addr: SocketAddr::new(peer.ip(), hello.data_port).to_string(),
            pid: hello.pid,
            shm: hello.shm,
        });
    }
    let ip = my_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    slots[0] = Some(PeerInfo {
        rank: 0,
        host: mine.host,
        addr: SocketAddr::new(ip, mine.data_port).to_string(),
        pid: mine.pid,
        shm: mine.shm,
    });
    let peers: Vec<PeerInfo> = slots
        .into_iter()
        .map(|p| p.expect("all ranks arrived"))
        .collect();
    let session = random_session();
    let reply = Reply::Ok {
        session,
        peers: peers.clone(),
        payload: payload.clone(),
    };
    for s in &streams {
        send_line(s, &reply)
            .map_err(|e| io("answer a rank from the rendezvous store".into(), e))?;
    }
    Ok(Membership {
        rank: 0,
        session,
        peers,
        payload,
    })
}

fn join(env: &RankEnv, hello: Hello, timeout: Duration) -> Result<Membership, RendezvousError> {
    let start = Instant::now();
    let target = format!("{}:{}", env.master_addr, env.master_port);
    let stream = loop {
        let attempt = target
            .to_socket_addrs()
            .and_then(|mut addrs| {
                addrs.next().ok_or_else(|| {
                    std::io::Error::new(ErrorKind::NotFound, "the name has no address")
                })
            })
            .and_then(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)));
        match attempt {
            Ok(s) => break s,
            // Rank 0 may not be up yet (or its DNS name not published yet): retry until the deadline.
            Err(e) if start.elapsed() < timeout => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(RendezvousError::Unreachable {
                    addr: target,
                    waited: start.elapsed(),
                    last_error: e.to_string(),
                });
            }
        }
    };
    let remaining = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(100));
    stream
        .set_read_timeout(Some(remaining))
        .map_err(|e| io("configure the rendezvous connection".into(), e))?;
    send_line(&stream, &hello)
        .map_err(|e| io(format!("register with the store at {target}"), e))?;
    let line = read_line(&stream).map_err(|e| {
        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            RendezvousError::Rejected(format!(
                "rank 0 did not answer within {timeout:?}: not every rank arrived (see rank 0's error)"
            ))
        } else {
            io(format!("read the membership from {target}"), e)
        }
    })?;
    match serde_json::from_str::<Reply>(&line) {
        Ok(Reply::Ok {
            session,
            peers,
            payload,
        }) if peers.len() == env.world_size
            && peers.iter().enumerate().all(|(i, p)| p.rank == i) =>
        {
            Ok(Membership {
                rank: env.rank,
                session,
                peers,
                payload,
            })
        }
        Ok(Reply::Error(msg)) => Err(RendezvousError::Rejected(format!("rank 0 refused: {msg}"))),
        _ => Err(RendezvousError::Rejected(format!(
            "the store at {target} sent an unexpected answer (is another service on that port?)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::EnvFlavour;

    fn env(rank: usize, world_size: usize, port: u16) -> RankEnv {
        RankEnv {
            rank,
            world_size,
            local_rank: rank,
            local_world_size: world_size,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            flavour: EnvFlavour::Generic,
        }
    }

    #[test]
    fn all_ranks_get_the_same_membership_and_payload() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = Duration::from_secs(10);
        let mut handles = Vec::new();
        for r in 1..4 {
            handles.push(std::thread::spawn(move || {
                exchange(&env(r, 4, port), None, 1000 + r as u16, true, vec![], t)
            }));
        }
        let root = exchange(
            &env(0, 4, port),
            Some(listener),
            1000,
            false,
            vec![7, 8, 9],
            t,
        )
        .unwrap();
        assert_eq!(root.payload, vec![7, 8, 9]);
        assert!(!root.peers[0].shm && root.peers[1].shm);
        for h in handles {
            let m = h.join().unwrap().unwrap();
            assert_eq!(
                (m.session, &m.peers, &m.payload),
                (root.session, &root.peers, &root.payload)
            );
        }
        for (r, p) in root.peers.iter().enumerate() {
            assert_eq!(p.addr, format!("127.0.0.1:{}", 1000 + r));
        }
    }

    #[test]
    fn mismatched_world_size_is_refused_on_both_sides() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = Duration::from_secs(10);
        let other =
            std::thread::spawn(move || exchange(&env(1, 3, port), None, 1, false, vec![], t));
        let err = exchange(&env(0, 2, port), Some(listener), 1, false, vec![], t).unwrap_err();
        assert!(
            err.to_string().contains("world size 3 but rank 0 with 2"),
            "{err}"
        );
        let err = other.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("rank 0 refused"), "{err}");
    }

    #[test]
    fn missing_ranks_are_named() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = exchange(
            &env(0, 3, 1),
            Some(listener),
            1,
            false,
            vec![],
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(
            matches!(&err, RendezvousError::Incomplete { missing, .. } if missing == &vec![1, 2]),
            "{err}"
        );
    }

    #[test]
    fn unreachable_store_is_an_error_after_the_timeout() {
        // A port that is (almost certainly) closed.
        let port = crate::rendezvous::free_port().unwrap();
        let err = exchange(
            &env(1, 2, port),
            None,
            1,
            false,
            vec![],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("could not reach the rendezvous store"),
            "{err}"
        );
    }

    #[test]
    fn garbage_from_a_stranger_is_ignored() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = Duration::from_secs(10);
        let stranger = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            exchange(&env(1, 2, port), None, 5, false, vec![], t)
        });
        let root = exchange(&env(0, 2, port), Some(listener), 4, false, vec![], t).unwrap();
        assert_eq!(stranger.join().unwrap().unwrap().session, root.session);
    }
}
