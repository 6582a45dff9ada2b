//! The rings' reader: a thread of its own that keeps both ring buffers
//! drained whatever the collector's loop is doing. The loop waits on the
//! node at every review (a read of a hung filesystem waits up to its
//! deadline, a review up to its budget) and walks the cgroup tree on a
//! new pod's first call; while it did, nothing emptied the rings, and a
//! storm beside a hung mount overflowed them exactly when the node was
//! in trouble (a lost exit is what lets a reused pid inherit an old pod).
//!
//! Why a thread and not the loop's own task: every wait of the loop (the
//! node's readers, cgroupfs, /proc) is a blocking call, and the rings must
//! be read while it blocks. The thread does nothing but read, decode and
//! queue: it shares no state with the diagnosis, so the pipeline stays
//! single-threaded and a review stays a pure function of what it was
//! handed.
//!
//! Fair to the lifecycle (issue 61): each ring has a queue of its own,
//! bounded ([`QUEUE_RECORDS`], [`LIFECYCLE_QUEUE_RECORDS`]) and counted,
//! and the thread never waits on one. A turn reads the lifecycle's ring
//! to its end, then [`CALLS_PER_TURN`] calls at most; a record is read
//! only when its queue has room for it, so a queue the loop has not
//! emptied leaves its ring's records in the kernel, which counts what it
//! cannot keep (`events_lost`, of them `lifecycle_lost`), and
//! [`QueueTotals`] says a queue was full. Before, one queue was shared
//! and the thread waited for room inside its reading of the calls: a
//! storm of calls faster than a slow loop kept it there, and the
//! lifecycle's ring overflowed behind it. The loop takes the lifecycle's
//! records first ([`Queues`]): they are a few a second, and each is a
//! process's whole story, where a call left behind is still counted in
//! its series.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::Received;
use crate::event::{decode, CallEvent, DecodeError, WallClock};
use crate::lifecycle::LifecycleEvent;

/// Calls the queue holds at most: some 8 MB of decoded calls, a few
/// seconds of a storm's streamed records (the kernel streams a budget per
/// series and counts the rest).
pub const QUEUE_RECORDS: usize = 16_384;

/// Lifecycle records the queue holds at most: more than their whole ring
/// (256 KiB) holds at its fullest, so the ring can always be emptied into
/// it while the loop is busy.
pub const LIFECYCLE_QUEUE_RECORDS: usize = 4_096;

/// Calls read in one turn at most before the lifecycle's ring is looked
/// at again (and the stop pipe): a storm can write calls as fast as they
/// are read, and a turn that read them to the end would never end.
const CALLS_PER_TURN: usize = 256;

/// How often the thread looks at the rings when no record woke it: the
/// kernel wakes the reader for a series' first record of a window and for
/// slow calls only, the rest of a burst waits in the ring until looked at;
/// and a full queue is not waited on, it is looked at again this often.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What the queues went through, for the run's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueTotals {
    /// Records queued.
    pub queued: u64,
    /// The most records a queue held at once.
    pub high_water: u64,
    /// Times the thread found a queue full and left its ring to the kernel
    /// until the loop made room (what the ring could not keep meanwhile is
    /// in `events_lost`).
    pub full: u64,
}

#[derive(Default)]
struct Counts {
    queued: AtomicU64,
    high_water: AtomicU64,
    full: AtomicU64,
}

/// The thread, and the queues' reading ends.
pub(super) struct Drain {
    queues: Queues,
    /// Closed to stop the thread: it polls the other end.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    counts: Arc<Counts>,
}

/// The rings the thread owns.
struct Rings {
    calls: RingBuf<MapData>,
    lifecycle: Option<RingBuf<MapData>>,
    clock: WallClock,
}

