//! Queue drivers: how work that became leasable reaches the long polls
//! waiting for it, and who delivers a timer when it comes due.
//!
//! The store stays the one source of truth for tasks whatever the driver:
//! a poll leases a task from its rows, under the lease fencing of the
//! protocol, so a lost, repeated or late message can delay work but never
//! hand one task to two workers or fire one timer twice. A driver carries
//! only the signals around the rows:
//!
//! - `database` (the default): the driver carries nothing; the committing
//!   node wakes the polls itself (its own at once, other nodes' through the
//!   cache's relay and wake key), and a timer is found due by the poll
//!   passes' scan of its dispatch row. Nothing leaves the node but the cache.
//! - `sqs` (cargo feature `sqs`, [`sqs`]): a dispatch is a message on one
//!   Amazon SQS queue, which a consumer on some node receives and turns
//!   into the same wake-up; a timer is a delayed message. SQS delays a
//!   message at most 900 seconds, so a longer timer travels in hops
//!   ([`next_hop`]): each delivery before it is due re-enqueues it with the
//!   rest of its delay, at most one chunk, and the delivery at or after its
//!   due time fires it ([`Deliveries::deliver_timer`]), once: a second
//!   delivery finds it fired. The poll passes still fire a timer whose
//!   message is late by more than [`SQS_TIMER_RECOVERY_GRACE`] (a send that
//!   failed), so no timer waits on a message that never comes.
//!
//! The capabilities snapshot names the driver (`queue_driver` of the
//! backend profile): on SQS it reports `max_single_timer_delay_seconds:
//! 900` and the `queue_max_delay_constraint` issue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::store::ArmedTimer;

#[cfg(feature = "sqs")]
pub mod sqs;

/// The default driver's name.
pub const DATABASE: &str = "database";
/// The SQS driver's name.
pub const SQS: &str = "sqs";
/// The longest delay SQS gives one message, in seconds.
pub const SQS_MAX_DELAY_SECONDS: u64 = dwpolicy::limits::SQS_MAX_DELAY_SECONDS;
/// The region the SQS client signs for when none is configured.
pub const DEFAULT_SQS_REGION: &str = "us-east-1";
/// How late a timer's SQS delivery may be before a poll pass fires the
/// timer itself: the visibility timeout of a message whose receiver died
/// mid-delivery (30 s) and a slow hop fit well inside it.
pub const SQS_TIMER_RECOVERY_GRACE: Duration = Duration::from_secs(60);

/// The configured driver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum QueueSettings {
    /// Wake keys on the polling cache; timers found by the poll passes.
    #[default]
    Database,
    /// One Amazon SQS queue (or an SQS-compatible server).
    Sqs(SqsSettings),
}

impl QueueSettings {
    /// The driver's name as configured and as the capabilities report it.
    pub fn name(&self) -> &'static str {
        match self {
            QueueSettings::Database => DATABASE,
            QueueSettings::Sqs(_) => SQS,
        }
    }
}

/// Where the SQS driver sends and receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSettings {
    /// The service endpoint (`DW_SQS_ENDPOINT`); `None`: the region's AWS
    /// endpoint.
    pub endpoint: Option<String>,
    /// The queue (`DW_SQS_QUEUE_URL`): a standard queue; a FIFO queue
    /// cannot delay single messages.
    pub queue_url: String,
    /// The region requests are signed for (`DW_SQS_REGION`).
    pub region: String,
    /// The longest delay of one hop of a timer (`DW_SQS_TIMER_CHUNK_SECONDS`,
    /// 1 to 900; 900 by default). Clients are told 900 whatever it is:
    /// a shorter chunk only makes more hops, which is how tests see them.
    pub timer_chunk_seconds: u64,
}

/// One message of the transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum Job {
    /// Work became leasable on (namespace, task queue, channel).
    Wake {
        /// The namespace.
        namespace: String,
        /// The task queue.
        task_queue: String,
        /// `workflow` or `activity`.
        channel: String,
    },
    /// A timer travels to its due time.
    Timer {
        /// The timer's id.
        timer_id: i64,
        /// When it comes due (unix ms), as armed; the store's row decides.
        due_at_ms: i64,
    },
}

impl Job {
    /// The message body.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A message body read back; a body this server did not write is an
    /// error naming what is wrong with it.
    pub fn decode(body: &str) -> Result<Job, String> {
        serde_json::from_str(body).map_err(|e| format!("not a dwserver queue message: {e}"))
    }
}

/// The delay of the next hop of a timer due at `due_at_ms`, seen at
/// `now_ms`: whole seconds rounded up (a hop never lands before the due
/// time), at most `chunk_seconds`. `None` once it is due.
pub fn next_hop(due_at_ms: i64, now_ms: i64, chunk_seconds: u64) -> Option<u64> {
    let remaining_ms = due_at_ms.saturating_sub(now_ms);
    if remaining_ms <= 0 {
        return None;
    }
    let seconds = u64::try_from(remaining_ms)
        .unwrap_or(u64::MAX)
        .div_ceil(1000);
    Some(seconds.min(chunk_seconds.clamp(1, SQS_MAX_DELAY_SECONDS)))
}

