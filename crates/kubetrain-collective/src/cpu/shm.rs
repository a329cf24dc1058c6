//! A single-producer single-consumer message queue in a shared memory file: the transport between ranks
//! that share a host (and a `/dev/shm`).
//!
//! Layout: one 4 KiB header page (atomic head and tail counters, per-slot length and tag, an abort flag,
//! both pids), then `slots` fixed-size slots. The sender fills slot `head % slots` in place and bumps
//! `head`; the receiver reduces or copies straight out of slot `tail % slots` and bumps `tail`, so a message
//! costs one copy in and one read out. Waiters spin briefly, then sleep on a futex.
#![allow(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::MmapMut;

use super::ctx::{LinkCtx, WaitPolicy, mismatch};
use super::sys;
use crate::error::{CollectiveError, Result};

const MAGIC: u64 = 0x6b75_6265_7368_6d31; // "kubeshm1"
const HEADER_BYTES: usize = 4096;
/// Most slots a queue may have (the header holds one metadata entry per slot).
pub(crate) const MAX_SLOTS: usize = 64;
/// How often a sleeping waiter wakes to check the peer's process and the deadline.
const NAP: Duration = Duration::from_millis(20);

#[repr(C)]
struct SlotMeta {
    len: AtomicU64,
    tag: AtomicU32,
    _pad: AtomicU32,
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    slots: AtomicU32,
    slot_size: AtomicU32,
    head: AtomicU32,
    tail: AtomicU32,
    abort: AtomicU32,
    head_waiters: AtomicU32,
    tail_waiters: AtomicU32,
    sender_pid: AtomicU32,
    receiver_pid: AtomicU32,
    _pad: AtomicU32,
    meta: [SlotMeta; MAX_SLOTS],
}

const _: () = assert!(size_of::<Header>() <= HEADER_BYTES);

/// One end of a shared memory queue.
pub(crate) struct ShmQueue {
    map: MmapMut,
    path: PathBuf,
    slots: u32,
    slot_size: usize,
    /// Our copy of the counter we own (head for the sender, tail for the receiver).
    cursor: u32,
    /// How long a dropped sender waits for a receiver that has not attached yet.
    drop_grace: Duration,
}

impl ShmQueue {
    fn header(&self) -> &Header {
        // SAFETY: the map is at least HEADER_BYTES long, page aligned, and Header holds only atomics.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    fn slot_ptr(&self, idx: u32) -> *mut u8 {
        let offset = HEADER_BYTES + idx as usize * self.slot_size;
        // SAFETY: idx < slots and the file length was checked to cover every slot.
        unsafe { (self.map.as_ptr() as *mut u8).add(offset) }
    }

