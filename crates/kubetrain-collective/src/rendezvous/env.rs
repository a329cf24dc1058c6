//! Reading this rank's place in the job from the environment the trainer renderer injects.

use std::fmt;
use std::path::Path;

use super::RendezvousError;
use super::hostfile;

/// Which set of variables described the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvFlavour {
    /// `PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK`, `PET_MASTER_ADDR`, `PET_MASTER_PORT` (+ `LOCAL_RANK`).
    Torch,
    /// `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`, `JAX_COORDINATOR_ADDRESS`.
    Jax,
    /// Ranks started by Open MPI's `mpirun`: `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_RANK` (+
    /// `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`); the store is on the hostfile's first host.
    Mpi,
    /// `WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT` (+ `LOCAL_RANK`, `LOCAL_WORLD_SIZE`).
    Generic,
}

impl fmt::Display for EnvFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvFlavour::Torch => "torch (PET_*)",
            EnvFlavour::Jax => "jax (JAX_*)",
            EnvFlavour::Mpi => "mpi (OMPI_COMM_WORLD_*)",
            EnvFlavour::Generic => "generic (WORLD_SIZE/RANK)",
        })
    }
}

/// This rank's place in the job and where rank 0's store listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// Global rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Rank among the processes of this node.
    pub local_rank: usize,
    /// Processes on this node.
    pub local_world_size: usize,
    /// Host of rank 0's store.
    pub master_addr: String,
    /// Port of rank 0's store.
    pub master_port: u16,
    /// Where the values came from.
    pub flavour: EnvFlavour,
}

const TORCH_VARS: &str =
    "PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT";
const JAX_VARS: &str = "JAX_NUM_PROCESSES, JAX_PROCESS_ID, JAX_COORDINATOR_ADDRESS";
const GENERIC_VARS: &str = "WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT";
const MPI_VARS: &str = "OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK";

/// Every variable [`RankEnv::from_env`] and [`super::ElasticSettings::from_env`] read. A launcher that
/// sets up ranks itself removes them first.
pub const RENDEZVOUS_VARS: [&str; 24] = [
    "PET_NNODES",
    "PET_RDZV_BACKEND",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",
    "PET_RDZV_CONF",
    "PET_MAX_RESTARTS",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "JAX_COORDINATOR_ADDRESS",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_orte_default_hostfile",
    "WORLD_SIZE",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
];

/// Where the MPI plugin mounts the hostfile (`OMPI_MCA_orte_default_hostfile` on the launcher).
pub const MPI_HOSTFILE: &str = "/etc/mpi/hostfile";

/// The store port of ranks started by `mpirun` when `MASTER_PORT` is not exported (the port of the
/// built-in torch runtimes).
pub const MPI_DEFAULT_STORE_PORT: u16 = 29500;

