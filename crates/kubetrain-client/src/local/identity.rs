//! Which process a run record names. The kernel reuses process ids, so a pid alone may name an unrelated
//! process by the time `kubetrain delete --local` reads it: a runner is known by its pid, its start time (clock
//! ticks after boot, `/proc/<pid>/stat` field 22), the boot it started in and the user it runs as. Every
//! `--local` command signals a runner only when all four still match.
//!
//! Elsewhere than Linux (no `/proc`) no process can be verified, so none is signalled and an unfinished run
//! reads as gone.

use serde::{Deserialize, Serialize};

/// A process as it was when a run started: enough to tell it from a later process with the same pid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Its start time in clock ticks after boot (`/proc/<pid>/stat`, field 22).
    pub start_ticks: u64,
    /// The boot it started in (`/proc/sys/kernel/random/boot_id`): start times restart at every boot.
    pub boot_id: String,
    /// The user it runs as.
    pub uid: u32,
}

/// What `/proc/<pid>` says of a live process.
struct ProcStat {
    state: char,
    start_ticks: u64,
    uid: u32,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    use std::os::unix::fs::MetadataExt;
    if pid == 0 || i32::try_from(pid).is_err() {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after its last ')' do not. After it come
    // field 3 (state) ... field 22 (starttime): index 19 of the rest.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start_ticks = fields.get(19)?.parse().ok()?;
    // The owner of /proc/<pid> is the process's effective user.
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(ProcStat {
        state,
        start_ticks,
        uid,
    })
}

/// The state letter and start time of `pid` (`/proc/<pid>/stat`), where `/proc` exists; the local queue's
/// ledger tells its holders apart by them.
pub(crate) fn state_and_start(pid: u32) -> Option<(char, u64)> {
    proc_stat(pid).map(|s| (s.state, s.start_ticks))
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

impl ProcessIdentity {
    /// The identity of live process `pid` now; `None` when it does not exist, has ended (a zombie) or
    /// cannot be read.
    pub fn of(pid: u32) -> Option<Self> {
        let stat = proc_stat(pid)?;
        if stat.state == 'Z' || stat.state == 'X' {
            return None;
        }
        Some(ProcessIdentity {
            pid,
            start_ticks: stat.start_ticks,
            boot_id: boot_id()?,
            uid: stat.uid,
        })
    }

    /// This process.
    pub fn current() -> Option<Self> {
        Self::of(std::process::id())
    }

    /// Whether the process is still the one this identity was taken of: same pid, start time, boot and
    /// user, and not ended.
    pub fn is_alive(&self) -> bool {
        Self::of(self.pid).is_some_and(|now| now == *self)
    }

    /// Kills the process (SIGKILL) only if it is still this one; whether it was signalled. A test or a tool
    /// that stands in for a lost node kills a pod's process this way, never by a bare pid.
    pub fn kill(&self) -> bool {
        self.signal(nix::sys::signal::Signal::SIGKILL)
    }

    /// Sends `signal` to the process only if it is still this one. The check and the signal are two steps;
    /// a pid freed and reused between them within microseconds is the window left, the same as `kill(1)`'s.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) -> bool {
        let Ok(raw) = i32::try_from(self.pid) else {
            return false;
        };
        self.is_alive() && nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal).is_ok()
    }
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_another_start_time_is_not() {
        let me = ProcessIdentity::current().expect("this process has an identity");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(me.uid, euid());
        assert!(me.is_alive());
        // The same pid with another start time is a reused pid: not this process.
        let reused = ProcessIdentity {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(!reused.is_alive());
        let other_boot = ProcessIdentity {
            boot_id: "another-boot".into(),
            ..me.clone()
        };
        assert!(!other_boot.is_alive());
        let other_user = ProcessIdentity {
            uid: me.uid + 1,
            ..me
        };
        assert!(!other_user.is_alive());
    }

    #[test]
    fn a_process_that_does_not_exist_has_no_identity() {
        // Above the kernel's pid_max limit (2^22): never a process.
        assert_eq!(ProcessIdentity::of(4_194_305), None);
        assert_eq!(ProcessIdentity::of(0), None);
        assert_eq!(ProcessIdentity::of(u32::MAX), None);
    }

    #[test]
    fn a_reused_pid_is_never_signalled() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep starts");
        let real = ProcessIdentity::of(child.id()).expect("the child is alive");
        let stale = ProcessIdentity {
            start_ticks: real.start_ticks.wrapping_sub(1),
            ..real.clone()
        };
        assert!(!stale.signal(nix::sys::signal::Signal::SIGKILL));
        assert!(child.try_wait().unwrap().is_none(), "the child still runs");
        assert!(real.signal(nix::sys::signal::Signal::SIGKILL));
        child.wait().unwrap();
    }
}