    /// Creates the queue file (sender side). Fails if the file exists.
    pub(crate) fn create(
        path: &Path,
        slots: usize,
        slot_size: usize,
        drop_grace: Duration,
    ) -> std::io::Result<Self> {
        let slots = slots.clamp(1, MAX_SLOTS);
        let slot_size = slot_size.max(64).next_multiple_of(64);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        file.set_len((HEADER_BYTES + slots * slot_size) as u64)?;
        // SAFETY: the file was just created by us and is only ever accessed through atomics (header) and
        // the slot protocol (data), in this process and the receiver's.
        let map = unsafe { MmapMut::map_mut(&file)? };
        let queue = ShmQueue {
            map,
            path: path.to_path_buf(),
            slots: slots as u32,
            slot_size,
            cursor: 0,
            drop_grace,
        };
        let h = queue.header();
        h.slots.store(slots as u32, Ordering::Relaxed);
        h.slot_size.store(slot_size as u32, Ordering::Relaxed);
        h.sender_pid.store(std::process::id(), Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(queue)
    }

    /// Opens a queue the peer created (receiver side), waiting up to `ctx.timeout` for it to appear, then
    /// unlinks the file so nothing is left behind even if a rank crashes later.
    pub(crate) fn open(path: &Path, ctx: &LinkCtx, during: &str) -> Result<Self> {
        let start = Instant::now();
        let file = loop {
            match OpenOptions::new().read(true).write(true).open(path) {
                Ok(f) if f.metadata().map(|m| m.len()).unwrap_or(0) >= HEADER_BYTES as u64 => {
                    break f;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CollectiveError::io(format!("open {}", path.display()), e)),
            }
            if start.elapsed() >= ctx.timeout {
                return Err(ctx.timeout_error(start.elapsed(), during));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let queue = Self::map_existing(file, path, ctx, during, start)?;
        queue
            .header()
            .receiver_pid
            .store(std::process::id(), Ordering::Release);
        let _ = fs::remove_file(path);
        Ok(queue)
    }

    fn map_existing(
        file: File,
        path: &Path,
        ctx: &LinkCtx,
        during: &str,
        start: Instant,
    ) -> Result<Self> {
        let len = file
            .metadata()
            .map_err(|e| CollectiveError::io(format!("stat {}", path.display()), e))?
            .len() as usize;
        // SAFETY: see `create`; the length is validated against the header before any slot is touched.
        let map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| CollectiveError::io(format!("mmap {}", path.display()), e))?;
        let mut queue = ShmQueue {
            map,
            path: path.to_path_buf(),
            slots: 0,
            slot_size: 0,
            cursor: 0,
            drop_grace: Duration::ZERO,
        };
        while queue.header().magic.load(Ordering::Acquire) != MAGIC {
            if start.elapsed() >= ctx.timeout {
                return Err(ctx.timeout_error(start.elapsed(), during));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let slots = queue.header().slots.load(Ordering::Relaxed);
        let slot_size = queue.header().slot_size.load(Ordering::Relaxed) as usize;
        if slots == 0
            || slots as usize > MAX_SLOTS
            || HEADER_BYTES + slots as usize * slot_size > len
        {
            return Err(CollectiveError::Protocol {
                rank: ctx.rank,
                peer: ctx.peer,
                detail: format!("shared memory queue {} has a bad geometry", path.display()),
            });
        }
        queue.slots = slots;
        queue.slot_size = slot_size;
        Ok(queue)
    }

    fn attached_pid(&self) -> u32 {
        self.header().receiver_pid.load(Ordering::Acquire)
    }

    /// Waits (sender side) until the receiver has mapped the queue, so the file may be unlinked.
    pub(crate) fn wait_attached(&self, ctx: &LinkCtx, during: &str) -> Result<()> {
        let start = Instant::now();
        while self.attached_pid() == 0 {
            if self.header().abort.load(Ordering::SeqCst) != 0 {
                return Err(CollectiveError::Aborted {
                    rank: ctx.rank,
                    during: during.to_string(),
                });
            }
            if start.elapsed() >= ctx.timeout {
                return Err(ctx.timeout_error(start.elapsed(), during));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Marks the queue failed and wakes both ends.
    pub(crate) fn abort(&self) {
        let h = self.header();
        h.abort.store(1, Ordering::SeqCst);
        sys::futex_wake(&h.head);
        sys::futex_wake(&h.tail);
    }

    /// Waits for a free slot, lets `fill` write `len` bytes into it, and publishes it with `tag`.
    pub(crate) fn send<R>(
        &mut self,
        ctx: &LinkCtx,
        during: &str,
        tag: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<R>,
    ) -> Result<R> {
        // A release-build check too: the unsafe slice below relies on it, and it costs one compare per message.
        assert!(
            len <= self.slot_size,
            "shared-memory message of {len} bytes exceeds the slot size {}",
            self.slot_size
        );
        let head = self.cursor;
        let slots = self.slots;
        let h = self.header();
        // The receiver's pid is known once it attached; before that only the deadline applies.
        self.wait(
            ctx,
            during,
            &h.tail,
            &h.tail_waiters,
            Peer::Receiver,
            |tail| head.wrapping_sub(tail) < slots,
        )?;
        let idx = head % slots;
        // SAFETY: slot `idx` is free (the receiver consumed it) and only the sender writes it until `head`
        // is published; `len` fits in a slot (asserted above).
        let data = unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(idx), len) };
        let out = fill(data)?;
        let next = head.wrapping_add(1);
        let h = self.header();
        let meta = &h.meta[idx as usize];
        meta.len.store(len as u64, Ordering::Relaxed);
        meta.tag.store(tag, Ordering::Relaxed);
        h.head.store(next, Ordering::SeqCst);
        if h.head_waiters.load(Ordering::SeqCst) > 0 {
            sys::futex_wake(&h.head);
        }
        self.cursor = next;
        Ok(out)
    }

    /// Waits for the next message, checks its tag and length, lets `read` consume it, and frees the slot.
    pub(crate) fn recv<R>(
        &mut self,
        ctx: &LinkCtx,
        during: &str,
        tag: u32,
        len: usize,
        read: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let tail = self.cursor;
        let slots = self.slots;
        let h = self.header();
        self.wait(
            ctx,
            during,
            &h.head,
            &h.head_waiters,
            Peer::Sender,
            |head| head != tail,
        )?;
        let idx = tail % slots;
        let meta = &h.meta[idx as usize];
        let (got_len, got_tag) = (
            meta.len.load(Ordering::Relaxed) as usize,
            meta.tag.load(Ordering::Relaxed),
        );
        if got_len != len || got_tag != tag {
            return Err(mismatch(ctx, tag, len, got_tag, got_len));
        }
        // SAFETY: the sender published this slot (Acquire on head in `wait`) and will not touch it until
        // `tail` moves past it; got_len <= slot_size was written by the sender's own bounds.
        let data =
            unsafe { std::slice::from_raw_parts(self.slot_ptr(idx), len.min(self.slot_size)) };
        let out = read(data)?;
        let next = tail.wrapping_add(1);
        let h = self.header();
        h.tail.store(next, Ordering::SeqCst);
        if h.tail_waiters.load(Ordering::SeqCst) > 0 {
            sys::futex_wake(&h.tail);
        }
        self.cursor = next;
        Ok(out)
    }

    /// Spins (per the wait policy), then sleeps on `word` until `ready` holds, the queue aborts, the peer
    /// process is gone, or the timeout passes.
    fn wait(
        &self,
        ctx: &LinkCtx,
        during: &str,
        word: &AtomicU32,
        waiters: &AtomicU32,
        peer: Peer,
        ready: impl Fn(u32) -> bool,
    ) -> Result<()> {
        if ready(word.load(Ordering::Acquire)) {
            return Ok(());
        }
        let WaitPolicy { spin, yield_for } = ctx.wait;
        if !yield_for.is_zero() {
            let begin = Instant::now();
            while begin.elapsed() < yield_for {
                std::thread::yield_now();
                if ready(word.load(Ordering::Acquire)) {
                    return Ok(());
                }
                if self.header().abort.load(Ordering::Relaxed) != 0 {
                    break;
                }
            }
        }
        if !spin.is_zero() {
            let begin = Instant::now();
            let mut i = 0u32;
            loop {
                if ready(word.load(Ordering::Acquire)) {
                    return Ok(());
                }
                i = i.wrapping_add(1);
                // Reading the clock costs more than a pause: check it every 64 rounds.
                if i.is_multiple_of(64)
                    && (begin.elapsed() >= spin || self.header().abort.load(Ordering::Relaxed) != 0)
                {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let h = self.header();
        let start = Instant::now();
        let mut naps = 0u32;
        loop {
            if h.abort.load(Ordering::SeqCst) != 0 {
                return Err(CollectiveError::Aborted {
                    rank: ctx.rank,
                    during: during.to_string(),
                });
            }
            let pid = match peer {
                Peer::Sender => h.sender_pid.load(Ordering::Acquire),
                Peer::Receiver => h.receiver_pid.load(Ordering::Acquire),
            };
            // The liveness check is a system call: only once a nap passed without news (oversubscribed
            // ranks come here on every message).
            if naps > 0 && pid != 0 && !sys::process_alive(pid) {
                // A message posted just before the peer exited is still valid.
                if ready(word.load(Ordering::Acquire)) {
                    return Ok(());
                }
                return Err(CollectiveError::PeerLost {
                    rank: ctx.rank,
                    peer: ctx.peer,
                    during: during.to_string(),
                    reason: format!("process {pid} exited"),
                });
            }
            let elapsed = start.elapsed();
            if elapsed >= ctx.timeout {
                return Err(ctx.timeout_error(elapsed, during));
            }
            waiters.fetch_add(1, Ordering::SeqCst);
            let current = word.load(Ordering::SeqCst);
            if !ready(current) && h.abort.load(Ordering::SeqCst) == 0 {
                sys::futex_wait(word, current, NAP.min(ctx.timeout - elapsed));
            }
            waiters.fetch_sub(1, Ordering::SeqCst);
            if ready(word.load(Ordering::Acquire)) {
                return Ok(());
            }
            naps += 1;
        }
    }
}

impl Drop for ShmQueue {
    fn drop(&mut self) {
        // The receiver unlinks on open. A sender that already posted messages gives a late receiver a
        // grace period to attach, so that a rank which sends and exits at once does not lose its data.
        if self.cursor != 0 && self.attached_pid() == 0 {
            let start = Instant::now();
            while self.attached_pid() == 0
                && self.header().abort.load(Ordering::SeqCst) == 0
                && start.elapsed() < self.drop_grace
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = fs::remove_file(&self.path);
    }
}

#[derive(Clone, Copy)]
enum Peer {
    Sender,
    Receiver,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound the unsafe slice in `send` relies on holds in release builds too.
    #[test]
    #[should_panic(expected = "exceeds the slot size 64")]
    fn send_longer_than_a_slot_panics_before_touching_memory() {
        let path =
            std::env::temp_dir().join(format!("kubetrain-shm-assert-{}", std::process::id()));
        let _ = fs::remove_file(&path);
        let mut queue = ShmQueue::create(&path, 1, 64, Duration::ZERO).expect("queue file");
        let _ = fs::remove_file(&path);
        let ctx = LinkCtx {
            rank: 0,
            peer: 1,
            timeout: Duration::from_millis(10),
            wait: WaitPolicy::for_local_ranks(2, 2),
        };
        let _ = queue.send(&ctx, "test", 0, 65, |_| Ok(()));
    }
}
