//! What keeps podstuck from flooding the API server or waiting on it: a
//! per-node token bucket (client-go's event spam filter allows a burst of
//! 25, then one every few seconds per object; podstuck, one node, 1 a
//! second) and a bounded queue that drops the oldest and counts it, so
//! the tracer never blocks on a slow or absent API server.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

/// Events posted per second, in the long run.
pub const PER_SECOND: f64 = 1.0;

/// Events posted at once after a quiet spell.
pub const BURST: f64 = 25.0;

/// Tokens refilled over time, one spent per request.
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: SystemTime,
}

impl TokenBucket {
    /// Full at `now`.
    pub fn new(per_second: f64, burst: f64, now: SystemTime) -> TokenBucket {
        TokenBucket { per_second, burst, tokens: burst, at: now }
    }

    fn refill(&mut self, now: SystemTime) {
        // A clock stepped back refills nothing and takes nothing.
        let elapsed = now.duration_since(self.at).unwrap_or_default().as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = self.at.max(now);
    }

    /// Spends a token if there is one at `now`.
    pub fn take(&mut self, now: SystemTime) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        false
    }

    /// How long until a token, from `now`.
    pub fn wait(&mut self, now: SystemTime) -> Duration {
        self.refill(now);
        Duration::from_secs_f64(((1.0 - self.tokens) / self.per_second).max(0.0))
    }
}

/// A queue of at most `capacity` items: a new one pushes the oldest out,
/// counted.
pub struct DropOldest<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

impl<T> DropOldest<T> {
    pub fn new(capacity: usize) -> DropOldest<T> {
        DropOldest { items: VecDeque::new(), capacity: capacity.max(1), dropped: 0 }
    }

    pub fn push(&mut self, item: T) {
        if self.items.len() >= self.capacity {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }

    /// Puts an item taken but not done back first (it was the oldest).
    pub fn push_front(&mut self, item: T) {
        if self.items.len() >= self.capacity {
            self.dropped += 1;
            return;
        }
        self.items.push_front(item);
    }

    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items dropped since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + millis)
    }

    #[test]
    fn the_bucket_allows_a_burst_of_25_then_one_a_second() {
        let mut b = TokenBucket::new(PER_SECOND, BURST, at(0));
        assert_eq!((0..100).filter(|_| b.take(at(0))).count(), 25);
        assert!(!b.take(at(500)));
        assert_eq!(b.wait(at(500)), Duration::from_millis(500));
        assert!(b.take(at(1000)));
        assert!(!b.take(at(1000)));
        // Ten quiet seconds: ten more, never past the burst.
        assert_eq!((0..100).filter(|_| b.take(at(11_000))).count(), 10);
        assert_eq!((0..100).filter(|_| b.take(at(1_000_000))).count(), 25);
        // A clock stepped back gives nothing.
        assert!(!b.take(at(0)));
    }

    #[test]
    fn the_queue_drops_the_oldest_and_counts_it() {
        let mut q = DropOldest::new(3);
        for i in 0..5 {
            q.push(i);
        }
        assert_eq!(q.take_dropped(), 2);
        assert_eq!(q.take_dropped(), 0, "counted once");
        assert_eq!(q.pop(), Some(2));
        q.push_front(2);
        q.push_front(1);
        assert_eq!(q.take_dropped(), 1, "no room to put one back");
        assert_eq!((q.pop(), q.pop(), q.pop(), q.pop()), (Some(2), Some(3), Some(4), None));
        assert!(q.is_empty());
    }
}
