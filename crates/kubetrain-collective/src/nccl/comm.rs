//! The NCCL communicator.

use std::ffi::c_void;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError};
use kubetrain_nccl_sys::{
    self as sys, Library, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t,
};

use super::NcclError;
use crate::communicator::{Communicator, check};
use crate::dtype::{Element, ElementType, ReduceOp};
use crate::error::{CollectiveError, Result};
use crate::rendezvous::{self, RankEnv};

/// An NCCL unique id: made by rank 0 (`ncclGetUniqueId`), handed to every rank through the store.
#[derive(Clone)]
pub struct UniqueId(sys::ncclUniqueId);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

impl UniqueId {
    /// `ncclGetUniqueId` (starts NCCL's bootstrap listener on this host; see `NCCL_SOCKET_IFNAME`).
    pub fn new(lib: &Library) -> Result<Self, NcclError> {
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into `id`.
        let rc = unsafe { lib.raw().ncclGetUniqueId(&mut id) };
        nccl_check(lib, "ncclGetUniqueId", rc, std::ptr::null_mut())?;
        Ok(UniqueId(id))
    }

    /// The 128 bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.internal.iter().map(|&c| c as u8).collect()
    }

    /// Rebuilds an id from [`UniqueId::to_bytes`]; `None` unless exactly 128 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        if bytes.len() != id.internal.len() {
            return None;
        }
        for (d, s) in id.internal.iter_mut().zip(bytes) {
            *d = *s as _;
        }
        Some(UniqueId(id))
    }
}

/// Maps an NCCL result to `Ok` or a typed error with NCCL's own words.
pub(crate) fn nccl_check(
    lib: &Library,
    call: &'static str,
    rc: ncclResult_t,
    comm: ncclComm_t,
) -> Result<(), NcclError> {
    if rc == ncclResult_t::ncclSuccess {
        return Ok(());
    }
    let hint = match rc {
        ncclResult_t::ncclInvalidUsage => Some(
            "NCCL refuses two ranks on one GPU and mismatched calls; run one rank per GPU (PET_NPROC_PER_NODE ≤ GPUs per node)",
        ),
        ncclResult_t::ncclUnhandledCudaError => {
            Some("no usable GPU or the CUDA driver is too old for this NCCL")
        }
        ncclResult_t::ncclSystemError | ncclResult_t::ncclRemoteError => Some(
            "a network or peer failure; NCCL_DEBUG=INFO and NCCL_SOCKET_IFNAME help to find it",
        ),
        _ => None,
    };
    Err(NcclError::Call {
        call,
        code: rc.0,
        name: sys::result_name(rc),
        description: lib.error_string(rc),
        detail: lib.last_error(comm),
        hint,
    })
}

fn cuda(context: &str) -> impl FnOnce(DriverError) -> NcclError + '_ {
    move |e| NcclError::Cuda {
        context: context.to_string(),
        message: format!("{e:?}"),
    }
}

/// A raw NCCL communicator handle (not yet tied to a stream). Dropping it aborts the communicator
/// (`ncclCommAbort`): nothing was enqueued on it, so nothing is lost, and abort does not wait for peers that
/// may be gone.
pub struct RawComm {
    lib: Arc<Library>,
    /// Null once ownership moved to an [`NcclCommunicator`] (which destroys it itself).
    comm: ncclComm_t,
}

impl RawComm {
    /// Takes the handle out; the caller becomes responsible for destroying it.
    fn into_handle(mut self) -> ncclComm_t {
        std::mem::replace(&mut self.comm, std::ptr::null_mut())
    }
}

impl Drop for RawComm {
    fn drop(&mut self) {
        if self.comm.is_null() {
            return;
        }
        let raw = self.lib.raw();
        // SAFETY: a valid communicator owned by this value and used by nobody else. NCCL older than 2.4 has
        // no abort (the generated method would panic on the missing symbol): destroy it there.
        unsafe {
            if raw.ncclCommAbort.is_ok() {
                raw.ncclCommAbort(self.comm);
            } else {
                raw.ncclCommDestroy(self.comm);
            }
        }
    }
}

// SAFETY: an ncclComm_t may be created on one thread and used from another, as long as calls are not
// concurrent (NcclCommunicator takes &mut self for every call).
unsafe impl Send for RawComm {}

impl std::fmt::Debug for RawComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawComm(..)")
    }
}