impl Drain {
    /// Starts the thread on the calls' ring and the lifecycle's, if any.
    pub(super) fn start(
        calls: RingBuf<MapData>,
        lifecycle: Option<RingBuf<MapData>>,
        clock: WallClock,
    ) -> io::Result<Drain> {
        let (senders, queues) = queues(QUEUE_RECORDS, LIFECYCLE_QUEUE_RECORDS);
        let (stop_read, stop) = io::pipe()?;
        let counts = Arc::new(Counts::default());
        let rings = Rings { calls, lifecycle, clock };
        let shared = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name("podstuck-rings".into())
            .spawn(move || read_rings(rings, senders, OwnedFd::from(stop_read), &shared))?;
        Ok(Drain { queues, stop: Some(OwnedFd::from(stop)), thread: Some(thread), counts })
    }

    /// The next record, once there is one; None once the thread is gone.
    pub(super) async fn next(&mut self) -> Option<Received> {
        self.queues.next().await
    }

    /// A record already queued, without waiting.
    pub(super) fn try_next(&mut self) -> Option<Received> {
        self.queues.try_next()
    }

    pub(super) fn totals(&self) -> QueueTotals {
        QueueTotals {
            queued: self.counts.queued.load(Ordering::Relaxed),
            high_water: self.counts.high_water.load(Ordering::Relaxed),
            full: self.counts.full.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Drain {
    /// Stops the thread: the queues close and the stop pipe closes (a poll
    /// ends); it leaves within a look.
    fn drop(&mut self) {
        self.queues.close();
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The loop's ends of the two queues.
struct Queues {
    calls: mpsc::Receiver<Result<CallEvent, DecodeError>>,
    lifecycle: mpsc::Receiver<Result<LifecycleEvent, DecodeError>>,
}

impl Queues {
    /// The next record, the lifecycle's first; None once both queues are
    /// closed and empty. Cancel-safe, as each queue's `recv` is.
    async fn next(&mut self) -> Option<Received> {
        tokio::select! {
            biased;
            Some(record) = self.lifecycle.recv() => Some(Received::Lifecycle(record)),
            Some(record) = self.calls.recv() => Some(Received::Call(record)),
            else => None,
        }
    }

    /// A record already queued, the lifecycle's first, without waiting.
    fn try_next(&mut self) -> Option<Received> {
        match self.lifecycle.try_recv() {
            Ok(record) => Some(Received::Lifecycle(record)),
            Err(_) => self.calls.try_recv().ok().map(Received::Call),
        }
    }

    fn close(&mut self) {
        self.calls.close();
        self.lifecycle.close();
    }
}

/// The thread's ends of the two queues.
struct Senders {
    calls: Queue<Result<CallEvent, DecodeError>>,
    lifecycle: Queue<Result<LifecycleEvent, DecodeError>>,
}

/// Two queues of these sizes, the thread's ends and the loop's.
fn queues(calls: usize, lifecycle: usize) -> (Senders, Queues) {
    let (calls_tx, calls) = mpsc::channel(calls);
    let (lifecycle_tx, lifecycle) = mpsc::channel(lifecycle);
    let senders = Senders { calls: Queue::new(calls_tx), lifecycle: Queue::new(lifecycle_tx) };
    (senders, Queues { calls, lifecycle })
}

/// One queue's sending end, and whether the thread last found it full.
struct Queue<T> {
    tx: mpsc::Sender<T>,
    full: bool,
}

impl<T> Queue<T> {
    fn new(tx: mpsc::Sender<T>) -> Queue<T> {
        Queue { tx, full: false }
    }

    /// Whether it can take a record now; found full after having had room,
    /// it is counted once.
    fn has_room(&mut self, counts: &Counts) -> bool {
        let room = self.tx.capacity() > 0;
        if !room && !self.full {
            counts.full.fetch_add(1, Ordering::Relaxed);
        }
        self.full = !room;
        room
    }

    /// Hands `record` to the loop; false once the loop is gone. Called
    /// after [`Queue::has_room`]: the thread is the one sender, so the
    /// room it saw is still there and the record is never waited on.
    fn send(&self, record: T, counts: &Counts) -> bool {
        let sent = match self.tx.try_send(record) {
            Ok(()) => true,
            // Not reached (room was seen); a record read is never dropped.
            Err(TrySendError::Full(record)) => self.tx.blocking_send(record).is_ok(),
            Err(TrySendError::Closed(_)) => false,
        };
        if sent {
            counts.queued.fetch_add(1, Ordering::Relaxed);
            let held = (self.tx.max_capacity() - self.tx.capacity()) as u64;
            counts.high_water.fetch_max(held, Ordering::Relaxed);
        }
        sent
    }
}

/// The thread: waits for a record (or a look's time), takes a turn, and
/// again, until told to stop or the loop is gone.
fn read_rings(mut rings: Rings, mut senders: Senders, stop: OwnedFd, counts: &Counts) {
    let (calls_fd, lifecycle_fd) = (rings.calls.as_raw_fd(), rings.lifecycle.as_ref().map_or(-1, AsRawFd::as_raw_fd));
    loop {
        // A ring whose queue is full is not waited on (it would wake the
        // thread at once, again and again): its records stay in the
        // kernel's ring until the loop makes room, looked at every look.
        let watched: [RawFd; 3] = [
            if senders.calls.has_room(counts) { calls_fd } else { -1 },
            if senders.lifecycle.has_room(counts) { lifecycle_fd } else { -1 },
            stop.as_raw_fd(),
        ];
        let mut polled = watched.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        // SAFETY: an array of pollfds, valid for the call (an fd of -1 is ignored).
        let ready =
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, LOOK_EVERY.as_millis() as i32) };
        if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
        if polled[2].revents != 0 || senders.calls.tx.is_closed() {
            return;
        }
        let Rings { calls, lifecycle, clock } = &mut rings;
        let read_lifecycle = || lifecycle.as_mut()?.next().map(|item| crate::lifecycle::decode(&item, clock));
        let read_call = || calls.next().map(|item| decode(&item, clock));
        if !turn(&mut senders, read_lifecycle, read_call, counts) {
            return;
        }
    }
}

/// One turn: the lifecycle's ring to its end, then [`CALLS_PER_TURN`]
/// calls at most, each ring read only while its queue has room (a full
/// queue leaves the rest in the kernel's ring, never waited on).
/// `read_lifecycle` and `read_call` take a ring's next record, decoded.
/// False once the loop is gone.
fn turn(
    senders: &mut Senders,
    mut read_lifecycle: impl FnMut() -> Option<Result<LifecycleEvent, DecodeError>>,
    mut read_call: impl FnMut() -> Option<Result<CallEvent, DecodeError>>,
    counts: &Counts,
) -> bool {
    while senders.lifecycle.has_room(counts) {
        let Some(record) = read_lifecycle() else { break };
        if !senders.lifecycle.send(record, counts) {
            return false;
        }
    }
    for _ in 0..CALLS_PER_TURN {
        if !senders.calls.has_room(counts) {
            break;
        }
        let Some(record) = read_call() else { break };
        if !senders.calls.send(record, counts) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_call() -> Result<CallEvent, DecodeError> {
        Err(DecodeError::TooShort(0))
    }

    fn bad_lifecycle() -> Result<LifecycleEvent, DecodeError> {
        Err(DecodeError::TooShort(1))
    }

    /// A ring of `n` records, and how many were read from it.
    fn ring<T>(n: usize, record: fn() -> T) -> (impl FnMut() -> Option<T>, Arc<AtomicU64>) {
        let read = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&read);
        let next = move || {
            let at = counted.load(Ordering::Relaxed);
            (at < n as u64).then(|| {
                counted.fetch_add(1, Ordering::Relaxed);
                record()
            })
        };
        (next, read)
    }

    /// A storm of calls behind a loop that takes none (its queue full)
    /// never keeps the lifecycle's records waiting: each turn reads their
    /// ring to the end, reads no call it could not queue, and never blocks.
    #[test]
    fn a_storm_of_calls_behind_a_full_queue_never_keeps_the_lifecycle_waiting() {
        let (mut senders, mut queues) = queues(4, 16);
        let counts = Counts::default();
        let (mut storm, calls_read) = ring(usize::MAX, bad_call);
        let (lifecycle, lifecycle_read) = ring(5, bad_lifecycle);
        assert!(turn(&mut senders, lifecycle, &mut storm, &counts));
        assert_eq!(lifecycle_read.load(Ordering::Relaxed), 5);
        assert_eq!(calls_read.load(Ordering::Relaxed), 4, "a call read with no room would be lost");
        // The loop still takes nothing: more exits come, and are queued.
        let (lifecycle, lifecycle_read) = ring(3, bad_lifecycle);
        assert!(turn(&mut senders, lifecycle, &mut storm, &counts));
        assert_eq!(lifecycle_read.load(Ordering::Relaxed), 3);
        assert_eq!(calls_read.load(Ordering::Relaxed), 4);
        assert_eq!(counts.full.load(Ordering::Relaxed), 1, "found full once, however long it stays full");
        assert_eq!(counts.queued.load(Ordering::Relaxed), 12);
        let taken: Vec<bool> =
            std::iter::from_fn(|| queues.try_next()).map(|r| matches!(r, Received::Lifecycle(_))).collect();
        assert_eq!(taken, [[true; 8].as_slice(), &[false; 4]].concat(), "the lifecycle's records first");
    }

    /// A turn reads the lifecycle first and a bounded share of calls, so
    /// a storm the loop keeps up with still lets the lifecycle in often.
    #[test]
    fn a_turn_reads_at_most_its_share_of_a_storm() {
        let (mut senders, _queues) = queues(QUEUE_RECORDS, 16);
        let counts = Counts::default();
        let (storm, calls_read) = ring(usize::MAX, bad_call);
        let (lifecycle, lifecycle_read) = ring(2, bad_lifecycle);
        assert!(turn(&mut senders, lifecycle, storm, &counts));
        assert_eq!(lifecycle_read.load(Ordering::Relaxed), 2);
        assert_eq!(calls_read.load(Ordering::Relaxed), CALLS_PER_TURN as u64);
        assert_eq!(counts.full.load(Ordering::Relaxed), 0);
    }

    /// A lifecycle queue the loop has not emptied leaves the rest of its
    /// ring to the kernel (which counts what it cannot keep), counted as
    /// full; the calls are read all the same.
    #[test]
    fn a_full_lifecycle_queue_leaves_its_ring_to_the_kernel_and_is_counted() {
        let (mut senders, _queues) = queues(16, 2);
        let counts = Counts::default();
        let (lifecycle, lifecycle_read) = ring(5, bad_lifecycle);
        let (calls, calls_read) = ring(3, bad_call);
        assert!(turn(&mut senders, lifecycle, calls, &counts));
        assert_eq!(lifecycle_read.load(Ordering::Relaxed), 2);
        assert_eq!(calls_read.load(Ordering::Relaxed), 3);
        assert_eq!(counts.full.load(Ordering::Relaxed), 1);
    }

    /// The loop waits for either queue and takes the lifecycle's record
    /// before calls queued earlier; it ends once the thread is gone.
    #[test]
    fn the_loop_takes_a_lifecycle_record_before_calls_queued_earlier() {
        let (mut senders, mut queues) = queues(8, 8);
        let counts = Counts::default();
        let (calls, _) = ring(3, bad_call);
        let (nothing, _) = ring(0, bad_lifecycle);
        assert!(turn(&mut senders, nothing, calls, &counts));
        let (exit, _) = ring(1, bad_lifecycle);
        let (no_calls, _) = ring(0, bad_call);
        assert!(turn(&mut senders, exit, no_calls, &counts));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let first = runtime.block_on(queues.next());
        assert!(matches!(first, Some(Received::Lifecycle(_))));
        drop(senders);
        let rest: Vec<Received> = std::iter::from_fn(|| runtime.block_on(queues.next())).collect();
        assert_eq!(rest.len(), 3, "the calls, then None once the thread's ends are gone");
        assert!(rest.iter().all(|r| matches!(r, Received::Call(_))));
    }

    /// The loop gone (its queues closed), a turn says so and the thread ends.
    #[test]
    fn a_turn_ends_the_thread_once_the_loop_is_gone() {
        let (mut senders, mut queues) = queues(8, 8);
        queues.close();
        let counts = Counts::default();
        let (lifecycle, _) = ring(1, bad_lifecycle);
        let (calls, _) = ring(1, bad_call);
        assert!(!turn(&mut senders, lifecycle, calls, &counts));
    }
}
