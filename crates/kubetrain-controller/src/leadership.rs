//! Who may write: the controller only applies objects and writes status while it holds the leader
//! Lease. Reads and the reconcile computation run on every replica so that a new leader starts warm.

use tokio::sync::watch;

/// A read-only view of "this replica is the leader", shared by everything that writes to the cluster.
///
/// The leader-election task owns the sending side ([`Leadership::channel`]); tests and single-replica
/// setups use [`Leadership::always`].
#[derive(Clone, Debug)]
pub struct Leadership {
    is_leader: watch::Receiver<bool>,
}

impl Leadership {
    /// A view that always says "leader" (leader election disabled, or tests).
    pub fn always() -> Self {
        let (_, is_leader) = watch::channel(true);
        Self { is_leader }
    }

    /// A new view starting as "not leader", with the sender that flips it.
    pub fn channel() -> (watch::Sender<bool>, Self) {
        let (tx, is_leader) = watch::channel(false);
        (tx, Self { is_leader })
    }

    /// Whether this replica currently holds the Lease.
    pub fn is_leader(&self) -> bool {
        *self.is_leader.borrow()
    }

    /// Waits until this replica becomes the leader (returns at once if it is).
    ///
    /// Returns `false` when the election task is gone and leadership can never be gained.
    pub async fn acquired(&mut self) -> bool {
        self.is_leader.wait_for(|leader| *leader).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn follows_the_election_task() {
        let (tx, mut view) = Leadership::channel();
        assert!(!view.is_leader());
        tx.send(true).unwrap();
        assert!(view.acquired().await);
        assert!(view.is_leader());
        tx.send(false).unwrap();
        assert!(!view.is_leader());
        drop(tx);
        assert!(
            !view.acquired().await,
            "no election task: leadership never comes"
        );
    }

    #[test]
    fn always_is_leader() {
        assert!(Leadership::always().is_leader());
    }
}
