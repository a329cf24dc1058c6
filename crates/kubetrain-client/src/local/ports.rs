//! Local ports for the pods of concurrent runs, handed out so that two runs never get the same one.
//!
//! Asking the kernel for a free port (binding port 0) and closing the socket is not enough: the number is
//! used later, when a pod binds it, and meanwhile another run may be handed the same number. A
//! [`PortReservation`] therefore keeps two things until its run ends:
//!
//! - the listening socket itself, until [`PortReservation::release`] just before the pods start, so that
//!   no process on the machine is given the port while the run waits (in the local queue, say);
//! - an exclusive `flock` on `<dir>/<port>.lock` (default dir `$TMPDIR/kubetrain-runs/ports-<uid>`), so
//!   that another `kubetrain run` that is handed the number after the socket was released sees it is taken
//!   and asks again.
//!
//! ```
//! use kubetrain_client::local::ports::reserve_port;
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

/// The directory of the port lock files: `$TMPDIR/kubetrain-runs/ports-<uid>`.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir()
        .join("kubetrain-runs")
        .join(format!("ports-{}", nix::unistd::getuid()))
}

/// Reserves a free loopback port (see the module documentation).
pub fn reserve_port() -> std::io::Result<PortReservation> {
    let dir = default_dir();
    std::fs::create_dir_all(&dir)?;
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{port}.lock")))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                return Ok(PortReservation {
                    port,
                    listener: Arc::new(Mutex::new(Some(listener))),
                    _lock: Arc::new(lock),
                });
            }
            // Another run holds this number (its pod has bound it or is about to): ask again.
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, errno)) => return Err(std::io::Error::from(errno)),
        }
    }
    Err(std::io::Error::other(format!(
        "no free local port after {ATTEMPTS} attempts: every port the system offered is held by another run"
    )))
}

/// A free loopback port, for a process started right away (the port is not kept reserved: prefer
/// [`reserve_port`] when the process starts later).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}
