//! Fuzz targets: every byte podstuck reads from outside, handed to the
//! code that reads it. Kernel records of both rings, record files, mount
//! tables, cgroup and /proc files, CNI environments, the API's JSON,
//! kubeconfigs, the metrics endpoint's requests: a workload, a node or a
//! cluster chooses them, and none may panic podstuck, hang it or make it
//! say something it did not read.
//!
//! Stable Rust, and no build of its own: each target is an ordinary test
//! of this crate (`cargo test -p podstuck-user --lib fuzz`), run for a
//! short budget in `cargo xtask test` and for as long as asked by `cargo
//! xtask fuzz` (`PODSTUCK_FUZZ_SECONDS`). There is no coverage feedback
//! (that needs a nightly compiler and sanitizers); instead each target
//! starts from valid inputs of its format (its seeds) and mutates them
//! the way a fuzzer does (bits flipped, bytes of the format's own
//! vocabulary put in, ranges cut, repeated, spliced), keeping the inputs
//! its reader accepts as new starting points, so most inputs are near-
//! valid and reach past the first check. A crash stops the target and
//! prints the input: it becomes a regression test (the target's
//! `regressions`), run every time.

mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub(crate) use targets::TARGETS;

/// Seconds each target runs in `cargo test` unless told otherwise.
const SHORT_BUDGET: Duration = Duration::from_millis(1500);
/// Inputs kept as starting points, at most (the accepted ones).
const POOL: usize = 512;

/// One thing podstuck reads from outside, and the code that reads it.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// Valid inputs of its format, to start from.
    pub(crate) seeds: fn() -> Vec<Vec<u8>>,
    /// The format's own vocabulary, put into inputs whole.
    pub(crate) words: &'static [&'static [u8]],
    pub(crate) max_len: usize,
    /// Reads one input: panics on a defect (an invariant broken), says
    /// whether the input was accepted (read as its format).
    pub(crate) run: fn(&[u8]) -> bool,
    /// Inputs that once crashed it, run before anything else.
    pub(crate) regressions: &'static [&'static [u8]],
}

/// What a run of a target did.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) inputs: u64,
    pub(crate) accepted: u64,
    pub(crate) crash: Option<(Vec<u8>, String)>,
}

/// A small fast generator (xorshift64*): reproducible from its seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that break parsers: ends of fields and lines, numbers' edges.
const EDGES: &[&[u8]] = &[
    b"\0",
    b"\n",
    b" ",
    b"\t",
    b"\\",
    b"/",
    b"(",
    b")",
    b":",
    b"=",
    b"-",
    b"0",
    b"-1",
    b"4294967296",
    b"\xff",
    b"\xc3",
];

