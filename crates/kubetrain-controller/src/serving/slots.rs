//! The open connections of one server and the caps on them: at most `max_connections` in all and
//! `max_per_source` from one address. A connection past a cap takes the place of the oldest one still in its
//! head (TLS handshake or request head: a trickling client's), failing that of the oldest idle keep-alive
//! one, never of one whose request was read whole (it is being answered and ends within its deadline).
//! A head younger than [`SHED_AFTER`] is never displaced either: a client that sends its request at once
//! gets that long for its handshake and head however fast trickling clients reconnect, so they only ever
//! displace each other.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use super::Phase;

/// How long a connection's head is safe from being displaced: ample for a TLS handshake and a head sent
/// in one write, and short, so that slots held by trickling clients free up fast enough that the listen
/// backlog does not overflow (a dropped SYN costs the client a 1 s retransmission). With 1 s, 1,500
/// trickling clients from four addresses delayed 2 of 6 valid reviews past 1 s; with 250 ms, none.
pub(super) const SHED_AFTER: Duration = Duration::from_millis(250);

/// The open connections of one server.
#[derive(Debug)]
pub(super) struct Slots {
    open: Mutex<Open>,
    /// Signalled when a connection ends or finishes a request: room may have appeared.
    changed: Notify,
}

#[derive(Debug)]
struct Open {
    /// The id of the next connection: ids grow with each accept, so the map is oldest first.
    next: u64,
    connections: BTreeMap<u64, Connection>,
    max_connections: usize,
    max_per_source: usize,
    /// [`SHED_AFTER`], shorter in tests.
    shed_after: Duration,
}

#[derive(Debug)]
struct Connection {
    source: IpAddr,
    phase: watch::Receiver<Phase>,
    /// Dropped to close the connection (its task waits on the receiver).
    _close: oneshot::Sender<()>,
}

/// A connection's place in [`Slots`], freed when dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.slots.lock().connections.remove(&self.id);
        self.slots.changed.notify_one();
    }
}

