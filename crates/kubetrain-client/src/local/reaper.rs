//! Every process a local container starts is stopped with it, including those that leave its process group
//! (`setsid`, a double fork), as the end of a pod's PID namespace stops everything in it.
//!
//! Each container process gets [`MARKER_ENV`]` = <run id>/<pod>/<container>`, which every descendant
//! inherits. When the container ends (it exits, fails, or the run is stopped), the runner kills its process
//! group and then every process that still carries its marker (found in `/proc/<pid>/environ`), until none
//! is left.
//!
//! [`adopt_orphans`] also makes this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): orphans of
//! the pods are re-parented to it instead of to init, their exits are collected, and at the end of a run
//! every re-parented process still alive is stopped, even one that cleared its environment. `kubetrain run`
//! calls it; a program that starts other children of its own and runs local jobs through the library should
//! not, since then those children would be stopped too.
//!
//! Elsewhere than Linux (no `/proc`), only the process group is stopped.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// The environment variable that marks every process of one local container and its descendants.
pub const MARKER_ENV: &str = "KUBETRAIN_LOCAL_CONTAINER";

/// Whether [`adopt_orphans`] made this process a subreaper.
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Container processes the runner started and still waits for: never collected or stopped as orphans.
static ROOTS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Makes this process the reaper of the local pods' orphans (see the module documentation); returns
/// whether the system supports it (Linux only).
pub fn adopt_orphans() -> bool {
    #[cfg(target_os = "linux")]
    {
        if nix::sys::prctl::set_child_subreaper(true).is_ok() {
            ADOPTING.store(true, Ordering::Release);
            return true;
        }
    }
    false
}

/// Records a container process the runner waits for itself.
pub(crate) fn register_root(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok())
        && let Ok(mut roots) = ROOTS.lock()
    {
        roots.insert(pid);
    }
}

/// Forgets a container process once it has been waited for.
pub(crate) fn unregister_root(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok())
        && let Ok(mut roots) = ROOTS.lock()
    {
        roots.remove(&pid);
    }
}

fn own_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

/// Every process id in `/proc`.
fn pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// State letter and parent of `pid` (`/proc/<pid>/stat`).
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after its last ')' do not.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Live processes (not this one) whose environment holds `entry` (`NAME=value`).
fn carrying(entry: &str) -> Vec<i32> {
    let me = own_pid();
    pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == entry.as_bytes()))
        })
        .collect()
}

fn marker_entry(marker: &str) -> String {
    format!("{MARKER_ENV}={marker}")
}

/// Sends `signal` to every live process carrying `marker`.
pub(crate) fn signal_marked(marker: &str, signal: Signal) {
    for pid in carrying(&marker_entry(marker)) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Kills every process carrying `marker` until none is left (a process may fork while it is being killed),
/// then collects the exits of those that were re-parented here.
pub(crate) async fn kill_marked(marker: &str) {
    let entry = marker_entry(marker);
    let mut killed = BTreeSet::new();
    // Bounded: a fork bomb that outruns SIGKILL for a second is left to the process group kill.
    for _ in 0..100 {
        let alive = carrying(&entry);
        if alive.is_empty() {
            break;
        }
        for pid in alive {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.insert(pid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    collect(&killed).await;
}

/// Kills every process of user `uid` whose environment holds `entry` (`NAME=value`: a run's token), until
/// none is left: what [`super::record::RunRecord::stop`] leaves of a run after its runner. Processes of other
/// users are never touched, whoever calls it (root included).
pub(crate) fn kill_run(entry: &str, uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let owned = |pid: i32| std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid);
    // Bounded: a fork bomb that outruns SIGKILL this long is left where it is.
    for _ in 0..100 {
        let alive: Vec<i32> = carrying(entry).into_iter().filter(|&p| owned(p)).collect();
        if alive.is_empty() {
            return;
        }
        for pid in alive {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops every process re-parented to this one that the runner did not start itself, and collects the exits
/// (only after [`adopt_orphans`]; otherwise orphans belong to init and were found by their marker).
pub(crate) async fn stop_orphans() {
    if !ADOPTING.load(Ordering::Acquire) {
        return;
    }
    let me = own_pid();
    let mut stopped = BTreeSet::new();
    for _ in 0..100 {
        let roots = ROOTS.lock().map(|r| r.clone()).unwrap_or_default();
        let orphans: Vec<i32> = pids()
            .into_iter()
            .filter(|pid| !roots.contains(pid))
            .filter(|&pid| stat(pid).is_some_and(|(state, parent)| parent == me && state != 'Z'))
            .collect();
        if orphans.is_empty() {
            break;
        }
        for pid in orphans {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            stopped.insert(pid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let zombies: BTreeSet<i32> = pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|(state, parent)| parent == me && state == 'Z'))
        .collect();
    let roots = ROOTS.lock().map(|r| r.clone()).unwrap_or_default();
    stopped.extend(zombies.difference(&roots));
    collect(&stopped).await;
}

/// Waits for those of `pids` that are (or become) zombie children of this process, so that none lingers.
async fn collect(pids: &BTreeSet<i32>) {
    let me = own_pid();
    let mut left: Vec<i32> = pids.iter().copied().collect();
    for _ in 0..100 {
        left.retain(|&pid| match stat(pid) {
            // Not our child (init has it) or gone: nothing to collect.
            None => false,
            Some((_, parent)) if parent != me => false,
            Some(('Z', _)) => {
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
                false
            }
            // Killed, not yet exited.
            Some(_) => true,
        });
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
