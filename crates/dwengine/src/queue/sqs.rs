//! The SQS queue driver (cargo feature `sqs`): dispatches and timers as
//! messages on one standard Amazon SQS queue, through the AWS SDK's SQS
//! client (rustls with ring, no other AWS crate).
//!
//! Each node runs two tasks on the server's runtime. The sender drains a
//! bounded buffer that the request threads fill without waiting on the
//! network ([`SqsQueue::dispatch`], [`SqsQueue::timers_armed`]) and sends
//! up to ten messages per request, identical wakes of one batch once; a
//! wake that cannot go out (the buffer is full, the send fails) is
//! signalled by the node itself, so no poll waits on it. The
//! consumer long-polls the queue, hands each message to the node
//! ([`Deliveries`]) on the blocking pool, sends the next hop of each timer
//! not yet due, and deletes what it handled. A message is deleted only
//! after it was handled (and its next hop sent): a node that dies holding
//! one leaves it to reappear after the visibility timeout, for any node.
//! Repeats are harmless: a wake only wakes, and a timer fires once,
//! decided by its dispatch row in the store.
//!
//! Credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! (optionally) `AWS_SESSION_TOKEN`: the static credentials of the SDK's
//! environment provider, without the SDK's configuration loader (profiles,
//! SSO, instance roles), which would double what this feature compiles.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{
    next_hop, Deliveries, Job, QueueDriver, QueueError, SqsSettings, TimerDelivery,
    TransportCounters, SQS, SQS_MAX_DELAY_SECONDS, SQS_TIMER_RECOVERY_GRACE,
};
use crate::store::ArmedTimer;

/// Messages waiting for the sender; past it a wake is signalled directly.
const SEND_BUFFER: usize = 4096;
/// SQS takes at most ten messages per batch request.
const BATCH: usize = 10;
/// How long one receive waits for a message (SQS allows up to 20 s).
const RECEIVE_WAIT_SECONDS: i32 = 10;
/// How long a received message stays hidden from other receivers while
/// this node handles it.
const VISIBILITY_TIMEOUT_SECONDS: i32 = 30;
/// The pause after a failed receive before the next one.
const RECEIVE_RETRY: Duration = Duration::from_secs(1);

/// A message for the sender: the job and its delay in seconds.
struct Outgoing {
    job: Job,
    delay_seconds: u64,
}

/// The SQS driver of one node.
pub struct SqsQueue {
    settings: SqsSettings,
    credentials: Credentials,
    sender: mpsc::Sender<Outgoing>,
    receiver: Mutex<Option<mpsc::Receiver<Outgoing>>>,
    counters: Arc<TransportCounters>,
}

impl SqsQueue {
    /// Checks that the queue of `settings` answers (one `GetQueueAttributes`),
    /// then returns the driver; its tasks start with [`QueueDriver::start`].
    /// A refusal names the setting to fix: `DW_SQS_ENDPOINT` when nothing
    /// answers, `DW_SQS_QUEUE_URL` when the service has no such queue.
    pub fn connect(settings: SqsSettings) -> Result<SqsQueue, QueueError> {
        let credentials = credentials()?;
        let probe = client(&settings, &credentials);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| QueueError::Setting {
                setting: "DW_QUEUE_DRIVER",
                value: SQS.to_owned(),
                reason: format!("cannot start the SQS client's runtime: {e}"),
            })?;
        let answered = runtime.block_on(
            probe
                .get_queue_attributes()
                .queue_url(&settings.queue_url)
                .send(),
        );
        // The probe's connections belong to this runtime: drop both here.
        drop(probe);
        drop(runtime);
        if let Err(error) = answered {
            return Err(refusal(&settings, &error));
        }
        let (sender, receiver) = mpsc::channel(SEND_BUFFER);
        tracing::info!(
            queue_url = %settings.queue_url,
            endpoint = settings.endpoint.as_deref().unwrap_or("(the region's)"),
            region = %settings.region,
            timer_chunk_seconds = settings.timer_chunk_seconds,
            "queue driver sqs: the queue answered"
        );
        Ok(SqsQueue {
            settings,
            credentials,
            sender,
            receiver: Mutex::new(Some(receiver)),
            counters: Arc::new(TransportCounters::default()),
        })
    }
}