/// What a delivered timer came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerDelivery {
    /// It fired now (and its run's workflow task was queued and woken).
    Fired,
    /// It is not due yet: the next hop goes out.
    NotDue {
        /// When it comes due, unix ms.
        due_at_ms: i64,
    },
    /// It fired before, was cancelled, or never existed: the chain ends.
    Gone,
    /// The store could not be asked: the message is delivered again later.
    Failed(String),
}

/// What a delivered message does on this node: the server's engine
/// implements it over its store and polling cache.
pub trait Deliveries: Send + Sync + 'static {
    /// Work arrived on (namespace, task queue, channel): wake the polls
    /// (this node's, and other nodes' through the cache).
    fn wake(&self, namespace: &str, task_queue: &str, channel: &str);
    /// Timer `timer_id` was delivered: fire it when due.
    fn deliver_timer(&self, timer_id: i64) -> TimerDelivery;
}

/// A queue driver.
pub trait QueueDriver: Send + Sync {
    /// `database` or `sqs`.
    fn name(&self) -> &'static str;
    /// Work became leasable on (namespace, task queue, channel): true when
    /// the driver carries the wake to the polls (a node that receives it
    /// wakes them); false when the caller is to wake them now (the database
    /// driver always; SQS when its send buffer is full).
    fn dispatch(&self, namespace: &str, task_queue: &str, channel: &str) -> bool;
    /// A commit armed `timers`: a driver that delivers timers sends them.
    fn timers_armed(&self, timers: &[ArmedTimer]);
    /// How overdue a timer must be before a poll pass fires it itself.
    fn due_timer_grace(&self) -> Duration;
    /// Starts the driver's background work on `runtime` (the server's).
    fn start(&self, runtime: &tokio::runtime::Handle, deliveries: Arc<dyn Deliveries>);
    /// The operator metrics' `queue` block.
    fn snapshot(&self) -> Value;
}

/// The default driver: the committing node wakes the polls itself, and the
/// poll passes find timers due. What dwserver did before there were drivers.
#[derive(Debug, Default)]
pub struct DatabaseQueue;

impl QueueDriver for DatabaseQueue {
    fn name(&self) -> &'static str {
        DATABASE
    }

    fn dispatch(&self, _namespace: &str, _task_queue: &str, _channel: &str) -> bool {
        false
    }

    fn timers_armed(&self, _timers: &[ArmedTimer]) {}

    fn due_timer_grace(&self) -> Duration {
        Duration::ZERO
    }

    fn start(&self, _runtime: &tokio::runtime::Handle, _deliveries: Arc<dyn Deliveries>) {}

    fn snapshot(&self) -> Value {
        json!({ "driver": DATABASE })
    }
}

/// Why a queue driver could not start; each names the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The driver is not compiled into this binary.
    #[error("DW_QUEUE_DRIVER={0}: this dwserver was built without the `{0}` cargo feature; build it with `cargo build --release -p dwengine --features {0} --bin dwserver`")]
    NotBuilt(&'static str),
    /// A setting is unusable, or the service behind it refused.
    #[error("{setting} ({value}): {reason}")]
    Setting {
        /// The variable to fix.
        setting: &'static str,
        /// Its value.
        value: String,
        /// What went wrong.
        reason: String,
    },
}

/// Opens the configured driver (for SQS: checks that the queue answers).
pub fn open(settings: &QueueSettings) -> Result<Arc<dyn QueueDriver>, QueueError> {
    match settings {
        QueueSettings::Database => Ok(Arc::new(DatabaseQueue)),
        #[cfg(feature = "sqs")]
        QueueSettings::Sqs(sqs) => Ok(Arc::new(sqs::SqsQueue::connect(sqs.clone())?)),
        #[cfg(not(feature = "sqs"))]
        QueueSettings::Sqs(_) => Err(QueueError::NotBuilt(SQS)),
    }
}

/// Why a start option's `connection` cannot be honoured on a node of
/// `driver`, if it cannot. On the reference server a `connection` names
/// the host's queue connection the started workflow's tasks travel on. A
/// dwserver deployment has exactly one: its queue driver (`database` or
/// `sqs`, the same on every node), through which every task queue is
/// dispatched. That name is therefore the one connection there is to pick,
/// and picking it means what leaving the option out means; any other name
/// is a connection this deployment does not have, refused rather than
/// ignored so the caller learns its routing was not applied.
pub fn connection_refusal(driver: &str, value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(name) if name == driver => None,
        _ => Some(format!(
            "The connection field must name this server's queue connection, \"{driver}\" \
             (its DW_QUEUE_DRIVER), the only one it has: every task queue is dispatched \
             through it. Send \"{driver}\" or leave connection out, and route with queue."
        )),
    }
}