impl RankEnv {
    /// Reads the process environment (and, for ranks started by `mpirun`, the hostfile). See
    /// [`RankEnv::from_sources`].
    pub fn from_env() -> Result<Self, RendezvousError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`RankEnv::from_sources`] with the variables read through `get` and files from the file system.
    ///
    /// ```
    /// use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
    ///
    /// let vars = [("PET_NNODES", "2"), ("PET_NPROC_PER_NODE", "1"), ("PET_NODE_RANK", "1"),
    ///             ("PET_MASTER_ADDR", "job-node-0-0.job"), ("PET_MASTER_PORT", "29500")];
    /// let env = RankEnv::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))?;
    /// assert_eq!((env.rank, env.world_size, env.flavour), (1, 2, EnvFlavour::Torch));
    /// # Ok::<(), kubetrain_collective::rendezvous::RendezvousError>(())
    /// ```
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, RendezvousError> {
        Self::from_sources(get, |p| std::fs::read_to_string(p))
    }

    /// Reads the variables through `get` and files through `read`. The first flavour present wins:
    /// `PET_*`, then `JAX_*`, then `OMPI_COMM_WORLD_*` (ranks started by `mpirun`), then the generic
    /// `WORLD_SIZE`/`RANK`/`MASTER_*`. When a launcher also set `WORLD_SIZE`/`RANK` they must agree.
    ///
    /// Ranks started by `mpirun` find rank 0's store at `MASTER_ADDR` if it was exported to them
    /// (`mpirun -x MASTER_ADDR=...`), else at the first host of the hostfile
    /// (`OMPI_MCA_orte_default_hostfile`, else [`MPI_HOSTFILE`]), where `mpirun` places rank 0; the port is
    /// `MASTER_PORT` or [`MPI_DEFAULT_STORE_PORT`].
    ///
    /// ```
    /// use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
    ///
    /// let vars = [("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "3"),
    ///             ("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "2")];
    /// let hostfile = "job-node-0-0.job slots=2\njob-node-0-1.job slots=2\n";
    /// let env = RankEnv::from_sources(
    ///     |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()),
    ///     |_path| Ok(hostfile.to_string()),
    /// )?;
    /// assert_eq!((env.rank, env.world_size, env.local_rank, env.flavour), (3, 4, 1, EnvFlavour::Mpi));
    /// assert_eq!((env.master_addr.as_str(), env.master_port), ("job-node-0-0.job", 29500));
    /// # Ok::<(), kubetrain_collective::rendezvous::RendezvousError>(())
    /// ```
    pub fn from_sources(
        get: impl Fn(&str) -> Option<String>,
        read: impl Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Self, RendezvousError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let any = |names: &[&str]| names.iter().any(|n| get(n).is_some());
        let env = if any(&[
            "PET_NNODES",
            "PET_NPROC_PER_NODE",
            "PET_NODE_RANK",
            "PET_MASTER_ADDR",
            "PET_MASTER_PORT",
        ]) {
            torch(&get)?
        } else if any(&[
            "JAX_NUM_PROCESSES",
            "JAX_PROCESS_ID",
            "JAX_COORDINATOR_ADDRESS",
        ]) {
            jax(&get)?
        } else if any(&["OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"]) {
            mpi(&get, &read)?
        } else if any(&["WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"]) {
            generic(&get)?
        } else {
            return Err(RendezvousError::NoEnv);
        };
        if env.flavour != EnvFlavour::Generic {
            cross_check(&env, &get)?;
        }
        Ok(env)
    }
}

fn need(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    flavour: EnvFlavour,
    needs: &'static str,
) -> Result<String, RendezvousError> {
    get(var).ok_or(RendezvousError::Missing {
        var,
        flavour,
        needs,
    })
}

pub(crate) fn parse_count(
    var: &'static str,
    value: &str,
    min: usize,
) -> Result<usize, RendezvousError> {
    let n: usize = value.trim().parse().map_err(|_| RendezvousError::Invalid {
        var,
        value: value.to_string(),
        reason: "expected a whole number".to_string(),
    })?;
    if n < min {
        return Err(RendezvousError::Invalid {
            var,
            value: value.to_string(),
            reason: format!("must be at least {min}"),
        });
    }
    Ok(n)
}

pub(crate) fn parse_port(var: &'static str, value: &str) -> Result<u16, RendezvousError> {
    match value.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(RendezvousError::Invalid {
            var,
            value: value.to_string(),
            reason: "expected a TCP port 1..=65535".to_string(),
        }),
    }
}

fn check_rank(
    var: &'static str,
    value: &str,
    rank: usize,
    size: usize,
    size_var: &str,
) -> Result<(), RendezvousError> {
    if rank >= size {
        return Err(RendezvousError::Invalid {
            var,
            value: value.to_string(),
            reason: format!("must be below {size_var}={size}"),
        });
    }
    Ok(())
}

/// `PET_NNODES` is a count or a `min:max` range; a fixed range (`3:3`) is a count. An elastic range
/// (`min < max`) is [`RendezvousError::Elastic`]: ranks then come from the elastic rendezvous
/// ([`super::elastic`]), not from the environment.
fn parse_nnodes(value: &str) -> Result<usize, RendezvousError> {
    let (min, max) = parse_nnodes_range(value)?;
    if min != max {
        return Err(RendezvousError::Elastic { min, max });
    }
    Ok(min)
}