impl QueueDriver for SqsQueue {
    fn name(&self) -> &'static str {
        SQS
    }

    fn dispatch(&self, namespace: &str, task_queue: &str, channel: &str) -> bool {
        let job = Job::Wake {
            namespace: namespace.to_owned(),
            task_queue: task_queue.to_owned(),
            channel: channel.to_owned(),
        };
        let queued = self
            .sender
            .try_send(Outgoing {
                job,
                delay_seconds: 0,
            })
            .is_ok();
        if !queued {
            TransportCounters::bump(&self.counters.wakes_signalled_directly);
        }
        queued
    }

    fn timers_armed(&self, timers: &[ArmedTimer]) {
        let now = crate::unix_ms();
        for timer in timers {
            let delay_seconds =
                next_hop(timer.due_at_ms, now, self.settings.timer_chunk_seconds).unwrap_or(0);
            let job = Job::Timer {
                timer_id: timer.timer_id,
                due_at_ms: timer.due_at_ms,
            };
            if self
                .sender
                .try_send(Outgoing { job, delay_seconds })
                .is_err()
            {
                TransportCounters::bump(&self.counters.send_failures);
                tracing::warn!(
                    timer_id = timer.timer_id,
                    grace_seconds = SQS_TIMER_RECOVERY_GRACE.as_secs(),
                    "the SQS send buffer is full: the timer fires through the poll passes once its grace has passed"
                );
            }
        }
    }

    fn due_timer_grace(&self) -> Duration {
        SQS_TIMER_RECOVERY_GRACE
    }

    fn start(&self, runtime: &tokio::runtime::Handle, deliveries: Arc<dyn Deliveries>) {
        let receiver = match self.receiver.lock() {
            Ok(mut slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(receiver) = receiver else {
            return;
        };
        let transport = Transport {
            client: client(&self.settings, &self.credentials),
            queue_url: self.settings.queue_url.clone(),
            chunk_seconds: self.settings.timer_chunk_seconds,
            counters: self.counters.clone(),
            deliveries,
        };
        let transport = Arc::new(transport);
        runtime.spawn(transport.clone().send_forever(receiver));
        runtime.spawn(transport.receive_forever());
    }

    fn snapshot(&self) -> Value {
        let mut snapshot = json!({
            "driver": SQS,
            "queue_url": self.settings.queue_url,
            "endpoint": self.settings.endpoint,
            "region": self.settings.region,
            "timer_chunk_seconds": self.settings.timer_chunk_seconds,
            "max_single_timer_delay_seconds": SQS_MAX_DELAY_SECONDS,
            "timer_recovery_grace_seconds": SQS_TIMER_RECOVERY_GRACE.as_secs(),
        });
        if let (Some(out), Value::Object(counts)) =
            (snapshot.as_object_mut(), self.counters.snapshot())
        {
            out.extend(counts);
        }
        snapshot
    }
}

/// The static credentials of the environment.
fn credentials() -> Result<Credentials, QueueError> {
    let read = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let missing = |name: &'static str| QueueError::Setting {
        setting: name,
        value: "(unset)".to_owned(),
        reason: "the sqs queue driver signs its requests with AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)"
            .to_owned(),
    };
    let key = read("AWS_ACCESS_KEY_ID").ok_or_else(|| missing("AWS_ACCESS_KEY_ID"))?;
    let secret = read("AWS_SECRET_ACCESS_KEY").ok_or_else(|| missing("AWS_SECRET_ACCESS_KEY"))?;
    Ok(Credentials::new(
        key,
        secret,
        read("AWS_SESSION_TOKEN"),
        None,
        "environment",
    ))
}

/// An SQS client for `settings`: rustls (ring) over hyper, the endpoint
/// when one is set, timeouts that outlast a long poll.
fn client(settings: &SqsSettings, credentials: &Credentials) -> Client {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let receive_wait = Duration::from_secs(RECEIVE_WAIT_SECONDS.unsigned_abs().into());
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(receive_wait + Duration::from_secs(10))
        .build();
    let mut config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(settings.region.clone()))
        .credentials_provider(credentials.clone())
        .http_client(http)
        .timeout_config(timeouts);
    if let Some(endpoint) = &settings.endpoint {
        config = config.endpoint_url(endpoint);
    }
    Client::from_conf(config.build())
}

