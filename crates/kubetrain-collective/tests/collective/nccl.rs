//! The NCCL backend without a GPU: the library is found or the error says where it looked; with a
//! library (e.g. `pip install nvidia-nccl-cu12` and NCCL_LIBRARY pointing at its libnccl.so.2),
//! ncclGetVersion and ncclGetUniqueId work and communicator init fails with a typed error. GPU tests are
//! ignored unless run on a GPU machine (`cargo test -- --ignored`).

use std::time::Duration;

use kubetrain_collective::nccl::{
    self, Library, NcclCommunicator, NcclError, NcclOptions, UniqueId,
};
use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
use kubetrain_collective::{CollectiveError, Communicator, ReduceOp};

fn single_rank_env() -> RankEnv {
    RankEnv {
        rank: 0,
        world_size: 1,
        local_rank: 0,
        local_world_size: 1,
        master_addr: "127.0.0.1".into(),
        master_port: 1,
        flavour: EnvFlavour::Generic,
    }
}

fn library_or_skip(test: &str) -> Option<Library> {
    match Library::load() {
        Ok(lib) => Some(lib),
        Err(e) => {
            eprintln!("{test}: skipped, no NCCL library: {e}");
            None
        }
    }
}

#[test]
fn the_library_is_found_or_the_error_says_where_it_looked() {
    match Library::load() {
        Ok(lib) => {
            let v = lib.version().expect("ncclGetVersion");
            assert!(v >= 2_0000 || (2000..10000).contains(&v), "version {v}");
            assert!(lib.version_string().starts_with("2."));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("NCCL_LIBRARY"), "{msg}");
            assert!(
                msg.contains("libnccl.so.2") && msg.contains("libnccl.so"),
                "{msg}"
            );
            assert!(msg.contains("pip install nvidia-nccl-cu12"), "{msg}");
        }
    }
}

#[test]
fn without_a_library_or_a_gpu_init_is_a_typed_error_not_a_panic() {
    // Whatever this machine has, init of a one-rank communicator must fail cleanly without a GPU.
    if nccl::cuda_driver_present() {
        eprintln!("skipped: a CUDA driver is present (run the GPU tests instead)");
        return;
    }
    let err = NcclCommunicator::init(&single_rank_env(), None, NcclOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            CollectiveError::Nccl(NcclError::Library(_) | NcclError::NoCudaDriver)
        ),
        "{err}"
    );
}

#[test]
fn with_a_library_get_version_and_unique_id_work_and_comm_init_fails_typed() {
    let Some(lib) = library_or_skip("with_a_library") else {
        return;
    };
    let lib = std::sync::Arc::new(lib);
    // SAFETY of the test environment: NCCL's bootstrap listener binds loopback only.
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        eprintln!("note: set NCCL_SOCKET_IFNAME=lo to keep NCCL's bootstrap on loopback");
    }
    let v = lib.version().unwrap();
    assert!(v >= 21200, "NCCL {v} is older than 2.12");
    let id = UniqueId::new(&lib).expect("ncclGetUniqueId works without a GPU");
    let bytes = id.to_bytes();
    assert_eq!(bytes.len(), 128);
    assert!(bytes.iter().any(|&b| b != 0));
    assert!(UniqueId::from_bytes(&bytes).is_some());
    assert!(UniqueId::from_bytes(&bytes[..127]).is_none());
    if nccl::cuda_driver_present() {
        eprintln!("skipped the init check: a CUDA driver is present");
        return;
    }
    let err = nccl::comm_init_rank(&lib, &id, 1, 0).unwrap_err();
    match &err {
        NcclError::Call { call, name, .. } => {
            assert_eq!(*call, "ncclCommInitRank");
            assert_eq!(*name, "ncclUnhandledCudaError", "{err}");
        }
        other => panic!("expected a typed ncclCommInitRank error, got {other}"),
    }
    assert!(
        err.to_string()
            .contains("ncclCommInitRank failed: ncclUnhandledCudaError"),
        "{err}"
    );
}

#[test]
#[ignore = "needs GPU"]
fn gpu_single_rank_collectives_match_the_reference() {
    let store = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut env = single_rank_env();
    env.master_port = store.local_addr().unwrap().port();
    let opts = NcclOptions {
        timeout: Duration::from_secs(60),
        device: Some(0),
    };
    let mut comm = NcclCommunicator::init(&env, Some(store), opts).unwrap();
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let mut out = vec![0.0f32; 1000];
    comm.all_reduce(&data, &mut out, ReduceOp::Sum).unwrap();
    assert_eq!(out, data);
    let mut gathered = vec![0i64; 7];
    comm.all_gather(&[1i64, 2, 3, 4, 5, 6, 7], &mut gathered)
        .unwrap();
    assert_eq!(gathered, [1, 2, 3, 4, 5, 6, 7]);
    let mut b = vec![9u8; 33];
    comm.broadcast(&mut b, 0).unwrap();
    assert_eq!(b, vec![9u8; 33]);
    comm.barrier().unwrap();
}
