//! Retry rhythms: who is retrying can often be told from when. kubelet's
//! volume operations back off exponentially (0.5 s doubling, capped at
//! 2m2s); its housekeeping runs every 2 s; containerd retries an unmount up
//! to 50 times 50 ms apart; runc removes a cgroup in 5 quick rounds.

use std::time::SystemTime;

/// A recognised retry rhythm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rhythm {
    KubeletBackoff,
    KubeletHousekeeping,
    ContainerdUnmount,
    RuncBurst,
    /// Regular, at this period in seconds, matching none of the above.
    Steady(f64),
}

impl Rhythm {
    pub fn describe(self) -> String {
        match self {
            Rhythm::KubeletBackoff => "kubelet volume backoff (0.5 s doubling, capped at 2m2s)".into(),
            Rhythm::KubeletHousekeeping => "kubelet housekeeping (every 2 s, no backoff)".into(),
            Rhythm::ContainerdUnmount => "containerd unmount retries (up to 50 tries, 50 ms apart)".into(),
            Rhythm::RuncBurst => "runc cgroup removal burst (5 tries within about 150 ms)".into(),
            Rhythm::Steady(s) => {
                format!("steady retries every {}", super::human_duration(std::time::Duration::from_secs_f64(s)))
            }
        }
    }
}

impl Rhythm {
    /// Whether an actor of this role (`Role::as_str`) retries this way: a
    /// rhythm named after kubelet is no clue about dockerd's retries.
    /// Unknown actors may be anyone.
    pub fn fits(self, role: &str) -> bool {
        match self {
            Rhythm::KubeletBackoff | Rhythm::KubeletHousekeeping => matches!(role, "kubelet" | "csi-plugin" | "other"),
            Rhythm::ContainerdUnmount => matches!(role, "runtime" | "shim" | "other"),
            Rhythm::RuncBurst => matches!(role, "runc" | "other"),
            Rhythm::Steady(_) => true,
        }
    }
}

/// kubelet's backoff cap: 2m2s.
const BACKOFF_CAP: f64 = 122.0;

fn near(value: f64, target: f64, tolerance: f64) -> bool {
    (value - target).abs() <= target * tolerance
}

/// Names the rhythm of these attempt times (oldest first), if any.
pub fn recognise(times: &[SystemTime]) -> Option<Rhythm> {
    if times.len() < 2 {
        return None;
    }
    let gaps: Vec<f64> =
        times.windows(2).map(|w| w[1].duration_since(w[0]).unwrap_or_default().as_secs_f64()).collect();
    let fast = gaps.iter().filter(|g| **g < 0.1).count();
    // containerd: most gaps about 50 ms (its bursts may repeat later).
    let fifty = gaps.iter().filter(|g| (0.035..=0.09).contains(*g)).count();
    if gaps.len() >= 3 && fifty * 10 >= gaps.len() * 6 {
        return Some(Rhythm::ContainerdUnmount);
    }
    let span = gaps.iter().sum::<f64>();
    if times.len() <= 5 && fast == gaps.len() && span <= 0.25 {
        return Some(Rhythm::RuncBurst);
    }
    // kubelet backoff: each gap about twice the one before, or at the cap.
    let doubling = gaps.windows(2).all(|w| {
        (w[1] / w[0] >= 1.5 && w[1] / w[0] <= 2.6) || (near(w[0], BACKOFF_CAP, 0.15) && near(w[1], BACKOFF_CAP, 0.15))
    });
    if gaps.len() >= 2 && doubling && gaps[0] >= 0.3 {
        return Some(Rhythm::KubeletBackoff);
    }
    if gaps.len() == 1 && (0.35..=0.8).contains(&gaps[0]) {
        // The backoff's first retry comes after 0.5 s.
        return Some(Rhythm::KubeletBackoff);
    }
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let steady = gaps.iter().all(|g| near(*g, median, 0.3));
    if steady && near(median, 2.0, 0.3) {
        return Some(Rhythm::KubeletHousekeeping);
    }
    if steady && gaps.len() >= 2 {
        return Some(Rhythm::Steady(median));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(offsets: &[f64]) -> Vec<SystemTime> {
        offsets.iter().map(|s| UNIX_EPOCH + Duration::from_secs_f64(1_000_000.0 + s)).collect()
    }

    #[test]
    fn kubelet_volume_backoff_doubles_from_half_a_second() {
        assert_eq!(recognise(&at(&[0.0, 0.5, 1.5, 3.5, 7.5])), Some(Rhythm::KubeletBackoff));
        assert_eq!(recognise(&at(&[0.0, 0.5])), Some(Rhythm::KubeletBackoff));
        // Joined late: at the cap.
        assert_eq!(recognise(&at(&[0.0, 64.0, 186.0, 308.0])), Some(Rhythm::KubeletBackoff));
    }

    #[test]
    fn kubelet_housekeeping_is_every_two_seconds() {
        assert_eq!(recognise(&at(&[0.0, 2.0, 4.01, 6.0])), Some(Rhythm::KubeletHousekeeping));
        assert_eq!(recognise(&at(&[0.0, 2.1])), Some(Rhythm::KubeletHousekeeping));
    }

    #[test]
    fn containerd_and_runc_bursts() {
        let containerd: Vec<f64> = (0..20).map(|i| i as f64 * 0.05).collect();
        assert_eq!(recognise(&at(&containerd)), Some(Rhythm::ContainerdUnmount));
        assert_eq!(recognise(&at(&[0.0, 0.01, 0.03, 0.07, 0.14])), Some(Rhythm::RuncBurst));
    }

    #[test]
    fn a_rhythm_names_only_the_actors_that_retry_that_way() {
        assert!(Rhythm::KubeletBackoff.fits("kubelet"));
        assert!(!Rhythm::RuncBurst.fits("runtime"), "dockerd's retries are not runc's");
        assert!(!Rhythm::ContainerdUnmount.fits("kubelet"));
        assert!(Rhythm::ContainerdUnmount.fits("shim"));
        assert!(Rhythm::Steady(1.0).fits("runtime"));
        assert!(Rhythm::RuncBurst.fits("other"));
    }

    #[test]
    fn other_regular_and_irregular_retries() {
        assert_eq!(recognise(&at(&[0.0, 10.0, 20.0, 30.0])), Some(Rhythm::Steady(10.0)));
        assert_eq!(recognise(&at(&[0.0, 3.0, 3.4, 17.0])), None);
        assert_eq!(recognise(&at(&[0.0])), None);
    }
}
