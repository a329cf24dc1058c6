//! How the ranks of a TrainJob meet: the environment the renderer injects says who this rank is and where
//! rank 0 is ([`RankEnv`]); rank 0 hosts a small TCP store that collects every rank's address and hands out
//! the membership and rank 0's payload (the NCCL unique id) ([`exchange`]).
//!
//! An elastic torch job (`PET_NNODES=min:max`, torchrun's c10d settings `PET_RDZV_*`) meets through
//! [`elastic`] instead: a long-lived store admits between `min` and `max` nodes per round, assigns the ranks,
//! and re-forms the group when a node is lost or a new one arrives.

pub mod elastic;
mod env;
mod hostfile;
mod store;

pub use elastic::{ElasticAgent, ElasticSettings, ElasticStore, Round};
pub use env::{EnvFlavour, MPI_DEFAULT_STORE_PORT, MPI_HOSTFILE, RENDEZVOUS_VARS, RankEnv};
pub use hostfile::{HostfileError, first_host as hostfile_first_host};
pub use store::{Membership, PeerInfo, exchange, host_key};

use std::time::Duration;

/// Why the ranks could not meet.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RendezvousError {
    /// None of the known environment flavours is present.
    #[error(
        "no rendezvous environment: set PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and \
         PET_MASTER_PORT (torch runtimes), JAX_NUM_PROCESSES, JAX_PROCESS_ID and JAX_COORDINATOR_ADDRESS (jax), \
         WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT, or start the ranks with mpirun (OMPI_COMM_WORLD_*)"
    )]
    NoEnv,
    /// A variable of the chosen flavour is missing.
    #[error("{var} is not set ({flavour} rendezvous needs {needs})")]
    Missing {
        /// The missing variable.
        var: &'static str,
        /// The flavour that was detected.
        flavour: EnvFlavour,
        /// Every variable that flavour needs.
        needs: &'static str,
    },
    /// A variable has a value that cannot be used.
    #[error("{var}={value:?}: {reason}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// `PET_NNODES` is an elastic range (`min:max` with `min < max`): the ranks are assigned by the elastic
    /// rendezvous ([`ElasticSettings::from_env`], [`ElasticAgent`]), not read from the environment.
    #[error(
        "PET_NNODES={min}:{max} is an elastic range: ranks are assigned by the elastic (c10d) rendezvous \
         (kubetrain_collective::rendezvous::ElasticAgent), not read from the environment"
    )]
    Elastic {
        /// The fewest nodes.
        min: usize,
        /// The most nodes.
        max: usize,
    },
    /// Two sources disagree (e.g. WORLD_SIZE against PET_NNODES × PET_NPROC_PER_NODE).
    #[error("inconsistent rendezvous environment: {0}")]
    Inconsistent(String),
    /// Ranks started by `mpirun` find rank 0's store through the hostfile, and it could not be used.
    #[error(
        "ranks started by mpirun (OMPI_COMM_WORLD_SIZE is set) meet at the first host of the MPI hostfile \
         {path}: {reason}. The renderer mounts the hostfile in the launcher pod only: export the store host \
         to every rank, e.g. mpirun -x MASTER_ADDR=$(awk 'NF && $1 !~ /^#/ {{print $1; exit}}' {path}) ..."
    )]
    Hostfile {
        /// The hostfile tried (`OMPI_MCA_orte_default_hostfile`, else `/etc/mpi/hostfile`).
        path: String,
        /// Why it could not be used.
        reason: String,
    },
    /// Several processes per node but no `LOCAL_RANK`: something must start one process per local rank.
    #[error(
        "PET_NPROC_PER_NODE={nproc_per_node} but LOCAL_RANK is not set: start the ranks with torchrun or \
         `kubetrain collective`, which spawns one process per local rank"
    )]
    NeedsLocalLauncher {
        /// Processes to start on this node.
        nproc_per_node: usize,
    },
    /// Rank 0's store could not be reached in time.
    #[error(
        "could not reach the rendezvous store at {addr} within {waited:?}: {last_error} (is rank 0 running and MASTER_ADDR/MASTER_PORT right?)"
    )]
    Unreachable {
        /// `host:port` tried.
        addr: String,
        /// How long it retried.
        waited: Duration,
        /// The last connection error.
        last_error: String,
    },
    /// Not every rank arrived at rank 0's store in time.
    #[error(
        "rendezvous timed out after {waited:?}: ranks {missing:?} never arrived at rank 0's store"
    )]
    Incomplete {
        /// How long rank 0 waited.
        waited: Duration,
        /// Ranks that never registered.
        missing: Vec<usize>,
    },
    /// A rank disagrees with the others (world size, duplicate rank) or spoke garbage.
    #[error("rendezvous failed: {0}")]
    Rejected(String),
    /// Socket error while meeting.
    #[error("rendezvous I/O: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// A loopback port that was free a moment ago: bound on port 0, its number read, released. For a store
/// (or server) started right away, as torchrun's `--master-port 0`; another process may take the number
/// in between, so a caller that starts the listener later and must not collide with concurrent local
/// runs reserves it instead (kubetrain-client's `local::reserve_port`). Also a port nobody listens
/// on, for tests of unreachable endpoints.
///
/// ```
/// let port = kubetrain_collective::rendezvous::free_port().unwrap();
/// assert_ne!(port, 0);
/// let _store = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
/// ```
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}
