//! The standalone server (`dwserver`): HTTP control and worker planes.
//!
//! [`config`] reads the node's settings into a [`ServerConfig`]
//! ([`node_config`]), [`engine`] owns the store and the
//! cache surfaces, [`control`], [`worker`], [`queries`] and [`namespaces`]
//! hold the operations, [`timeouts`] the deadline sweep, [`metrics`] the per-namespace metric surfaces, [`projections`] projection drift and rebuild,
//! [`wire`] the protocol's shapes, [`manifest`] the discovery document,
//! [`auth`] the token roles, [`imports`], [`archive`] and
//! [`search_attributes`] the v1 import, archive and search-attribute
//! registration, [`streams`] the runs' output streams, [`schedules`] the schedules and their due sweep, [`services`] the
//! service catalog and Nexus service calls, [`webhooks`] and
//! [`webhook_intake`] the signed webhook intake, [`contract`] and [`config_file`] the configuration
//! contract, and [`http`] adapts them to axum. [`Running`]
//! serves an engine on a background runtime, which is how the binary and
//! the integration tests start it.
//!
//! This layer sits on the engine's library modules and the store and may
//! use any of them; nothing below it imports the server. Inside it the
//! configuration is three floors: [`node_config`] (the settings as plain
//! data, and how a key names its variable) at the bottom, [`contract`]
//! (every limit with its key, variable, default and current value) on it,
//! and [`config`] (reading a file and the environment, checking keys and
//! wording problems from the contract) on top, with [`config_file`] (the
//! TOML syntax) below it. The contract never imports the reader.
pub mod archive;
pub mod auth;
pub mod body_deadline;
pub mod build_ids;
pub mod cancellation;
pub mod config;
pub mod config_file;
pub mod connections;
pub mod contract;
pub mod control;
pub mod description;
pub mod engine;
pub mod error;
pub mod external_payloads;
pub mod fast_paths;
pub mod fingerprints;
pub mod history_export;
pub mod http;
pub mod imports;
pub mod manifest;
pub mod message_streams;
pub mod metrics;
pub mod namespaces;
pub mod node_config;
pub mod prepared_local;
pub mod projections;
pub mod queries;
pub mod redrive;
pub mod roster;
pub mod schedules;
pub mod search_attributes;
pub mod serve;
pub mod services;
pub mod sessions;
pub mod streams;
pub mod task_answer;
pub mod timeouts;
pub mod ui;
pub mod update_validation;
pub mod webhook_intake;
pub mod webhooks;
pub mod wire;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{ConfigError, Problem};
pub use engine::{Engine, StartError};
pub use error::ApiError;
pub use node_config::ServerConfig;

/// A server running on its own runtime; dropping it shuts it down.
pub struct Running {
    addr: SocketAddr,
    engine: Arc<Engine>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// Binds `engine`'s configured address (port 0 picks a free one) and serves it.
    pub fn start(engine: Engine) -> std::io::Result<Running> {
        let engine = Arc::new(engine);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("dwserver")
            .build()?;
        let listener = runtime.block_on(async { connections::listen(engine.config.bind) })?;
        let spool = engine.upload_spool_dir();
        let cleared = external_payloads::clear_spool(&spool);
        if cleared > 0 {
            tracing::info!(
                files = cleared,
                dir = %spool.display(),
                "removed upload spool files a previous run left behind"
            );
        }
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = http::router(engine.clone());
        // Take the free sweep leases before the sweeps' first ticks, then
        // renew them (and the id) every third of their TTL.
        engine.cluster_heartbeat();
        runtime.spawn(heartbeat_forever(engine.clone()));
        runtime.spawn(timeouts::sweep_forever(engine.clone()));
        runtime.spawn(schedules::fire_forever(engine.clone()));
        runtime.spawn(external_payloads::expire_forever(engine.clone()));
        // The queue driver's sender and consumer (none on the database driver).
        engine
            .queue
            .start(runtime.handle(), Arc::new(Delivered(engine.clone())));
        let limits = engine.config.connections;
        let fd_limit = connections::open_file_limit();
        let max_connections = limits.fitted(fd_limit);
        if max_connections < limits.max_connections {
            tracing::warn!(
                configured = limits.max_connections,
                serving = max_connections,
                open_file_limit = fd_limit,
                "the connection cap is lowered to fit the open-file limit (raise ulimit -n to serve more)"
            );
        }
        let waiters = engine.waiters().clone();
        let thread = std::thread::spawn(move || {
            let served = runtime.block_on(serve::serve(
                listener,
                app,
                limits,
                max_connections,
                waiters,
                async move {
                    let _ = rx.await;
                },
            ));
            // Blocking work still running (a store write) gets a moment;
            // nothing waits on a client any more.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            served
        });
        Ok(Running {
            addr,
            engine,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The served engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Serves until the process is asked to stop (Ctrl-C) or the server
    /// fails; then gives back the node's id and sweep leases.
    pub fn wait(mut self) -> std::io::Result<()> {
        let served = match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("server thread panicked"))),
            None => Ok(()),
        };
        self.engine.leave_cluster();
        served
    }

    /// A handle that stops the server (from a signal handler).
    pub fn take_shutdown(&mut self) -> Option<tokio::sync::oneshot::Sender<()>> {
        self.shutdown.take()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.engine.leave_cluster();
    }
}

/// What a queue driver's delivered messages do on this node.
struct Delivered(Arc<Engine>);

impl crate::queue::Deliveries for Delivered {
    fn wake(&self, namespace: &str, task_queue: &str, channel: &str) {
        self.0.signal_wake(namespace, task_queue, channel);
    }

    fn deliver_timer(&self, timer_id: i64) -> crate::queue::TimerDelivery {
        use crate::queue::TimerDelivery;
        let engine = &self.0;
        match engine.read(|s| s.armed_timer_due_at(timer_id)) {
            Err(e) => return TimerDelivery::Failed(e.to_string()),
            Ok(None) => return TimerDelivery::Gone,
            Ok(Some(due_at_ms)) if due_at_ms > crate::unix_ms() => {
                return TimerDelivery::NotDue { due_at_ms }
            }
            Ok(Some(_)) => {}
        }
        match engine.write(move |s| s.fire_timer_if_due(timer_id)) {
            Err(e) => TimerDelivery::Failed(e.to_string()),
            Ok(None) => TimerDelivery::Gone,
            Ok(Some((namespace, task_queue))) => {
                self.wake(
                    &namespace,
                    &task_queue,
                    crate::store::TaskKind::Workflow.as_str(),
                );
                TimerDelivery::Fired
            }
        }
    }
}

/// Renews the node's id registration and sweep leases every third of their
/// TTL until the runtime stops.
async fn heartbeat_forever(engine: Arc<Engine>) {
    let mut ticks = tokio::time::interval(engine.sweep_leases.renew_every());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: Running::start has just renewed.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let node = engine.clone();
        if let Err(error) = tokio::task::spawn_blocking(move || node.cluster_heartbeat()).await {
            tracing::warn!(%error, "cluster heartbeat task failed");
        }
    }
}