/// What a transport counted since the node started.
#[derive(Debug, Default)]
pub struct TransportCounters {
    /// Wake messages sent.
    pub wakes_sent: AtomicU64,
    /// Wake messages received and turned into wake keys.
    pub wakes_delivered: AtomicU64,
    /// Wakes the node signalled itself because the message could not go
    /// out (the send failed, or the send buffer was full).
    pub wakes_signalled_directly: AtomicU64,
    /// Timer messages sent as their commit armed them.
    pub timers_sent: AtomicU64,
    /// Timer messages delivered before their due time and sent on.
    pub timer_requeues: AtomicU64,
    /// Timers fired by a delivery.
    pub timers_fired: AtomicU64,
    /// Timer deliveries that found the timer fired or cancelled already.
    pub timers_gone: AtomicU64,
    /// Messages (or batches) the service refused or did not answer.
    pub send_failures: AtomicU64,
    /// Receives that failed.
    pub receive_failures: AtomicU64,
    /// Messages received that this server did not write (deleted).
    pub malformed_messages: AtomicU64,
}

impl TransportCounters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts as the operator metrics show them.
    pub fn snapshot(&self) -> Value {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "wakes_sent": read(&self.wakes_sent),
            "wakes_delivered": read(&self.wakes_delivered),
            "wakes_signalled_directly": read(&self.wakes_signalled_directly),
            "timers_sent": read(&self.timers_sent),
            "timer_requeues": read(&self.timer_requeues),
            "timers_fired": read(&self.timers_fired),
            "timers_gone": read(&self.timers_gone),
            "send_failures": read(&self.send_failures),
            "receive_failures": read(&self.receive_failures),
            "malformed_messages": read(&self.malformed_messages),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_travels_in_hops_of_at_most_one_chunk_and_never_lands_early() {
        let due = 1_000_000 + 7_000;
        // A 7 s timer in 2 s chunks: 2, 2, 2, then the last second.
        let mut now = 1_000_000;
        let mut hops = Vec::new();
        while let Some(delay) = next_hop(due, now, 2) {
            hops.push(delay);
            now += i64::try_from(delay).unwrap() * 1000;
        }
        assert_eq!(hops, [2, 2, 2, 1]);
        assert!(now >= due);
        // A part of a second rounds up, never down.
        assert_eq!(next_hop(due, due - 1, 900), Some(1));
        assert_eq!(next_hop(due, due, 900), None);
        assert_eq!(next_hop(due, due + 5, 900), None);
        // The chunk is held to what SQS accepts.
        assert_eq!(next_hop(i64::MAX, 0, 5_000), Some(900));
        assert_eq!(next_hop(10_000, 0, 0), Some(1));
    }

    #[test]
    fn jobs_round_trip_and_foreign_bodies_are_refused_by_name() {
        for job in [
            Job::Wake {
                namespace: "ns".into(),
                task_queue: "q".into(),
                channel: "workflow".into(),
            },
            Job::Timer {
                timer_id: 7,
                due_at_ms: 1_700_000_000_000,
            },
        ] {
            assert_eq!(Job::decode(&job.encode()).unwrap(), job);
        }
        let refused = Job::decode("{\"job\":\"reboot\"}").unwrap_err();
        assert!(
            refused.contains("not a dwserver queue message"),
            "{refused}"
        );
        assert!(Job::decode("\u{0}").is_err());
    }

    #[test]
    fn the_database_driver_leaves_wakes_to_the_committing_node() {
        let driver = open(&QueueSettings::Database).unwrap();
        assert_eq!(driver.name(), DATABASE);
        assert_eq!(driver.due_timer_grace(), Duration::ZERO);
        assert!(!driver.dispatch("ns", "q", "workflow"));
        assert_eq!(driver.snapshot(), json!({ "driver": "database" }));
    }

    #[test]
    fn a_connection_is_accepted_only_when_it_names_the_driver() {
        for driver in [DATABASE, SQS] {
            assert_eq!(connection_refusal(driver, &Value::Null), None);
            assert_eq!(connection_refusal(driver, &json!(driver)), None);
            for other in [
                json!("redis"),
                json!(""),
                json!(driver.to_uppercase()),
                json!(7),
            ] {
                let refused = connection_refusal(driver, &other).expect("refused");
                assert!(refused.contains(&format!("\"{driver}\"")), "{refused}");
                assert!(refused.contains("DW_QUEUE_DRIVER"), "{refused}");
            }
        }
    }

    #[cfg(not(feature = "sqs"))]
    #[test]
    fn sqs_without_the_feature_is_refused_naming_the_feature() {
        let settings = QueueSettings::Sqs(SqsSettings {
            endpoint: None,
            queue_url: "https://sqs.us-east-1.amazonaws.com/1/q".into(),
            region: DEFAULT_SQS_REGION.into(),
            timer_chunk_seconds: SQS_MAX_DELAY_SECONDS,
        });
        let error = open(&settings).err().expect("refused").to_string();
        assert!(error.contains("--features sqs"), "{error}");
        assert!(error.contains("DW_QUEUE_DRIVER"), "{error}");
    }
}