/// `input` changed one to four times.
fn mutate(rng: &mut Rng, pool: &[Vec<u8>], words: &[&[u8]], max_len: usize) -> Vec<u8> {
    if pool.is_empty() || rng.below(16) == 0 {
        let len = rng.below(max_len.min(512) + 1);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut input = pool[rng.below(pool.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(9) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            2 => {
                let word = if rng.below(3) == 0 || words.is_empty() {
                    EDGES[rng.below(EDGES.len())]
                } else {
                    words[rng.below(words.len())]
                };
                input.splice(at..at, word.iter().copied());
            }
            3 => {
                let end = (at + 1 + rng.below(64)).min(input.len());
                input.drain(at.min(end)..end);
            }
            4 => input.truncate(at),
            5 if !input.is_empty() => {
                let start = rng.below(input.len());
                let end = (start + 1 + rng.below(128)).min(input.len());
                let copy: Vec<u8> = input[start..end].to_vec();
                for _ in 0..1 + rng.below(8) {
                    input.splice(at..at, copy.iter().copied());
                }
            }
            6 => {
                let other = &pool[rng.below(pool.len())];
                let from = rng.below(other.len() + 1);
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
            7 => {
                let n = 1 + rng.below(16);
                input.splice(at..at, (0..n).map(|_| rng.next() as u8));
            }
            _ if !input.is_empty() => {
                // A digit run made huge or negative: numbers' edges.
                let i = rng.below(input.len());
                if input[i].is_ascii_digit() {
                    input.splice(i..i, b"99999999999999999999".iter().copied());
                }
            }
            _ => {}
        }
    }
    input.truncate(max_len);
    input
}

/// Runs `target` for `budget` (its regressions and seeds first), from
/// generator seed `seed`; stops at the first crash.
pub(crate) fn fuzz(target: &Target, budget: Duration, seed: u64) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut outcome = Outcome { inputs: 0, accepted: 0, crash: None };
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut first: Vec<Vec<u8>> = target.regressions.iter().map(|r| r.to_vec()).collect();
    first.extend((target.seeds)());
    let started = Instant::now();
    let mut queued = first.into_iter();
    loop {
        let input = match queued.next() {
            Some(input) => input,
            None if started.elapsed() >= budget => break,
            None => mutate(&mut rng, &pool, target.words, target.max_len),
        };
        outcome.inputs += 1;
        match catch_unwind(AssertUnwindSafe(|| (target.run)(&input))) {
            Ok(true) => {
                outcome.accepted += 1;
                if pool.len() < POOL {
                    pool.push(input);
                } else {
                    let i = rng.below(POOL);
                    pool[i] = input;
                }
            }
            Ok(false) => {}
            Err(panic) => {
                let message = match panic.downcast::<String>() {
                    Ok(s) => *s,
                    Err(panic) => panic.downcast::<&str>().map(|s| s.to_string()).unwrap_or_default(),
                };
                outcome.crash = Some((input, message));
                break;
            }
        }
    }
    outcome
}

/// How long each target runs: `PODSTUCK_FUZZ_SECONDS` (what `cargo xtask
/// fuzz` sets), else the short budget.
fn budget() -> Duration {
    std::env::var("PODSTUCK_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(SHORT_BUDGET)
}

/// The generator's seed: `PODSTUCK_FUZZ_SEED`, else the time.
fn seed() -> u64 {
    std::env::var("PODSTUCK_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
    })
}

/// Runs the target called `name` for the budget, says what it ran, and
/// fails with the input that crashed it.
pub(crate) fn run_target(name: &str) {
    let target = TARGETS.iter().find(|t| t.name == name).expect("a target of that name");
    let (budget, seed) = (budget(), seed());
    let started = Instant::now();
    let outcome = fuzz(target, budget, seed);
    let took = started.elapsed().as_secs_f64();
    // One line for `cargo xtask fuzz` to read.
    eprintln!(
        "fuzz target {name}: {} inputs ({} accepted) in {took:.1} s, seed {seed}: {}",
        outcome.inputs,
        outcome.accepted,
        if outcome.crash.is_none() { "no crash" } else { "CRASH" }
    );
    if let Some((input, message)) = outcome.crash {
        panic!(
            "fuzz target {name} crashed: {message}\ninput ({} bytes): {:?}\nhex: {}\nadd it to the target's regressions (src/fuzz/targets.rs) once fixed",
            input.len(),
            String::from_utf8_lossy(&input),
            hex::encode(&input)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_within_the_length_and_vary() {
        let mut rng = Rng::new(7);
        let pool = vec![b"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n".to_vec()];
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let m = mutate(&mut rng, &pool, &[b" - "], 64);
            assert!(m.len() <= 64);
            distinct.insert(m);
        }
        assert!(distinct.len() > 500, "{} distinct inputs of 1000", distinct.len());
    }

    /// The engine stops at a crash and hands back the input.
    #[test]
    fn a_crash_is_caught_with_its_input() {
        let target = Target {
            name: "crashes-on-x",
            seeds: || vec![b"abc".to_vec()],
            words: &[b"x"],
            max_len: 16,
            run: |input| {
                assert!(!input.contains(&b'x'), "an x");
                true
            },
            regressions: &[],
        };
        let outcome = fuzz(&target, Duration::from_secs(10), 1);
        let (input, message) = outcome.crash.expect("found the x");
        assert!(input.contains(&b'x') && message.contains("an x"), "{message}");
    }
}