impl Slots {
    /// No connections yet; caps below 1 count as 1.
    pub(super) fn new(
        max_connections: usize,
        max_per_source: usize,
        shed_after: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(Open {
                next: 0,
                connections: BTreeMap::new(),
                max_connections: max_connections.max(1),
                max_per_source: max_per_source.max(1),
                shed_after,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once a new connection could be admitted under the overall cap: while every connection is
    /// being answered, nothing is accepted and clients wait in the listen backlog (back-pressure).
    pub(super) async fn room(&self) {
        loop {
            let ripens = {
                let open = self.lock();
                if open.connections.len() < open.max_connections
                    || open.sheddable(|_| true).is_some()
                {
                    return;
                }
                open.next_sheddable()
            };
            // `notify_one` keeps a permit when nobody waits, so a change between the check and here is seen.
            match ripens {
                Some(at) => {
                    tokio::select! {
                        () = self.changed.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }

    /// A connection finished a request: it may be displaced again.
    pub(super) fn request_done(&self) {
        self.changed.notify_one();
    }

    /// Admits a connection from `source` whose phase `phase` tells, closing others as the caps require.
    /// `None` when every connection in the way is being answered: the new one is to be closed at once.
    /// The receiver resolves (with an error) when the connection is closed to make room for a newer one.
    pub(super) fn admit(
        self: &Arc<Self>,
        source: IpAddr,
        phase: watch::Receiver<Phase>,
    ) -> Option<(Ticket, oneshot::Receiver<()>)> {
        let mut open = self.lock();
        let max_per_source = open.max_per_source;
        if open.from(source) >= max_per_source {
            open.shed(|c| c.source == source)?;
        }
        if open.connections.len() >= open.max_connections {
            open.shed(|_| true)?;
        }
        let (close, closed) = oneshot::channel();
        let id = open.next;
        open.next += 1;
        open.connections.insert(
            id,
            Connection {
                source,
                phase,
                _close: close,
            },
        );
        let ticket = Ticket {
            slots: Arc::clone(self),
            id,
        };
        Some((ticket, closed))
    }
}

impl Open {
    fn from(&self, source: IpAddr) -> usize {
        self.connections
            .values()
            .filter(|c| c.source == source)
            .count()
    }

    /// The connection to close first among those `among` picks: the oldest in its head for over
    /// `shed_after`, else the oldest idle one.
    fn sheddable(&self, among: impl Fn(&Connection) -> bool) -> Option<u64> {
        let ripe = Instant::now().checked_sub(self.shed_after);
        let oldest = |wanted: &dyn Fn(&Phase) -> bool| {
            self.connections
                .iter()
                .find(|(_, c)| among(c) && wanted(&c.phase.borrow()))
                .map(|(&id, _)| id)
        };
        oldest(&|p| matches!(p, Phase::Head(since) if ripe.is_some_and(|r| *since <= r)))
            .or_else(|| oldest(&|p| *p == Phase::Idle))
    }

    /// When the youngest head that is not yet [`Self::sheddable`] becomes so.
    fn next_sheddable(&self) -> Option<Instant> {
        self.connections
            .values()
            .filter_map(|c| match *c.phase.borrow() {
                Phase::Head(since) => Some(since + self.shed_after),
                Phase::Idle | Phase::Busy => None,
            })
            .min()
    }

    fn shed(&mut self, among: impl Fn(&Connection) -> bool) -> Option<()> {
        let id = self.sheddable(among)?;
        tracing::debug!(
            source = %self.connections[&id].source,
            "connection cap reached; closing the oldest connection still in its head or idle"
        );
        self.connections.remove(&id);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;
    use tokio::time::Instant;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Admits a connection in `phase`; keeps its phase sender so that the test can move it on.
    fn open(
        slots: &Arc<Slots>,
        source: IpAddr,
        phase: Phase,
    ) -> Option<(Ticket, oneshot::Receiver<()>, watch::Sender<Phase>)> {
        let (tx, rx) = watch::channel(phase);
        slots
            .admit(source, rx)
            .map(|(ticket, closed)| (ticket, closed, tx))
    }

    fn closed(receiver: &mut oneshot::Receiver<()>) -> bool {
        matches!(
            receiver.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        )
    }

    #[test]
    fn a_source_at_its_cap_displaces_its_own_oldest_head_and_never_a_request_being_answered() {
        let slots = Slots::new(10, 2, Duration::ZERO);
        let head = Phase::Head(Instant::now());
        let (_busy, mut busy_closed, _b) = open(&slots, ip(1), Phase::Busy).unwrap();
        let (_first, mut first_closed, _f) = open(&slots, ip(1), head).unwrap();
        let (_other, mut other_closed, _o) = open(&slots, ip(2), head).unwrap();
        let (_second, mut second_closed, _s) = open(&slots, ip(1), head).unwrap();
        assert!(closed(&mut first_closed), "the oldest head of the source");
        assert!(!closed(&mut busy_closed) && !closed(&mut other_closed));
        assert!(!closed(&mut second_closed));
        // Both of the source's connections being answered: a third one is refused, nothing is closed.
        _s.send_replace(Phase::Busy);
        assert!(open(&slots, ip(1), head).is_none());
        assert!(!closed(&mut busy_closed) && !closed(&mut second_closed));
    }

    #[tokio::test]
    async fn the_overall_cap_displaces_heads_then_idle_connections_and_waits_while_all_are_answered()
     {
        let slots = Slots::new(2, 2, Duration::ZERO);
        let (_a, mut a_closed, a) = open(&slots, ip(1), Phase::Idle).unwrap();
        let (_b, mut b_closed, b) = open(&slots, ip(2), Phase::Busy).unwrap();
        slots.room().await; // the idle one can make room
        let (_c, _c_closed, c) = open(&slots, ip(3), Phase::Head(Instant::now())).unwrap();
        assert!(closed(&mut a_closed), "the idle connection made room");
        c.send_replace(Phase::Busy);
        assert!(!closed(&mut b_closed));
        assert!(open(&slots, ip(4), Phase::Idle).is_none(), "all answered");
        // Room appears when a request is done, not before.
        let mut room = std::pin::pin!(slots.room());
        assert!(room.as_mut().now_or_never().is_none());
        b.send_replace(Phase::Idle);
        slots.request_done();
        room.await;
        drop((a, b));
    }

    #[tokio::test(start_paused = true)]
    async fn a_young_head_is_displaced_only_once_it_has_lasted_shed_after() {
        let slots = Slots::new(1, 1, SHED_AFTER);
        let (_young, mut young_closed, _tx) =
            open(&slots, ip(1), Phase::Head(Instant::now())).unwrap();
        assert!(
            open(&slots, ip(2), Phase::Idle).is_none(),
            "too young to go"
        );
        assert!(!closed(&mut young_closed));
        let began = Instant::now();
        slots.room().await;
        assert!(began.elapsed() >= SHED_AFTER);
        assert!(open(&slots, ip(2), Phase::Idle).is_some());
        assert!(closed(&mut young_closed));
    }

    #[tokio::test]
    async fn an_ended_connection_frees_its_slot() {
        let slots = Slots::new(1, 1, Duration::ZERO);
        let (ticket, _closed, _tx) = open(&slots, ip(1), Phase::Busy).unwrap();
        let mut room = std::pin::pin!(slots.room());
        assert!(room.as_mut().now_or_never().is_none());
        drop(ticket);
        room.await;
        assert!(open(&slots, ip(1), Phase::Busy).is_some());
    }
}