/// `PET_NNODES` as `(min, max)`: `4` is `(4, 4)`, `2:4` is `(2, 4)`; `min` must not exceed `max`.
pub(crate) fn parse_nnodes_range(value: &str) -> Result<(usize, usize), RendezvousError> {
    match value.split_once(':') {
        None => parse_count("PET_NNODES", value, 1).map(|n| (n, n)),
        Some((lo, hi)) => {
            let lo = parse_count("PET_NNODES", lo, 1)?;
            let hi = parse_count("PET_NNODES", hi, 1)?;
            if lo > hi {
                return Err(RendezvousError::Invalid {
                    var: "PET_NNODES",
                    value: value.to_string(),
                    reason: format!("the minimum {lo} is above the maximum {hi}; use min:max"),
                });
            }
            Ok((lo, hi))
        }
    }
}

fn torch(get: &impl Fn(&str) -> Option<String>) -> Result<RankEnv, RendezvousError> {
    let f = EnvFlavour::Torch;
    let nnodes_s = need(get, "PET_NNODES", f, TORCH_VARS)?;
    let nproc_s = need(get, "PET_NPROC_PER_NODE", f, TORCH_VARS)?;
    let node_rank_s = need(get, "PET_NODE_RANK", f, TORCH_VARS)?;
    let addr = need(get, "PET_MASTER_ADDR", f, TORCH_VARS)?;
    let port_s = need(get, "PET_MASTER_PORT", f, TORCH_VARS)?;
    let nnodes = parse_nnodes(&nnodes_s)?;
    let nproc = match nproc_s.trim() {
        // torchrun resolves "auto" itself and tells the children LOCAL_WORLD_SIZE; without it, one per CPU.
        "auto" | "cpu" => match get("LOCAL_WORLD_SIZE") {
            Some(v) => parse_count("LOCAL_WORLD_SIZE", &v, 1)?,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        "gpu" => {
            return Err(RendezvousError::Invalid {
                var: "PET_NPROC_PER_NODE",
                value: nproc_s,
                reason: "\"gpu\" needs torchrun to count devices; set a number or LOCAL_WORLD_SIZE"
                    .to_string(),
            });
        }
        other => parse_count("PET_NPROC_PER_NODE", other, 1)?,
    };
    let node_rank = parse_count("PET_NODE_RANK", &node_rank_s, 0)?;
    check_rank(
        "PET_NODE_RANK",
        &node_rank_s,
        node_rank,
        nnodes,
        "PET_NNODES",
    )?;
    let local_rank = match get("LOCAL_RANK") {
        Some(v) => {
            let lr = parse_count("LOCAL_RANK", &v, 0)?;
            check_rank("LOCAL_RANK", &v, lr, nproc, "PET_NPROC_PER_NODE")?;
            lr
        }
        None if nproc == 1 => 0,
        None => {
            return Err(RendezvousError::NeedsLocalLauncher {
                nproc_per_node: nproc,
            });
        }
    };
    Ok(RankEnv {
        rank: node_rank * nproc + local_rank,
        world_size: nnodes * nproc,
        local_rank,
        local_world_size: nproc,
        master_addr: addr.trim().to_string(),
        master_port: parse_port("PET_MASTER_PORT", &port_s)?,
        flavour: f,
    })
}

fn jax(get: &impl Fn(&str) -> Option<String>) -> Result<RankEnv, RendezvousError> {
    let f = EnvFlavour::Jax;
    let n_s = need(get, "JAX_NUM_PROCESSES", f, JAX_VARS)?;
    let id_s = need(get, "JAX_PROCESS_ID", f, JAX_VARS)?;
    let coord = need(get, "JAX_COORDINATOR_ADDRESS", f, JAX_VARS)?;
    let world_size = parse_count("JAX_NUM_PROCESSES", &n_s, 1)?;
    let rank = parse_count("JAX_PROCESS_ID", &id_s, 0)?;
    check_rank(
        "JAX_PROCESS_ID",
        &id_s,
        rank,
        world_size,
        "JAX_NUM_PROCESSES",
    )?;
    let (host, port) = coord
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| RendezvousError::Invalid {
            var: "JAX_COORDINATOR_ADDRESS",
            value: coord.clone(),
            reason: "expected host:port".to_string(),
        })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(RendezvousError::Invalid {
            var: "JAX_COORDINATOR_ADDRESS",
            value: coord.clone(),
            reason: "the host is empty; expected host:port".to_string(),
        });
    }
    let (local_rank, local_world_size) = local(get)?;
    Ok(RankEnv {
        rank,
        world_size,
        local_rank,
        local_world_size,
        master_addr: host.to_string(),
        master_port: parse_port("JAX_COORDINATOR_ADDRESS", port)?,
        flavour: f,
    })
}