/// An error and its sources, each as it displays itself, joined by `: `
/// (the SDK's own rendering appends a debug dump).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A failed start probe as the setting to fix.
fn refusal<E, R>(settings: &SqsSettings, error: &SdkError<E, R>) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let endpoint = || match &settings.endpoint {
        Some(endpoint) => ("DW_SQS_ENDPOINT", endpoint.clone()),
        None => ("DW_SQS_REGION", settings.region.clone()),
    };
    let (setting, value, reason) = match error {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => {
            let (setting, value) = endpoint();
            (
                setting,
                value,
                format!("no SQS endpoint answers there: {}", chain(error)),
            )
        }
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or("");
            let message = service.err().message().unwrap_or("");
            match code {
                "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist" => (
                    "DW_SQS_QUEUE_URL",
                    settings.queue_url.clone(),
                    format!("the SQS service has no such queue ({code}: {message}); create it, or name an existing one"),
                ),
                "InvalidClientTokenId" | "SignatureDoesNotMatch" | "AccessDenied"
                | "UnrecognizedClientException" => (
                    "AWS_ACCESS_KEY_ID",
                    "(set)".to_owned(),
                    format!("the SQS service refused the credentials ({code}: {message})"),
                ),
                _ => (
                    "DW_SQS_QUEUE_URL",
                    settings.queue_url.clone(),
                    format!("the SQS service refused the queue ({code}: {message})"),
                ),
            }
        }
        _ => {
            let (setting, value) = endpoint();
            (
                setting,
                value,
                format!("what answers there is not an SQS service: {}", chain(error)),
            )
        }
    };
    QueueError::Setting {
        setting,
        value,
        reason,
    }
}

/// A message received, and what becomes of it.
enum Handled {
    /// Done: delete it.
    Delete(String),
    /// A timer not yet due: send the next hop, then delete it.
    Requeue(String, Outgoing),
    /// Leave it: it reappears after its visibility timeout.
    Keep,
}

/// The sender and consumer of one node.
struct Transport {
    client: Client,
    queue_url: String,
    chunk_seconds: u64,
    counters: Arc<TransportCounters>,
    deliveries: Arc<dyn Deliveries>,
}

impl Transport {
    /// Sends what the request threads buffered, up to ten a request, until
    /// the runtime stops.
    async fn send_forever(self: Arc<Self>, mut receiver: mpsc::Receiver<Outgoing>) {
        while let Some(first) = receiver.recv().await {
            let mut batch = vec![first];
            let mut wakes = HashSet::new();
            while batch.len() < BATCH {
                let Ok(next) = receiver.try_recv() else {
                    break;
                };
                batch.push(next);
            }
            // Identical wakes of one batch go out once.
            batch.retain(|o| match &o.job {
                Job::Wake { .. } => wakes.insert(o.job.encode()),
                Job::Timer { .. } => true,
            });
            let failed = self.send(&batch, false).await;
            for outgoing in failed {
                match &outgoing.job {
                    Job::Wake {
                        namespace,
                        task_queue,
                        channel,
                    } => {
                        TransportCounters::bump(&self.counters.wakes_signalled_directly);
                        let deliveries = self.deliveries.clone();
                        let (ns, queue, channel) =
                            (namespace.clone(), task_queue.clone(), channel.clone());
                        let _ = tokio::task::spawn_blocking(move || {
                            deliveries.wake(&ns, &queue, &channel)
                        })
                        .await;
                    }
                    Job::Timer { timer_id, .. } => tracing::warn!(
                        timer_id,
                        grace_seconds = SQS_TIMER_RECOVERY_GRACE.as_secs(),
                        "a timer's SQS message could not be sent: it fires through the poll passes once its grace has passed"
                    ),
                }
            }
        }
    }

