//! Reading this rank's place in the job from the environment the trainer renderer injects.

use std::fmt;

use super::RendezvousError;

/// Which set of variables described the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvFlavour {
    /// `PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK`, `PET_MASTER_ADDR`, `PET_MASTER_PORT` (+ `LOCAL_RANK`).
    Torch,
    /// `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`, `JAX_COORDINATOR_ADDRESS`.
    Jax,
    /// `WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT` (+ `LOCAL_RANK`, `LOCAL_WORLD_SIZE`).
    Generic,
}

impl fmt::Display for EnvFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvFlavour::Torch => "torch (PET_*)",
            EnvFlavour::Jax => "jax (JAX_*)",
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

impl RankEnv {
    /// Reads the process environment. See [`RankEnv::from_lookup`].
    pub fn from_env() -> Result<Self, RendezvousError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get`: `PET_*` if any is set, else `JAX_*`, else the generic
    /// `WORLD_SIZE`/`RANK`/`MASTER_*`. When a launcher also set `WORLD_SIZE`/`RANK` they must agree.
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

fn parse_count(var: &'static str, value: &str, min: usize) -> Result<usize, RendezvousError> {
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

fn parse_port(var: &'static str, value: &str) -> Result<u16, RendezvousError> {
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

/// `PET_NNODES` is a count or a fixed `min:max` range; elastic ranges are not supported.
fn parse_nnodes(value: &str) -> Result<usize, RendezvousError> {
    match value.split_once(':') {
        None => parse_count("PET_NNODES", value, 1),
        Some((lo, hi)) => {
            let lo = parse_count("PET_NNODES", lo, 1)?;
            let hi = parse_count("PET_NNODES", hi, 1)?;
            if lo != hi {
                return Err(RendezvousError::Invalid {
                    var: "PET_NNODES",
                    value: value.to_string(),
                    reason: "elastic ranges are not supported; use a fixed node count".to_string(),
                });
            }
            Ok(lo)
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
                "elastic ranges are not supported",
            ),
        ];
        for (vars, want) in cases {
            let err = from(&vars).unwrap_err().to_string();
            assert!(err.contains(want), "{vars:?}: got {err:?}, want {want:?}");
        }
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