fn mpi(
    get: &impl Fn(&str) -> Option<String>,
    read: &impl Fn(&Path) -> std::io::Result<String>,
) -> Result<RankEnv, RendezvousError> {
    let f = EnvFlavour::Mpi;
    let n_s = need(get, "OMPI_COMM_WORLD_SIZE", f, MPI_VARS)?;
    let r_s = need(get, "OMPI_COMM_WORLD_RANK", f, MPI_VARS)?;
    let world_size = parse_count("OMPI_COMM_WORLD_SIZE", &n_s, 1)?;
    let rank = parse_count("OMPI_COMM_WORLD_RANK", &r_s, 0)?;
    check_rank(
        "OMPI_COMM_WORLD_RANK",
        &r_s,
        rank,
        world_size,
        "OMPI_COMM_WORLD_SIZE",
    )?;
    let local_world_size = match get("OMPI_COMM_WORLD_LOCAL_SIZE") {
        Some(v) => parse_count("OMPI_COMM_WORLD_LOCAL_SIZE", &v, 1)?,
        None => 1,
    };
    let local_rank = match get("OMPI_COMM_WORLD_LOCAL_RANK") {
        Some(v) => {
            let lr = parse_count("OMPI_COMM_WORLD_LOCAL_RANK", &v, 0)?;
            check_rank(
                "OMPI_COMM_WORLD_LOCAL_RANK",
                &v,
                lr,
                local_world_size,
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            )?;
            lr
        }
        None => 0,
    };
    let master_port = match get("MASTER_PORT") {
        Some(p) => parse_port("MASTER_PORT", &p)?,
        None => MPI_DEFAULT_STORE_PORT,
    };
    let master_addr = match get("MASTER_ADDR") {
        Some(addr) => addr.trim().to_string(),
        None => {
            let path = get("OMPI_MCA_orte_default_hostfile")
                .map_or_else(|| MPI_HOSTFILE.to_string(), |p| p.trim().to_string());
            let hostfile_error = |reason: String| RendezvousError::Hostfile {
                path: path.clone(),
                reason,
            };
            let text = read(Path::new(&path)).map_err(|e| hostfile_error(e.to_string()))?;
            hostfile::first_host(&text)
                .map_err(|e| hostfile_error(e.to_string()))?
                .to_string()
        }
    };
    Ok(RankEnv {
        rank,
        world_size,
        local_rank,
        local_world_size,
        master_addr,
        master_port,
        flavour: f,
    })
}

fn generic(get: &impl Fn(&str) -> Option<String>) -> Result<RankEnv, RendezvousError> {
    let f = EnvFlavour::Generic;
    let n_s = need(get, "WORLD_SIZE", f, GENERIC_VARS)?;
    let r_s = need(get, "RANK", f, GENERIC_VARS)?;
    let addr = need(get, "MASTER_ADDR", f, GENERIC_VARS)?;
    let port_s = need(get, "MASTER_PORT", f, GENERIC_VARS)?;
    let world_size = parse_count("WORLD_SIZE", &n_s, 1)?;
    let rank = parse_count("RANK", &r_s, 0)?;
    check_rank("RANK", &r_s, rank, world_size, "WORLD_SIZE")?;
    let (local_rank, local_world_size) = local(get)?;
    Ok(RankEnv {
        rank,
        world_size,
        local_rank,
        local_world_size,
        master_addr: addr.trim().to_string(),
        master_port: parse_port("MASTER_PORT", &port_s)?,
        flavour: f,
    })
}