/// `ncclCommInitRank` on the current CUDA device. Without a GPU this fails with
/// `ncclUnhandledCudaError`, as a typed [`NcclError::Call`].
pub fn comm_init_rank(
    lib: &Arc<Library>,
    id: &UniqueId,
    world_size: usize,
    rank: usize,
) -> Result<RawComm, NcclError> {
    let mut comm: ncclComm_t = std::ptr::null_mut();
    let (n, r) = (world_size as i32, rank as i32);
    // SAFETY: `comm` receives the handle; the id is passed by value.
    let rc = unsafe { lib.raw().ncclCommInitRank(&mut comm, n, id.0, r) };
    nccl_check(lib, "ncclCommInitRank", rc, std::ptr::null_mut())?;
    Ok(RawComm {
        lib: Arc::clone(lib),
        comm,
    })
}

/// Settings of an [`NcclCommunicator`].
#[derive(Debug, Clone)]
pub struct NcclOptions {
    /// How long rendezvous, init and any collective may take before the communicator is aborted.
    pub timeout: Duration,
    /// CUDA device; default `local_rank % device_count`.
    pub device: Option<usize>,
}

impl Default for NcclOptions {
    fn default() -> Self {
        NcclOptions {
            timeout: Duration::from_secs(600),
            device: None,
        }
    }
}

/// A communicator of the NCCL backend, bound to one GPU and one stream. Not `Send`: create and use it on
/// one thread.
pub struct NcclCommunicator {
    lib: Arc<Library>,
    comm: ncclComm_t,
    stream: Arc<CudaStream>,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    failure: Option<String>,
}

impl std::fmt::Debug for NcclCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCommunicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("library", &self.lib.path())
            .finish_non_exhaustive()
    }
}

fn dtype(d: ElementType) -> ncclDataType_t {
    match d {
        ElementType::F32 => ncclDataType_t::ncclFloat32,
        ElementType::F64 => ncclDataType_t::ncclFloat64,
        ElementType::F16 => ncclDataType_t::ncclFloat16,
        ElementType::Bf16 => ncclDataType_t::ncclBfloat16,
        ElementType::I32 => ncclDataType_t::ncclInt32,
        ElementType::I64 => ncclDataType_t::ncclInt64,
        ElementType::U8 => ncclDataType_t::ncclUint8,
    }
}

fn redop(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Prod => ncclRedOp_t::ncclProd,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Avg => ncclRedOp_t::ncclAvg,
    }
}

impl NcclCommunicator {
    /// Loads NCCL, meets the other ranks (rank 0 makes the unique id and hands it out through its store),
    /// selects the GPU and creates the communicator, all within `opts.timeout`.
    pub fn init(env: &RankEnv, store: Option<TcpListener>, opts: NcclOptions) -> Result<Self> {
        let lib = Arc::new(Library::load().map_err(NcclError::from)?);
        for (symbol, present) in [
            ("ncclCommAbort", lib.raw().ncclCommAbort.is_ok()),
            (
                "ncclCommGetAsyncError",
                lib.raw().ncclCommGetAsyncError.is_ok(),
            ),
            ("ncclSend", lib.raw().ncclSend.is_ok()),
        ] {
            if !present {
                return Err(NcclError::MissingSymbol {
                    path: lib.path().display().to_string(),
                    symbol,
                    version: lib.version_string(),
                }
                .into());
            }
        }
        if !super::cuda_driver_present() {
            return Err(NcclError::NoCudaDriver.into());
        }
        let devices = CudaContext::device_count()
            .map_err(cuda("count CUDA devices"))?
            .max(0) as usize;
        if devices == 0 {
            return Err(NcclError::Cuda {
                context: "select a GPU".into(),
                message: "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)".into(),
            }
            .into());
        }
        let device = opts.device.unwrap_or(env.local_rank % devices);
        let ctx = CudaContext::new(device).map_err(cuda("open the CUDA device"))?;
        let stream = ctx.new_stream().map_err(cuda("create a CUDA stream"))?;
        let payload = if env.rank == 0 {
            UniqueId::new(&lib)?.to_bytes()
        } else {
            Vec::new()
        };
        let membership = rendezvous::exchange(env, store, 0, false, payload, opts.timeout)?;
        let id = UniqueId::from_bytes(&membership.payload).ok_or_else(|| {
            CollectiveError::Rendezvous(rendezvous::RendezvousError::Rejected(
                "rank 0 did not hand out a 128-byte NCCL unique id".into(),
            ))
        })?;
        // ncclCommInitRank blocks until every rank joined; run it aside so a rank that died after the
        // rendezvous turns into a timeout here.
        let (tx, rx) = std::sync::mpsc::channel();
        let (lib2, ctx2, n, r) = (Arc::clone(&lib), Arc::clone(&ctx), env.world_size, env.rank);
        std::thread::spawn(move || {
            let result = ctx2
                .bind_to_thread()
                .map_err(cuda("bind the CUDA context"))
                .and_then(|()| comm_init_rank(&lib2, &id, n, r));
            let _ = tx.send(result);
        });
        let raw = match rx.recv_timeout(opts.timeout) {
            Ok(result) => result?,
            Err(_) => {
                return Err(NcclError::Timeout {
                    rank: env.rank,
                    during: "ncclCommInitRank".into(),
                    waited: opts.timeout,
                }
                .into());
            }
        };
        Ok(NcclCommunicator {
            lib,
            comm: raw.into_handle(),
            stream,
            rank: env.rank,
            world_size: env.world_size,
            timeout: opts.timeout,
            failure: None,
        })
    }

