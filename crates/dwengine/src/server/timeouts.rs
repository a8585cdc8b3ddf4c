//! The timeout sweep: enforces activity and run deadlines on a timer.
//!
//! A deadline must pass whether or not any worker polls: an activity whose
//! queue has no worker still times out by schedule-to-start, and a run no
//! worker picks up still ends at its run timeout. So each node runs one
//! sweep every [`TimeoutSweep::interval`] instead of piggy-backing on
//! polls. A pass reads at most the two declared scan limits of due
//! deadlines (index walks, earliest first) and ends each in its own
//! transaction; what is left over waits for the next pass. Of the nodes
//! sharing a cache, only the holder of the sweep's lease runs passes
//! ([`crate::cluster::node`]); should two ever overlap (a holder stalled
//! past its lease), an expiry re-checks its row inside its transaction, so
//! a deadline that another node already enforced is a no-op.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Sweep;
use crate::server::{ApiError, Engine};
use crate::store::{ActivityTimeout, TaskKind};

/// The sweep's period and per-pass scan caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutSweep {
    /// Due activity deadlines enforced per pass at most.
    pub activity_timeout_scan_limit: usize,
    /// Due run deadlines enforced per pass at most.
    pub run_timeout_scan_limit: usize,
    /// Time between passes.
    pub interval: Duration,
}

impl TimeoutSweep {
    /// The configuration key of the activity-deadline cap.
    pub const ACTIVITY_SCAN_LIMIT_KEY: &'static str = "server.timeouts.activity_timeout_scan_limit";
    /// The configuration key of the run-deadline cap.
    pub const RUN_SCAN_LIMIT_KEY: &'static str = "server.timeouts.run_timeout_scan_limit";
    /// Both caps' default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// The default period.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

    /// The caps read from `lookup` (0 or absent: the default), with `interval`.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>, interval: Duration) -> Self {
        let cap = |key| {
            lookup(key)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT)
        };
        TimeoutSweep {
            activity_timeout_scan_limit: cap(Self::ACTIVITY_SCAN_LIMIT_KEY),
            run_timeout_scan_limit: cap(Self::RUN_SCAN_LIMIT_KEY),
            interval: interval.max(Duration::from_millis(10)),
        }
    }
}

impl Default for TimeoutSweep {
    fn default() -> Self {
        Self::from_config(|_| None, Self::DEFAULT_INTERVAL)
    }
}

/// What one sweep pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepReport {
    /// Activities ended with `ActivityTimedOut`.
    pub activities_timed_out: usize,
    /// Timed-out attempts handed to a retry.
    pub attempts_retried: usize,
    /// Runs ended as timed out.
    pub runs_timed_out: usize,
}

impl Engine {
    /// One sweep pass: due activity deadlines, then due run deadlines, each
    /// read under its scan limit; workers of the affected queues are woken.
    pub fn sweep_timeouts(&self) -> Result<SweepReport, ApiError> {
        let limits = self.config.timeout_sweep;
        let mut report = SweepReport::default();
        let due = self.read(|s| s.due_activity_timeouts(limits.activity_timeout_scan_limit))?;
        for task in due {
            match self.write(move |s| s.time_out_activity(task))? {
                ActivityTimeout::TimedOut {
                    namespace,
                    workflow_queue,
                } => {
                    report.activities_timed_out += 1;
                    self.wake(&namespace, &workflow_queue, TaskKind::Workflow.as_str());
                }
                ActivityTimeout::Retried {
                    namespace,
                    activity_queue,
                } => {
                    report.attempts_retried += 1;
                    self.wake(&namespace, &activity_queue, TaskKind::Activity.as_str());
                }
                ActivityTimeout::NotDue => {}
            }
        }
        let due = self.read(|s| s.due_run_timeouts(limits.run_timeout_scan_limit))?;
        for run in due {
            if self.write(move |s| s.time_out_run(run))? {
                report.runs_timed_out += 1;
                self.wake_run(run);
            }
        }
        Ok(report)
    }
}

/// Runs [`Engine::sweep_timeouts`] every interval while this node holds
/// the sweep's lease ([`Sweep::Timeouts`]), until the runtime stops; a
/// failed pass is logged and the next one tries again.
pub(crate) async fn sweep_forever(engine: Arc<Engine>) {
    let mut ticks = tokio::time::interval(engine.config.timeout_sweep.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !engine.elected(Sweep::Timeouts) {
            continue;
        }
        let node = engine.clone();
        let pass = move || {
            let report = node.sweep_timeouts();
            node.sweep_leases.record_pass(Sweep::Timeouts);
            report
        };
        match tokio::task::spawn_blocking(pass).await {
            Ok(Ok(report)) if report != SweepReport::default() => {
                tracing::debug!(?report, "timeout sweep");
            }
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "timeout sweep failed"),
            Err(error) => tracing::warn!(%error, "timeout sweep task failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_default_to_one_hundred_and_read_their_keys() {
        let sweep = TimeoutSweep::default();
        assert_eq!(sweep.activity_timeout_scan_limit, 100);
        assert_eq!(sweep.run_timeout_scan_limit, 100);
        let sweep = TimeoutSweep::from_config(
            |key| (key == TimeoutSweep::RUN_SCAN_LIMIT_KEY).then_some(7),
            Duration::ZERO,
        );
        assert_eq!(sweep.run_timeout_scan_limit, 7);
        assert_eq!(sweep.activity_timeout_scan_limit, 100);
        assert_eq!(sweep.interval, Duration::from_millis(10));
    }
}
