//! Where a check's wall time went, phase by phase (`dwlint check --timings`).
//!
//! A run's phases overlap: the tree is walked and files are read ahead on a
//! second thread while the policy loads. A profile of the whole process
//! cannot say which phase holds up the next one, so `check` records each
//! phase's wall time as it goes, the main thread's phases in
//! order and the second thread's beside them. Recording costs two clock
//! reads a phase; the figures are printed only when asked for.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The CPU time the calling thread has used, for tests that bound the
/// work of a computation: unlike the wall clock, it does not grow while
/// other processes hold the cores (a loaded machine).
#[cfg(all(test, unix))]
pub(crate) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Elsewhere, the wall clock since the first call.
#[cfg(all(test, not(unix)))]
pub(crate) fn thread_cpu_time() -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// The phases of one check, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Main-thread phases, each timed from the end of the one before.
    pub phases: Vec<(&'static str, Duration)>,
    /// Work done on the second thread while a main-thread phase ran:
    /// (phase it ran beside, what it was, how long it took).
    pub beside: Vec<(&'static str, &'static str, Duration)>,
}

/// Times the main thread's phases of one run.
#[derive(Debug)]
pub struct Stopwatch {
    started: Instant,
    last: Instant,
    timings: Timings,
}

impl Stopwatch {
    /// Starts timing now.
    pub fn start() -> Stopwatch {
        let now = Instant::now();
        Stopwatch {
            started: now,
            last: now,
            timings: Timings::default(),
        }
    }

    /// Ends the phase `name`: its time is everything since the last mark.
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.timings.phases.push((name, now - self.last));
        self.last = now;
    }

    /// Records `what` done on the second thread beside the phase `phase`.
    pub fn beside(&mut self, phase: &'static str, what: &'static str, took: Duration) {
        self.timings.beside.push((phase, what, took));
    }

    /// The phases timed so far, and the total since [`Stopwatch::start`]
    /// as the last phase, `check`.
    pub fn finish(mut self) -> Timings {
        let total = self.last - self.started;
        self.timings.phases.push(("check", total));
        self.timings
    }
}

impl Timings {
    /// The table printed on standard error: one line per phase, in
    /// milliseconds, second-thread work indented under its phase.
    pub fn render(&self) -> String {
        let mut out = String::from("timings (wall clock):\n");
        for (phase, took) in &self.phases {
            let _ = writeln!(out, "  {:>9} {phase}", millis(*took));
            for (_, what, took) in self.beside.iter().filter(|(p, _, _)| p == phase) {
                let _ = writeln!(out, "  {:>9}   beside it: {what}", millis(*took));
            }
        }
        out
    }
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_to_the_total_and_keep_their_order() {
        let mut watch = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(2));
        watch.mark("first");
        watch.beside("first", "second-thread work", Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(1));
        watch.mark("second");
        let timings = watch.finish();
        let names: Vec<_> = timings.phases.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["first", "second", "check"]);
        let sum: Duration = timings.phases[..2].iter().map(|(_, d)| *d).sum();
        assert_eq!(sum, timings.phases[2].1);
        assert!(timings.phases[0].1 >= Duration::from_millis(2));
    }

    #[test]
    fn render_lists_second_thread_work_under_its_phase() {
        let timings = Timings {
            phases: vec![
                ("load the policy", Duration::from_micros(7_500)),
                ("scan", Duration::from_micros(15_250)),
                ("check", Duration::from_micros(22_750)),
            ],
            beside: vec![("load the policy", "walk", Duration::from_millis(5))],
        };
        assert_eq!(
            timings.render(),
            "timings (wall clock):\n    7.50 ms load the policy\n    5.00 ms   beside it: walk\n   15.25 ms scan\n   22.75 ms check\n"
        );
    }
}