    /// The stream every collective is enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The loaded NCCL library.
    pub fn library(&self) -> &Library {
        &self.lib
    }

    fn cu_stream(&self) -> sys::cudaStream_t {
        self.stream.cu_stream() as sys::cudaStream_t
    }

    fn fail(&mut self, e: NcclError) -> CollectiveError {
        if self.failure.is_none() {
            self.failure = Some(e.to_string());
            // SAFETY: aborting a valid communicator; it is not used again except by Drop (which skips it).
            unsafe {
                self.lib.raw().ncclCommAbort(self.comm);
            }
        }
        e.into()
    }

    fn ensure_alive(&self) -> Result<()> {
        match &self.failure {
            Some(f) => Err(CollectiveError::Poisoned(f.clone())),
            None => Ok(()),
        }
    }

    fn checked(&mut self, call: &'static str, rc: ncclResult_t) -> Result<()> {
        match nccl_check(&self.lib, call, rc, self.comm) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Waits for everything enqueued on the stream, polling `ncclCommGetAsyncError`; aborts the
    /// communicator on an asynchronous error or after the timeout.
    pub fn wait(&mut self, during: &str) -> Result<()> {
        self.ensure_alive()?;
        let event = self
            .stream
            .record_event(None)
            .map_err(cuda("record a CUDA event"))
            .map_err(|e| self.fail(e))?;
        let start = Instant::now();
        let mut nap = Duration::from_micros(1);
        loop {
            match event.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.fail(cuda("wait for the stream")(e))),
            }
            let mut rc = ncclResult_t::ncclSuccess;
            // SAFETY: valid communicator; writes one result code.
            unsafe { self.lib.raw().ncclCommGetAsyncError(self.comm, &mut rc) };
            if rc != ncclResult_t::ncclSuccess && rc != ncclResult_t::ncclInProgress {
                let err = NcclError::Async {
                    rank: self.rank,
                    during: during.to_string(),
                    name: sys::result_name(rc),
                    description: self.lib.error_string(rc),
                };
                return Err(self.fail(err));
            }
            if start.elapsed() >= self.timeout {
                let err = NcclError::Timeout {
                    rank: self.rank,
                    during: during.to_string(),
                    waited: start.elapsed(),
                };
                return Err(self.fail(err));
            }
            // Short collectives finish in microseconds: poll fast at first, then back off.
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// Runs one enqueueing NCCL call on this communicator and its stream, and checks its result code.
    fn enqueue(
        &mut self,
        call: &'static str,
        f: impl FnOnce(&sys::Nccl, ncclComm_t, sys::cudaStream_t) -> ncclResult_t,
    ) -> Result<()> {
        self.ensure_alive()?;
        let rc = f(self.lib.raw(), self.comm, self.cu_stream());
        self.checked(call, rc)
    }

    /// Enqueues an all-reduce of `count` elements between device buffers (`send == recv` for in place).
    ///
    /// # Safety
    /// `send` and `recv` must be device pointers of this communicator's GPU valid for `count` elements
    /// of `dt` until the stream passes this call.
    pub unsafe fn enqueue_all_reduce(
        &mut self,
        send: u64,
        recv: u64,
        count: usize,
        dt: ElementType,
        op: ReduceOp,
    ) -> Result<()> {
        let (s, r, t, o) = (
            send as *const c_void,
            recv as *mut c_void,
            dtype(dt),
            redop(op),
        );
        // SAFETY: per the caller's contract.
        self.enqueue("ncclAllReduce", |nccl, comm, st| unsafe {
            nccl.ncclAllReduce(s, r, count, t, o, comm, st)
        })
    }

    /// Enqueues an all-gather: `send` has `count`, `recv` has `world_size × count` elements.
    ///
    /// # Safety
    /// As [`NcclCommunicator::enqueue_all_reduce`], for those lengths.
    pub unsafe fn enqueue_all_gather(
        &mut self,
        send: u64,
        recv: u64,
        count: usize,
        dt: ElementType,
    ) -> Result<()> {
        let (s, r, t) = (send as *const c_void, recv as *mut c_void, dtype(dt));
        // SAFETY: per the caller's contract.
        self.enqueue("ncclAllGather", |nccl, comm, st| unsafe {
            nccl.ncclAllGather(s, r, count, t, comm, st)
        })
    }

    /// Enqueues a reduce-scatter: `send` has `world_size × count`, `recv` has `count` elements.
    ///
    /// # Safety
    /// As [`NcclCommunicator::enqueue_all_reduce`], for those lengths.
    pub unsafe fn enqueue_reduce_scatter(
        &mut self,
        send: u64,
        recv: u64,
        count: usize,
        dt: ElementType,
        op: ReduceOp,
    ) -> Result<()> {
        let (s, r, t, o) = (
            send as *const c_void,
            recv as *mut c_void,
            dtype(dt),
            redop(op),
        );
        // SAFETY: per the caller's contract.
        self.enqueue("ncclReduceScatter", |nccl, comm, st| unsafe {
            nccl.ncclReduceScatter(s, r, count, t, o, comm, st)
        })
    }

    /// Enqueues a broadcast of `count` elements from `root`.
    ///
    /// # Safety
    /// As [`NcclCommunicator::enqueue_all_reduce`].
    pub unsafe fn enqueue_broadcast(
        &mut self,
        send: u64,
        recv: u64,
        count: usize,
        dt: ElementType,
        root: usize,
    ) -> Result<()> {
        let (s, r, t) = (send as *const c_void, recv as *mut c_void, dtype(dt));
        // SAFETY: per the caller's contract.
        self.enqueue("ncclBroadcast", |nccl, comm, st| unsafe {
            nccl.ncclBroadcast(s, r, count, t, root as i32, comm, st)
        })
    }

    unsafe fn enqueue_reduce(
        &mut self,
        send: u64,
        recv: u64,
        count: usize,
        dt: ElementType,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let (s, r, t, o) = (
            send as *const c_void,
            recv as *mut c_void,
            dtype(dt),
            redop(op),
        );
        // SAFETY: per the caller's contract.
        self.enqueue("ncclReduce", |nccl, comm, st| unsafe {
            nccl.ncclReduce(s, r, count, t, o, root as i32, comm, st)
        })
    }

    fn upload<T: Element>(&mut self, host: &[T], len_bytes: usize) -> Result<CudaSlice<u8>> {
        let bytes: &[u8] = bytemuck::cast_slice(host);
        let mut dev = self
            .stream
            .alloc_zeros::<u8>(len_bytes.max(1))
            .map_err(cuda("allocate device memory"))
            .map_err(|e| self.fail(e))?;
        if !bytes.is_empty() {
            let mut view = dev.slice_mut(..bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut view)
                .map_err(cuda("copy to the device"))
                .map_err(|e| self.fail(e))?;
        }
        Ok(dev)
    }

    fn download<T: Element>(&mut self, dev: &CudaSlice<u8>, host: &mut [T]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(host);
        if bytes.is_empty() {
            return Ok(());
        }
        let view = dev.slice(..bytes.len());
        self.stream
            .memcpy_dtoh(&view, bytes)
            .map_err(cuda("copy from the device"))
            .map_err(|e| self.fail(e))
    }

    /// Runs one collective on host data: stage to the device, enqueue, wait (watchdog), copy back.
    fn staged<T: Element>(
        &mut self,
        during: &'static str,
        input: &[T],
        output_len: usize,
        in_place: bool,
        enqueue: impl FnOnce(&mut Self, u64, u64) -> Result<()>,
    ) -> Result<CudaSlice<u8>> {
        let elem = size_of::<T>();
        let send = self.upload(input, input.len().max(output_len) * elem)?;
        let mut recv = if in_place {
            None
        } else {
            Some(self.upload::<T>(&[], output_len * elem)?)
        };
        let stream = Arc::clone(&self.stream);
        {
            let (sp, _g1) = send.device_ptr(&stream);
            let rp = match recv.as_mut() {
                Some(r) => r.device_ptr_mut(&stream).0,
                None => sp,
            };
            enqueue(self, sp, rp)?;
        }
        self.wait(during)?;
        Ok(match recv {
            Some(r) => r,
            None => send,
        })
    }
}

impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        if self.failure.is_none() {
            // SAFETY: a valid communicator that no call uses any more.
            unsafe {
                self.lib.raw().ncclCommDestroy(self.comm);
            }
        }
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> &'static str {
        "nccl"
    }

    fn all_reduce<T: Element>(&mut self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check::same_len("all_reduce", send.len(), recv.len())?;
        let n = send.len();
        // SAFETY: both buffers were allocated for n elements on this device by `staged`.
        let out = self.staged("all_reduce", send, n, false, |c, s, r| unsafe {
            c.enqueue_all_reduce(s, r, n, T::DTYPE, op)
        })?;
        self.download(&out, recv)
    }

    fn all_reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let n = buf.len();
        // SAFETY: as above, in place.
        let out = self.staged("all_reduce", buf, n, true, |c, s, r| unsafe {
            c.enqueue_all_reduce(s, r, n, T::DTYPE, op)
        })?;
        self.download(&out, buf)
    }

    fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        check::rank("broadcast", "root", root, self.world_size)?;
        let n = buf.len();
        // SAFETY: as above, in place.
        let out = self.staged("broadcast", buf, n, true, |c, s, r| unsafe {
            c.enqueue_broadcast(s, r, n, T::DTYPE, root)
        })?;
        self.download(&out, buf)
    }

    fn reduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        check::reduce(send.len(), recv.len(), root, self.rank, self.world_size)?;
        let n = send.len();
        // SAFETY: as above.
        let out = self.staged("reduce", send, n, false, |c, s, r| unsafe {
            c.enqueue_reduce(s, r, n, T::DTYPE, op, root)
        })?;
        if self.rank == root {
            self.download(&out, recv)?;
        }
        Ok(())
    }

    fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let count = check::all_gather(send.len(), recv.len(), self.world_size)?;
        // SAFETY: send holds count and recv world_size × count elements.
        let out = self.staged("all_gather", send, recv.len(), false, |c, s, r| unsafe {
            c.enqueue_all_gather(s, r, count, T::DTYPE)
        })?;
        self.download(&out, recv)
    }

    fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let count = check::divisible("all_gather", buf.len(), self.world_size)?;
        let offset = (self.rank * count * size_of::<T>()) as u64;
        // SAFETY: NCCL's in-place all-gather: send = recv + rank × count.
        let out = self.staged("all_gather", buf, buf.len(), true, |c, _s, r| unsafe {
            c.enqueue_all_gather(r + offset, r, count, T::DTYPE)
        })?;
        self.download(&out, buf)
    }

    fn reduce_scatter<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let count = check::reduce_scatter(send.len(), recv.len(), self.world_size)?;
        // SAFETY: send holds world_size × count and recv count elements.
        let out = self.staged("reduce_scatter", send, count, false, |c, s, r| unsafe {
            c.enqueue_reduce_scatter(s, r, count, T::DTYPE, op)
        })?;
        self.download(&out, recv)
    }

    fn reduce_scatter_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let count = check::divisible("reduce_scatter", buf.len(), self.world_size)?;
        let offset = (self.rank * count * size_of::<T>()) as u64;
        // SAFETY: NCCL's in-place reduce-scatter: recv = send + rank × count.
        let out = self.staged("reduce_scatter", buf, buf.len(), true, |c, s, _r| unsafe {
            c.enqueue_reduce_scatter(s, s + offset, count, T::DTYPE, op)
        })?;
        self.download(&out, buf)
    }

    fn send<T: Element>(&mut self, buf: &[T], peer: usize) -> Result<()> {
        check::peer("send", peer, self.rank, self.world_size)?;
        let (n, dt) = (buf.len(), dtype(T::DTYPE));
        self.staged("send", buf, n, true, |c, s, _r| {
            // SAFETY: the staged buffer holds n elements.
            c.enqueue("ncclSend", |nccl, comm, st| unsafe {
                nccl.ncclSend(s as *const c_void, n, dt, peer as i32, comm, st)
            })
        })?;
        Ok(())
    }

    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize) -> Result<()> {
        check::peer("recv", peer, self.rank, self.world_size)?;
        let (n, dt) = (buf.len(), dtype(T::DTYPE));
        let out = self.staged("recv", buf, n, true, |c, s, _r| {
            // SAFETY: the staged buffer holds n elements.
            c.enqueue("ncclRecv", |nccl, comm, st| unsafe {
                nccl.ncclRecv(s as *mut c_void, n, dt, peer as i32, comm, st)
            })
        })?;
        self.download(&out, buf)
    }

    fn barrier(&mut self) -> Result<()> {
        let mut token = [0u8];
        self.all_reduce_in_place(&mut token, ReduceOp::Max)
    }
}
