//! The few Linux calls the shared-memory transport needs: futex wait/wake on a shared word and a liveness
//! check of a peer process.
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps until `word` may have changed from `expected`, `wake` is called, or `timeout` passes.
///
/// Not `FUTEX_PRIVATE_FLAG`: the word lives in a file mapping shared between processes.
#[cfg(target_os = "linux")]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread (in any process) sleeping in [`futex_wait`] on `word`.
#[cfg(target_os = "linux")]
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: as above; FUTEX_WAKE does not touch the memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Portable fallback: a short sleep instead of a futex.
#[cfg(not(target_os = "linux"))]
pub(crate) fn futex_wait(_word: &AtomicU32, _expected: u32, timeout: Duration) {
    std::thread::sleep(timeout.min(Duration::from_micros(200)));
}

/// Portable fallback: waiters poll, nothing to wake.
#[cfg(not(target_os = "linux"))]
pub(crate) fn futex_wake(_word: &AtomicU32) {}

/// Whether process `pid` still exists (a zombie counts as gone only once reaped; the kernel's answer).
#[cfg(unix)]
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Without `kill(2)` liveness is unknown: assume alive and rely on the timeout.
#[cfg(not(unix))]
pub(crate) fn process_alive(_pid: u32) -> bool {
    true
}

/// Pins the calling thread to the `index`-th CPU this process may run on (as MPI binds ranks to cores),
/// so two busy ranks are never scheduled on one core. Returns the CPU, or `None` if it could not pin.
#[cfg(target_os = "linux")]
pub(crate) fn pin_to_allowed_cpu(index: usize) -> Option<usize> {
    // SAFETY: cpu_set_t is plain data; the calls read and write only the set passed to them.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        let cpu = *allowed.get(index)?;
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        (libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) == 0).then_some(cpu)
    }
}

/// Pinning is a Linux feature here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_to_allowed_cpu(_index: usize) -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn futex_wait_returns_after_timeout_when_nobody_wakes() {
        let word = AtomicU32::new(7);
        let start = Instant::now();
        futex_wait(&word, 7, Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn futex_wake_releases_a_waiter() {
        let word = Arc::new(AtomicU32::new(0));
        let w2 = Arc::clone(&word);
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            while w2.load(Ordering::SeqCst) == 0 {
                futex_wait(&w2, 0, Duration::from_secs(5));
            }
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        word.store(1, Ordering::SeqCst);
        futex_wake(&word);
        let waited = t.join().unwrap();
        assert!(
            waited < Duration::from_secs(4),
            "waiter was not woken: {waited:?}"
        );
    }

    #[test]
    fn liveness_of_self_and_of_a_reaped_child() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }
}
