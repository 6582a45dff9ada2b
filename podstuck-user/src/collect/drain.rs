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
//! handed. The queue is bounded ([`QUEUE_RECORDS`], a few MB at most)
//! and counted: when the loop falls that far behind, the thread waits for
//! room rather than drop a record, the kernel's ring fills behind it and
//! the kernel counts what it could not keep (`events_lost`), so every
//! loss is in one count, and [`QueueTotals`] says the queue was full.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::Received;
use crate::event::{decode, WallClock};

/// Records the queue holds at most: some 8 MB of decoded calls, a few
/// seconds of a storm's streamed records (the kernel streams a budget per
/// series and counts the rest).
pub const QUEUE_RECORDS: usize = 16_384;

/// How often the thread looks at the rings when no record woke it: the
/// kernel wakes the reader for a series' first record of a window and for
/// slow calls only, the rest of a burst waits in the ring until looked at.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Records read in one go before the thread looks whether it must stop.
const BETWEEN_STOP_CHECKS: usize = 4096;

/// What the queue went through, for the run's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueTotals {
    /// Records queued.
    pub queued: u64,
    /// The most records the queue held at once.
    pub high_water: u64,
    /// Times the thread found the queue full and waited for room (the
    /// kernel's ring filled meanwhile: what it lost is `events_lost`).
    pub full: u64,
}

#[derive(Default)]
struct Counts {
    queued: AtomicU64,
    high_water: AtomicU64,
    full: AtomicU64,
}

/// The thread, and the queue's reading end.
pub(super) struct Drain {
    queue: mpsc::Receiver<Received>,
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
        let (tx, queue) = mpsc::channel(QUEUE_RECORDS);
        let (stop_read, stop) = io::pipe()?;
        let counts = Arc::new(Counts::default());
        let rings = Rings { calls, lifecycle, clock };
        let shared = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name("podstuck-rings".into())
            .spawn(move || read_rings(rings, tx, OwnedFd::from(stop_read), &shared))?;
        Ok(Drain { queue, stop: Some(OwnedFd::from(stop)), thread: Some(thread), counts })
    }

    /// The next record, once there is one; None once the thread is gone.
    pub(super) async fn next(&mut self) -> Option<Received> {
        self.queue.recv().await
    }

    /// A record already queued, without waiting.
    pub(super) fn try_next(&mut self) -> Option<Received> {
        self.queue.try_recv().ok()
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
    /// Stops the thread: the queue closes (a wait for room ends) and the
    /// stop pipe closes (a poll ends); it leaves within a look.
    fn drop(&mut self) {
        self.queue.close();
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: waits for a record (or a look's time), then reads both
/// rings to the end, the lifecycle's first, until told to stop.
fn read_rings(mut rings: Rings, tx: mpsc::Sender<Received>, stop: OwnedFd, counts: &Counts) {
    let fd = |ring: Option<&RingBuf<MapData>>| ring.map_or(-1, AsRawFd::as_raw_fd);
    let watched: [RawFd; 3] = [fd(Some(&rings.calls)), fd(rings.lifecycle.as_ref()), stop.as_raw_fd()];
    loop {
        let mut polled = watched.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        // SAFETY: an array of pollfds, valid for the call (an fd of -1 is ignored).
        let ready =
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, LOOK_EVERY.as_millis() as i32) };
        if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
        if polled[2].revents != 0 {
            return;
        }
        // The lifecycle first: a few records a second, never a storm.
        let mut read = 0;
        while let Some(ring) = rings.lifecycle.as_mut() {
            let Some(item) = ring.next() else { break };
            let decoded = crate::lifecycle::decode(&item, &rings.clock);
            drop(item);
            if !queue(&tx, Received::Lifecycle(decoded), counts) {
                return;
            }
        }
        while let Some(item) = rings.calls.next() {
            let decoded = decode(&item, &rings.clock);
            drop(item);
            if !queue(&tx, Received::Call(decoded), counts) {
                return;
            }
            read += 1;
            if read % BETWEEN_STOP_CHECKS == 0 && stop_asked(&stop) {
                return;
            }
        }
    }
}

/// Hands `record` to the loop, waiting for room when the queue is full;
/// false once the loop is gone.
fn queue(tx: &mpsc::Sender<Received>, record: Received, counts: &Counts) -> bool {
    let sent = match tx.try_send(record) {
        Ok(()) => true,
        Err(TrySendError::Full(record)) => {
            counts.full.fetch_add(1, Ordering::Relaxed);
            tx.blocking_send(record).is_ok()
        }
        Err(TrySendError::Closed(_)) => false,
    };
    if sent {
        counts.queued.fetch_add(1, Ordering::Relaxed);
        let held = (tx.max_capacity() - tx.capacity()) as u64;
        counts.high_water.fetch_max(held, Ordering::Relaxed);
    }
    sent
}

/// Whether the stop pipe was closed.
fn stop_asked(stop: &OwnedFd) -> bool {
    let mut polled = libc::pollfd { fd: stop.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, valid for the call; no wait.
    unsafe { libc::poll(&mut polled, 1, 0) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full queue makes the reader wait, counted, and loses nothing.
    #[test]
    fn a_full_queue_is_waited_on_and_counted_never_dropped() {
        let (tx, mut rx) = mpsc::channel(2);
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        let sender = std::thread::spawn(move || {
            for _ in 0..5 {
                let decoded = Err(crate::event::DecodeError::TooShort(0));
                assert!(queue(&tx, Received::Call(decoded), &shared));
            }
        });
        let mut got = 0;
        while got < 5 {
            if rx.try_recv().is_ok() {
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
        sender.join().unwrap();
        assert_eq!(counts.queued.load(Ordering::Relaxed), 5);
        assert!(counts.high_water.load(Ordering::Relaxed) <= 2);
    }
}