fn local(get: &impl Fn(&str) -> Option<String>) -> Result<(usize, usize), RendezvousError> {
    let lws = match get("LOCAL_WORLD_SIZE") {
        Some(v) => parse_count("LOCAL_WORLD_SIZE", &v, 1)?,
        None => 1,
    };
    let lr = match get("LOCAL_RANK") {
        Some(v) => parse_count("LOCAL_RANK", &v, 0)?,
        None => 0,
    };
    Ok((lr, lws.max(lr + 1)))
}

/// A launcher (torchrun, our own) may also export WORLD_SIZE and RANK: they must say the same.
fn cross_check(
    env: &RankEnv,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(), RendezvousError> {
    if let Some(v) = get("WORLD_SIZE") {
        let ws = parse_count("WORLD_SIZE", &v, 1)?;
        if ws != env.world_size {
            return Err(RendezvousError::Inconsistent(format!(
                "WORLD_SIZE={ws} but the {} variables give {} ranks",
                env.flavour, env.world_size
            )));
        }
    }
    if let Some(v) = get("RANK") {
        let r = parse_count("RANK", &v, 0)?;
        if r != env.rank {
            return Err(RendezvousError::Inconsistent(format!(
                "RANK={r} but the {} variables give rank {}",
                env.flavour, env.rank
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<RankEnv, RendezvousError> {
        RankEnv::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    const TORCH: [(&str, &str); 5] = [
        ("PET_NNODES", "2"),
        ("PET_NPROC_PER_NODE", "4"),
        ("PET_NODE_RANK", "1"),
        ("PET_MASTER_ADDR", "job-node-0-0.job"),
        ("PET_MASTER_PORT", "29500"),
    ];

    #[test]
    fn torch_env_with_local_rank() {
        let mut vars = TORCH.to_vec();
        vars.push(("LOCAL_RANK", "3"));
        let env = from(&vars).unwrap();
        assert_eq!(
            env,
            RankEnv {
                rank: 7,
                world_size: 8,
                local_rank: 3,
                local_world_size: 4,
                master_addr: "job-node-0-0.job".into(),
                master_port: 29500,
                flavour: EnvFlavour::Torch
            }
        );
    }

    #[test]
    fn torch_env_needs_a_local_launcher_for_several_processes() {
        let err = from(&TORCH).unwrap_err();
        assert!(
            matches!(
                err,
                RendezvousError::NeedsLocalLauncher { nproc_per_node: 4 }
            ),
            "{err}"
        );
    }

    #[test]
    fn torch_env_single_process_and_fixed_range() {
        let vars = [
            ("PET_NNODES", "3:3"),
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_NODE_RANK", "2"),
            ("PET_MASTER_ADDR", "m"),
            ("PET_MASTER_PORT", "1234"),
        ];
        let env = from(&vars).unwrap();
        assert_eq!((env.rank, env.world_size, env.local_rank), (2, 3, 0));
    }

    #[test]
    fn jax_env() {
        let vars = [
            ("JAX_NUM_PROCESSES", "4"),
            ("JAX_PROCESS_ID", "2"),
            ("JAX_COORDINATOR_ADDRESS", "job-node-0-0.job:29500"),
        ];
        let env = from(&vars).unwrap();
        assert_eq!(
            (env.rank, env.world_size, env.flavour),
            (2, 4, EnvFlavour::Jax)
        );
        assert_eq!(
            (env.master_addr.as_str(), env.master_port),
            ("job-node-0-0.job", 29500)
        );
        let v6 = [
            ("JAX_NUM_PROCESSES", "1"),
            ("JAX_PROCESS_ID", "0"),
            ("JAX_COORDINATOR_ADDRESS", "[::1]:80"),
        ];
        assert_eq!(from(&v6).unwrap().master_addr, "::1");
    }

    #[test]
    fn generic_env() {
        let vars = [
            ("WORLD_SIZE", "3"),
            ("RANK", "0"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "5000"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "3"),
        ];
        let env = from(&vars).unwrap();
        assert_eq!((env.rank, env.world_size, env.local_world_size), (0, 3, 3));
        assert_eq!(env.flavour, EnvFlavour::Generic);
    }

    #[test]
    fn errors_name_the_variable_and_the_fix() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![], "no rendezvous environment"),
            (vec![("PET_NNODES", "2")], "PET_NPROC_PER_NODE is not set"),
            (
                vec![
                    ("JAX_NUM_PROCESSES", "2"),
                    ("JAX_PROCESS_ID", "2"),
                    ("JAX_COORDINATOR_ADDRESS", "h:1"),
                ],
                "JAX_PROCESS_ID=\"2\": must be below JAX_NUM_PROCESSES=2",
            ),
            (
                vec![
                    ("JAX_NUM_PROCESSES", "2"),
                    ("JAX_PROCESS_ID", "1"),
                    ("JAX_COORDINATOR_ADDRESS", "nohost"),
                ],
                "expected host:port",
            ),
            (
                vec![
                    ("WORLD_SIZE", "x"),
                    ("RANK", "0"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "WORLD_SIZE=\"x\": expected a whole number",
            ),
            (
                vec![
                    ("WORLD_SIZE", "2"),
                    ("RANK", "0"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "0"),
                ],
                "expected a TCP port",
            ),
            (
                vec![
                    ("WORLD_SIZE", "0"),
                    ("RANK", "0"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "1"),
                ],
                "must be at least 1",
            ),
            (
                vec![
                    ("PET_NNODES", "1:4"),
                    ("PET_NPROC_PER_NODE", "1"),
                    ("PET_NODE_RANK", "0"),
                    ("PET_MASTER_ADDR", "m"),
                    ("PET_MASTER_PORT", "1"),
                ],
                "PET_NNODES=1:4 is an elastic range",
            ),
        ];
        for (vars, want) in cases {
            let err = from(&vars).unwrap_err().to_string();
            assert!(err.contains(want), "{vars:?}: got {err:?}, want {want:?}");
        }
    }

    /// Reads `vars`, and `files` as the file system (anything else is not found).
    fn from_with_files(
        vars: &[(&str, &str)],
        files: &[(&str, &str)],
    ) -> Result<RankEnv, RendezvousError> {
        RankEnv::from_sources(
            |k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            },
            |p| {
                files
                    .iter()
                    .find(|(n, _)| Path::new(n) == p)
                    .map(|(_, v)| v.to_string())
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
            },
        )
    }

    const MPI: [(&str, &str); 4] = [
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ];
    const RENDERED_HOSTFILE: &str = "job-node-0-0.job slots=2\njob-node-0-1.job slots=2\n";

    #[test]
    fn mpi_env_meets_at_the_first_host_of_the_hostfile() {
        let env = from_with_files(&MPI, &[(MPI_HOSTFILE, RENDERED_HOSTFILE)]).unwrap();
        assert_eq!(
            env,
            RankEnv {
                rank: 3,
                world_size: 4,
                local_rank: 1,
                local_world_size: 2,
                master_addr: "job-node-0-0.job".into(),
                master_port: MPI_DEFAULT_STORE_PORT,
                flavour: EnvFlavour::Mpi
            }
        );
        // The launcher's OMPI_MCA_orte_default_hostfile (mpirun forwards it) names another file.
        let mut vars = MPI.to_vec();
        vars.push(("OMPI_MCA_orte_default_hostfile", "/tmp/hf"));
        let env = from_with_files(&vars, &[("/tmp/hf", "# mine\nlocalhost slots=4\n")]).unwrap();
        assert_eq!(env.master_addr, "localhost");
    }

    #[test]
    fn mpi_env_prefers_an_exported_master_addr_and_port() {
        let mut vars = MPI.to_vec();
        vars.extend([("MASTER_ADDR", "10.0.0.9"), ("MASTER_PORT", "4000")]);
        // No hostfile at all: MASTER_ADDR is enough.
        let env = from_with_files(&vars, &[]).unwrap();
        assert_eq!(
            (env.master_addr.as_str(), env.master_port, env.flavour),
            ("10.0.0.9", 4000, EnvFlavour::Mpi)
        );
        // Only the two world variables: one rank per node.
        let vars = [("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")];
        let env = from_with_files(&vars, &[(MPI_HOSTFILE, "h\n")]).unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (0, 1));
    }

    #[test]
    fn mpi_env_errors_name_the_hostfile_and_the_fix() {
        type Vars<'a> = Vec<(&'a str, &'a str)>;
        let cases: Vec<(Vars, Vars, &str)> = vec![
            (
                MPI.to_vec(),
                vec![],
                "meet at the first host of the MPI hostfile /etc/mpi/hostfile",
            ),
            (MPI.to_vec(), vec![], "mpirun -x MASTER_ADDR="),
            (
                MPI.to_vec(),
                vec![(MPI_HOSTFILE, "# empty\n")],
                "the file has no host line",
            ),
            (
                vec![("OMPI_COMM_WORLD_SIZE", "2")],
                vec![],
                "OMPI_COMM_WORLD_RANK is not set (mpi (OMPI_COMM_WORLD_*) rendezvous needs",
            ),
            (
                vec![("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "2")],
                vec![(MPI_HOSTFILE, "h")],
                "OMPI_COMM_WORLD_RANK=\"2\": must be below OMPI_COMM_WORLD_SIZE=2",
            ),
            (
                vec![
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    ("OMPI_COMM_WORLD_RANK", "0"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ],
                vec![(MPI_HOSTFILE, "h")],
                "OMPI_COMM_WORLD_LOCAL_RANK=\"2\": must be below OMPI_COMM_WORLD_LOCAL_SIZE=2",
            ),
            (
                {
                    let mut v = MPI.to_vec();
                    v.push(("MASTER_PORT", "http"));
                    v
                },
                vec![(MPI_HOSTFILE, "h")],
                "MASTER_PORT=\"http\": expected a TCP port",
            ),
            (
                {
                    let mut v = MPI.to_vec();
                    v.push(("RANK", "0"));
                    v
                },
                vec![(MPI_HOSTFILE, "h")],
                "RANK=0 but the mpi (OMPI_COMM_WORLD_*) variables give rank 3",
            ),
        ];
        for (vars, files, want) in cases {
            let err = from_with_files(&vars, &files).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "{vars:?} {files:?}: got {err:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn torch_and_jax_win_over_mpi() {
        let mut vars = TORCH.to_vec();
        vars.extend(MPI);
        vars.push(("LOCAL_RANK", "0"));
        assert_eq!(from(&vars).unwrap().flavour, EnvFlavour::Torch);
    }

    #[test]
    fn launcher_variables_must_agree() {
        let mut vars = TORCH.to_vec();
        vars.extend([("LOCAL_RANK", "0"), ("WORLD_SIZE", "8"), ("RANK", "5")]);
        let err = from(&vars).unwrap_err().to_string();
        assert!(
            err.contains("RANK=5 but the torch (PET_*) variables give rank 4"),
            "{err}"
        );
        let mut vars = TORCH.to_vec();
        vars.extend([("LOCAL_RANK", "0"), ("WORLD_SIZE", "4")]);
        assert!(
            from(&vars)
                .unwrap_err()
                .to_string()
                .contains("WORLD_SIZE=4")
        );
        let mut vars = TORCH.to_vec();
        vars.extend([("LOCAL_RANK", "0"), ("WORLD_SIZE", "8"), ("RANK", "4")]);
        assert_eq!(from(&vars).unwrap().rank, 4);
    }
}