    /// Sends `batch` (at most ten) in one request; returns what failed.
    /// `hops`: the batch is timers' next hops (counted as requeues).
    async fn send<'a>(&self, batch: &'a [Outgoing], hops: bool) -> Vec<&'a Outgoing> {
        let mut entries = Vec::with_capacity(batch.len());
        for (i, outgoing) in batch.iter().enumerate() {
            let delay = outgoing.delay_seconds.min(SQS_MAX_DELAY_SECONDS);
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(outgoing.job.encode())
                .delay_seconds(i32::try_from(delay).unwrap_or(0))
                .build();
            match entry {
                Ok(entry) => entries.push(entry),
                Err(_) => return batch.iter().collect(),
            }
        }
        let sent = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await;
        let failed: Vec<&Outgoing> = match sent {
            Err(error) => {
                tracing::warn!(error = %chain(&error), messages = batch.len(), "SQS send failed");
                batch.iter().collect()
            }
            Ok(output) => output
                .failed()
                .iter()
                .filter_map(|f| batch.get(f.id().parse::<usize>().ok()?))
                .collect(),
        };
        for outgoing in batch {
            let failed_here = failed.iter().any(|f| std::ptr::eq(*f, outgoing));
            if failed_here {
                TransportCounters::bump(&self.counters.send_failures);
            } else {
                TransportCounters::bump(match outgoing.job {
                    Job::Wake { .. } => &self.counters.wakes_sent,
                    Job::Timer { .. } if hops => &self.counters.timer_requeues,
                    Job::Timer { .. } => &self.counters.timers_sent,
                });
            }
        }
        failed
    }

    /// Receives, handles and deletes messages until the runtime stops.
    async fn receive_forever(self: Arc<Self>) {
        loop {
            let received = self
                .client
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(BATCH as i32)
                .wait_time_seconds(RECEIVE_WAIT_SECONDS)
                .visibility_timeout(VISIBILITY_TIMEOUT_SECONDS)
                .send()
                .await;
            let messages = match received {
                Ok(output) => output.messages().to_vec(),
                Err(error) => {
                    TransportCounters::bump(&self.counters.receive_failures);
                    tracing::warn!(error = %chain(&error), "SQS receive failed; retrying");
                    tokio::time::sleep(RECEIVE_RETRY).await;
                    continue;
                }
            };
            if messages.is_empty() {
                continue;
            }
            let this = self.clone();
            let handled =
                match tokio::task::spawn_blocking(move || this.handle_all(&messages)).await {
                    Ok(handled) => handled,
                    Err(error) => {
                        tracing::warn!(%error, "handling SQS messages failed");
                        continue;
                    }
                };
            self.finish(handled).await;
        }
    }

    /// Hands each message to the node (on the blocking pool).
    fn handle_all(&self, messages: &[Message]) -> Vec<Handled> {
        messages.iter().map(|m| self.handle(m)).collect()
    }

    fn handle(&self, message: &Message) -> Handled {
        let Some(receipt) = message.receipt_handle().map(str::to_owned) else {
            return Handled::Keep;
        };
        let job = match Job::decode(message.body().unwrap_or("")) {
            Ok(job) => job,
            Err(problem) => {
                TransportCounters::bump(&self.counters.malformed_messages);
                tracing::warn!(
                    message_id = message.message_id().unwrap_or(""),
                    %problem,
                    "deleting a message on the SQS queue that dwserver did not write"
                );
                return Handled::Delete(receipt);
            }
        };
        match job {
            Job::Wake {
                namespace,
                task_queue,
                channel,
            } => {
                self.deliveries.wake(&namespace, &task_queue, &channel);
                TransportCounters::bump(&self.counters.wakes_delivered);
                Handled::Delete(receipt)
            }
            Job::Timer { timer_id, .. } => match self.deliveries.deliver_timer(timer_id) {
                TimerDelivery::Fired => {
                    TransportCounters::bump(&self.counters.timers_fired);
                    Handled::Delete(receipt)
                }
                TimerDelivery::Gone => {
                    TransportCounters::bump(&self.counters.timers_gone);
                    Handled::Delete(receipt)
                }
                TimerDelivery::NotDue { due_at_ms } => {
                    let delay_seconds =
                        next_hop(due_at_ms, crate::unix_ms(), self.chunk_seconds).unwrap_or(0);
                    let job = Job::Timer {
                        timer_id,
                        due_at_ms,
                    };
                    Handled::Requeue(receipt, Outgoing { job, delay_seconds })
                }
                TimerDelivery::Failed(error) => {
                    tracing::warn!(
                        timer_id,
                        %error,
                        "a timer's delivery could not reach the store; it is delivered again after the visibility timeout"
                    );
                    Handled::Keep
                }
            },
        }
    }

    /// Sends the next hops, then deletes every message handled (a hop that
    /// could not be sent keeps its message, to be delivered again).
    async fn finish(&self, handled: Vec<Handled>) {
        let mut delete = Vec::new();
        let mut hops = Vec::new();
        let mut hop_receipts = Vec::new();
        for outcome in handled {
            match outcome {
                Handled::Delete(receipt) => delete.push(receipt),
                Handled::Requeue(receipt, outgoing) => {
                    hops.push(outgoing);
                    hop_receipts.push(receipt);
                }
                Handled::Keep => {}
            }
        }
        if !hops.is_empty() {
            let failed = self.send(&hops, true).await;
            for (outgoing, receipt) in hops.iter().zip(hop_receipts) {
                if !failed.iter().any(|f| std::ptr::eq(*f, outgoing)) {
                    delete.push(receipt);
                }
            }
        }
        if delete.is_empty() {
            return;
        }
        let mut entries = Vec::with_capacity(delete.len());
        for (i, receipt) in delete.into_iter().enumerate() {
            if let Ok(entry) = DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(receipt)
                .build()
            {
                entries.push(entry);
            }
        }
        let deleted = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await;
        if let Err(error) = deleted {
            // Each comes back after its visibility timeout and is handled
            // again: a wake wakes again, a timer finds itself fired.
            tracing::warn!(error = %chain(&error), "SQS delete failed");
        }
    }
}
