//! Local ports for the pods of concurrent runs, handed out so that two runs never get the same one.
//!
//! Asking the kernel for a free port (binding port 0) and closing the socket is not enough: the number is
//! used later, when a pod binds it, and meanwhile another run may be handed the same number — or any
//! outgoing connection on the machine may take it as its local port, since both come from the kernel's
//! ephemeral range. So ports are chosen **below the ephemeral range** (`net.ipv4.ip_local_port_range`,
//! usually from 32768), where the kernel never hands out a port by itself, from 20000 up (or from 1024 up
//! when the range starts lower than 21024), and a [`PortReservation`] keeps two things until its run ends:
//!
//! - the listening socket itself, until [`PortReservation::release`] just before the pods start, so that
//!   nothing binds the port while the run waits (in the local queue, say);
//! - an exclusive `flock` on `<dir>/<port>.lock` (default dir `<runs tree>/.ports`, see [`super::tree`]), so
//!   that another `kubetrain run` skips the number even after the socket was released.
//!
//! Where no port below the ephemeral range is free, the kernel's choice (port 0) is the fallback. (A port
//! that is merely free now, for a listener started right away, is `kubetrain_collective::rendezvous::free_port`.)
//!
//! ```
//! use kubetrain_client::local::reserve_port;
//!
//! let a = reserve_port().unwrap();
//! let b = reserve_port().unwrap();
//! assert_ne!(a.port(), b.port());
//! a.release(); // the pod may bind it now; the number stays reserved while `a` lives
//! ```

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nix::fcntl::{Flock, FlockArg};

/// How many ports the kernel may hand out that another run holds before giving up.
const ATTEMPTS: usize = 64;

/// A local port reserved for one run (see the module documentation); dropping it frees the port.
#[derive(Clone, Debug)]
pub struct PortReservation {
    port: u16,
    listener: Arc<Mutex<Option<TcpListener>>>,
    _lock: Arc<Flock<File>>,
}

impl PartialEq for PortReservation {
    fn eq(&self, other: &Self) -> bool {
        self.port == other.port
    }
}

impl Eq for PortReservation {}

impl PortReservation {
    /// The port number.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes the listening socket so that a pod can bind the port; the number stays reserved against
    /// other runs until the reservation is dropped.
    pub fn release(&self) {
        if let Ok(mut listener) = self.listener.lock() {
            listener.take();
        }
    }
}

/// The directory of the port lock files: `<runs tree>/.ports`, in the user's runs tree ([`super::tree`]).
pub fn default_dir() -> PathBuf {
    super::tree::runs_root().join(".ports")
}

/// Reserves a free loopback port (see the module documentation).
pub fn reserve_port() -> std::io::Result<PortReservation> {
    super::tree::ensure_root()?;
    let dir = default_dir();
    std::fs::create_dir_all(&dir)?;
    let (first, end) = quiet_range();
    let span = u32::from(end.saturating_sub(first));
    if span > 0 {
        // Start somewhere different in each process, so concurrent runs rarely try the same numbers.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id().wrapping_mul(2_654_435_761);
        for step in 0..span.min(4096) {
            let port = first + u16::try_from((seed.wrapping_add(step)) % span).unwrap_or(0);
            let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) else {
                continue;
            };
            if let Some(reservation) = lock(&dir, port, listener)? {
                return Ok(reservation);
            }
        }
    }
    // Fallback: the kernel's choice, still locked against other runs.
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        if let Some(reservation) = lock(&dir, port, listener)? {
            return Ok(reservation);
        }
    }
    Err(std::io::Error::other(format!(
        "no free local port after {ATTEMPTS} attempts: every port the system offered is held by another run"
    )))
}

/// Ports the kernel never hands out by itself: from 20000 (or 1024) up to the start of the ephemeral
/// range, as `(first, end)` with `end` excluded; empty when the ephemeral range starts too low.
fn quiet_range() -> (u16, u16) {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = if ephemeral_start >= 21_024 {
        20_000
    } else {
        1024
    };
    (first, ephemeral_start.max(first))
}

/// Takes the lock of `port` with its bound `listener`, or `None` when another run holds it.
fn lock(
    dir: &std::path::Path,
    port: u16,
    listener: TcpListener,
) -> std::io::Result<Option<PortReservation>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{port}.lock")))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(PortReservation {
            port,
            listener: Arc::new(Mutex::new(Some(listener))),
            _lock: Arc::new(lock),
        })),
        // Another run holds this number (its pod has bound it or is about to).
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(std::io::Error::from(errno)),
    }
}
