//! Ctrl-C and SIGTERM in local mode: every pod is stopped and the remaining steps are skipped; and the
//! runner of one prepared job that stops its pods on that signal.

use std::time::Instant;

use kubetrain_client::local::{self, JobPlan, RunEvent, RunSummary};

/// Whether Ctrl-C or SIGTERM came, from the moment it was installed.
#[derive(Clone)]
pub(super) struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Listens for SIGINT and SIGTERM from now on (a later signal is not lost between phases).
    pub(super) fn install() -> Stop {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let _ = tx.send(true);
        });
        Stop(rx)
    }

    pub(super) fn stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the signal came.
    pub(super) async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// Runs `plan` (prepared) to the end, handing every event to `on_event` with the time since start; the
/// pods are stopped on Ctrl-C or SIGTERM.
pub(super) async fn run_plan(
    plan: &JobPlan,
    stop: &Stop,
    mut on_event: impl FnMut(&RunEvent, f64),
) -> RunSummary {
    let (tx, mut rx) = tokio::sync::mpsc::channel(local::EVENT_BUFFER);
    let start = Instant::now();
    let exec = async move {
        let summary = local::execute(plan, &tx, stop.wait()).await;
        drop(tx);
        summary
    };
    let consume = async {
        while let Some(event) = rx.recv().await {
            on_event(&event, start.elapsed().as_secs_f64());
        }
    };
    let (summary, ()) = tokio::join!(exec, consume);
    summary
}
