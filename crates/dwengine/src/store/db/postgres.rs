//! PostgreSQL behind the seam, through tokio-postgres driven from the
//! calling thread.
//!
//! What this file does so the store's SQLite-shaped statements run
//! unchanged:
//! - placeholders: `?N` becomes `$N` (outside string literals and quoted
//!   names), once per statement: the translated text is prepared once per
//!   connection and kept (a per-connection prepared-statement cache keyed
//!   by the store's SQL, bounded like SQLite's);
//! - values: SQLite's dynamic values. A column is read by its PostgreSQL
//!   type into an integer, real, text, blob or null ([`Value`]) and
//!   converted on `get` by the same `FromSql` the SQLite rows use; a
//!   parameter is bound by the prepared statement's parameter type (an
//!   integer binds an `int2/int4/int8/bool/float`, a text binds text-like
//!   types or is parsed for a number, …);
//! - transactions: `BEGIN` / `SAVEPOINT` / `RELEASE` / `ROLLBACK TO` as
//!   simple queries, with the open-transaction state kept here (the client
//!   does not report it).
//!
//! Every call is bounded in time ([`PostgresSettings`]). The server ends
//! what runs too long itself (`statement_timeout`, `lock_timeout`,
//! `idle_in_transaction_session_timeout`, set on each session), and the
//! kernel notices a peer gone silent (TCP keepalives, `TCP_USER_TIMEOUT`);
//! neither helps when the server's host still accepts packets but nothing
//! answers (a frozen server, a black-holed route behind a proxy), so each
//! call also has the node's own deadline: past it the call fails as
//! unanswered and the session is closed at once (its socket dropped, no
//! goodbye awaited), and the store opens a new one for the next call. This
//! is why the session is tokio-postgres on a runtime of its own rather
//! than the sync `postgres` client: that client has no per-call deadline
//! and, dropped, waits for the server to answer what it had sent.
//!
//! The session blocks the calling thread on its own single-threaded
//! runtime: it must never be called on an async task (tokio panics on a
//! nested `block_on`). The store runs on the group-commit writer's thread
//! and on `spawn_blocking` threads only.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use postgres::types::{FromSql as PgFromSql, IsNull, ToSql as PgToSql, Type};
use tokio_postgres::NoTls;

use super::error::{Error, Result};
use super::params::{FromSqlError, ToSql, ToSqlOutput, Value};
use super::PostgresSettings;

/// Statements each connection keeps prepared: as many as SQLite's cache.
const STATEMENT_CACHE_CAPACITY: usize = super::STATEMENT_CACHE_CAPACITY;

/// Bytes one blob append writes (an external payload is written in chunks
/// of this size, each an `UPDATE … SET data = data || chunk`).
pub(super) const BLOB_WRITE_CHUNK: usize = 4 << 20;

/// How long a session being closed normally waits to say goodbye to the
/// server (a `Terminate` message) before its socket is just dropped.
const GOODBYE: Duration = Duration::from_secs(1);

/// When the call a session is waiting on began, readable from other
/// threads: the group-commit writer refuses new work at once while its
/// session has been waiting too long, rather than queueing it behind a
/// database that does not answer.
///
/// A long wait alone is not a database that does not answer: under load
/// the writer waits for the store's write lock while other nodes' writes
/// and claims hold it (bounded by `lock_timeout`). So each clock also
/// shares, with every session this process opened to the same database
/// URL, when one of them last got an answer ([`answers_of`]); a call is
/// stalled only when none has been answered since it began.
#[derive(Debug)]
pub struct CallClock {
    /// Milliseconds since [`process_ms`]'s origin when the pending call
    /// began, plus one; 0 when no call is pending.
    pending: AtomicU64,
    /// When a session to the same database last got an answer (the same
    /// milliseconds).
    answers: Arc<AtomicU64>,
    /// How long a pending call may run before the session counts as stalled.
    stall: Duration,
}

/// Milliseconds since the first call of this process asked.
fn process_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
}

/// The time of the last answer any session of this process got from the
/// database `url` names: one per URL, so a node's writer, readers, claim
/// sessions and probe share it, and two stores on two databases (or two
/// schemas, whose URLs differ) do not.
fn answers_of(url: &str) -> Arc<AtomicU64> {
    static ANSWERS: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<AtomicU64>>>> =
        std::sync::OnceLock::new();
    ANSWERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(url.to_owned())
        .or_default()
        .clone()
}

impl CallClock {
    fn new(stall: Duration, answers: Arc<AtomicU64>) -> CallClock {
        CallClock {
            pending: AtomicU64::new(0),
            answers,
            stall,
        }
    }

    fn begin(&self) {
        self.pending.store(process_ms() + 1, Ordering::Relaxed);
    }

    fn end(&self) {
        self.pending.store(0, Ordering::Relaxed);
    }

    /// The server answered a call of this session (a result or an error
    /// of its own, not a deadline that ran out).
    fn answered(&self) {
        self.answers.fetch_max(process_ms(), Ordering::Relaxed);
    }

    /// How long the pending call has waited, when it has waited longer
    /// than the stall bound (a quarter of the lesser of the call deadline
    /// and the connect timeout, kept between 0.25 and 5 s: 1.25 s with the
    /// defaults' 5 s connect timeout) and no session to the same database
    /// got an answer since it began.
    pub fn stalled_for(&self) -> Option<Duration> {
        let began = self.pending.load(Ordering::Relaxed).checked_sub(1)?;
        let waited = Duration::from_millis(process_ms().saturating_sub(began));
        if waited <= self.stall || self.answers.load(Ordering::Relaxed) > began {
            return None;
        }
        Some(waited)
    }
}

/// How long a call may stay pending before the writer counts its session
/// as stalled: a quarter of the lesser of the call deadline and the connect
/// timeout, kept between 0.25 and 5 s (1.25 s with the defaults). A timeout
/// turned off (0) takes no part: with the call deadline off the connect
/// timeout alone sets it, rather than the 0 making every call past 0.25 s a
/// stall.
fn stall_bound(call_timeout: Duration, connect_timeout: Duration) -> Duration {
    [call_timeout, connect_timeout]
        .into_iter()
        .filter(|t| !t.is_zero())
        .min()
        .map_or(Duration::MAX, |t| t / 4)
        .clamp(Duration::from_millis(250), Duration::from_secs(5))
}

/// An open session: the client, and the runtime that drives its
/// connection while a call runs.
struct Session {
    /// `None` once closing.
    client: Option<tokio_postgres::Client>,
    connection: Option<tokio::task::JoinHandle<()>>,
    runtime: tokio::runtime::Runtime,
    /// Closed for a failure: drop the socket, say no goodbye.
    abandoned: bool,
}

impl Session {
    fn client(&self) -> &tokio_postgres::Client {
        self.client
            .as_ref()
            .expect("a session's client is present until it closes")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.client.take());
        let Some(connection) = self.connection.take() else {
            return;
        };
        // A healthy session ends politely: the connection, its client
        // gone, sends `Terminate` and finishes. Not on an async task (no
        // nested runtime there) and not after a failure (nothing answers).
        if !self.abandoned && tokio::runtime::Handle::try_current().is_err() {
            let _ = self
                .runtime
                .block_on(async { tokio::time::timeout(GOODBYE, connection).await });
        }
        // Dropping the runtime drops the connection's task and its socket.
    }
}

/// One PostgreSQL session.
pub(super) struct PgConnection {
    /// What the session was opened with: a lost session is opened again
    /// from it ([`PgConnection::reconnect`]).
    config: tokio_postgres::Config,
    /// How long a connection attempt (TCP, startup, authentication) may take.
    connect_timeout: Duration,
    /// The node's deadline on one call (`None`: none).
    call_timeout: Option<Duration>,
    /// Whether `call_timeout` applies now (lifted during a migration).
    deadline_on: Cell<bool>,
    clock: Arc<CallClock>,
    /// `None` after a call went unanswered (the session was closed).
    session: RefCell<Option<Session>>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    in_transaction: Cell<bool>,
    /// The open transaction holds the write lock shared (a claim's or a
    /// start batch's).
    shared_lock: Cell<bool>,
    /// The open transaction is a read-only snapshot.
    read_only: Cell<bool>,
    changes: Cell<u64>,
    /// A statement failed because the session is gone.
    broken: Cell<bool>,
    /// Calls made on the session (each one wait for the server: a
    /// pipelined pair counts once), for tests that count a step's.
    calls: Cell<u64>,
    /// What is not sent yet, in the order it was asked for: savepoint
    /// commands ([`PgConnection::defer`]) and writes nobody reads the
    /// answer of ([`PgConnection::queue`]). It goes ahead of the next
    /// call, in its round trip.
    pending: RefCell<Vec<Pending>>,
}

/// A command held back to go ahead of the next call.
enum Pending {
    /// Simple-query text, `;`-terminated commands (savepoint control).
    Simple(String),
    /// A prepared write and its parameters, its answer awaited only for
    /// its error.
    Write(postgres::Statement, Vec<Param>),
}

/// What one request of a round trip answered.
enum Outcome {
    Rows(Vec<postgres::Row>),
    Changed(u64),
    Done,
}

/// The request a call makes after what is pending.
enum Last<'a> {
    Execute(&'a postgres::Statement, &'a [&'a (dyn PgToSql + Sync)]),
    Query(&'a postgres::Statement, &'a [&'a (dyn PgToSql + Sync)]),
    Simple(&'a str),
}

/// A request's answer, to be awaited beside the others of its round trip.
type Answer<'f> =
    std::pin::Pin<Box<dyn Future<Output = std::result::Result<Outcome, postgres::Error>> + 'f>>;

/// `pending`'s parameters as the client binds them (kept alive while the
/// requests that borrow them are awaited).
fn pending_refs(pending: &[Pending]) -> Vec<Vec<&(dyn PgToSql + Sync)>> {
    pending
        .iter()
        .map(|p| match p {
            Pending::Simple(_) => Vec::new(),
            Pending::Write(_, values) => {
                values.iter().map(|v| v as &(dyn PgToSql + Sync)).collect()
            }
        })
        .collect()
}

/// The requests for `pending`, in order, into `sent`.
fn send_pending<'f>(
    client: &'f tokio_postgres::Client,
    pending: &'f [Pending],
    refs: &'f [Vec<&'f (dyn PgToSql + Sync)>],
    sent: &mut Vec<Answer<'f>>,
) {
    for (p, values) in pending.iter().zip(refs) {
        match p {
            Pending::Simple(sql) => sent.push(Box::pin(async move {
                client.batch_execute(sql).await.map(|()| Outcome::Done)
            })),
            Pending::Write(statement, _) => sent.push(Box::pin(async move {
                client
                    .execute(statement, values)
                    .await
                    .map(Outcome::Changed)
            })),
        }
    }
}

/// Awaits `sent` together, each request written to the connection when its
/// future is first polled, so in this order: one write, one round trip.
/// Every answer is awaited (the protocol stays in step); the answers in
/// order.
async fn in_order(mut sent: Vec<Answer<'_>>) -> Vec<std::result::Result<Outcome, postgres::Error>> {
    let mut answers: Vec<Option<std::result::Result<Outcome, postgres::Error>>> =
        sent.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, answer) in sent.iter_mut().zip(answers.iter_mut()) {
            if answer.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(done) => *answer = Some(done),
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    answers.into_iter().flatten().collect()
}

/// The last answer of a round trip, or the first error in order: a
/// pending command that failed fails the call it went ahead of.
fn last_answer(
    answers: Vec<std::result::Result<Outcome, postgres::Error>>,
) -> std::result::Result<Outcome, postgres::Error> {
    let mut last = Ok(Outcome::Done);
    for answer in answers {
        last = Ok(answer?);
    }
    last
}

/// Whether the connection string sets `key` itself (`key=` in a URL's
/// query or a key=value string): then its value is kept.
fn sets(url: &str, key: &str) -> bool {
    url.contains(&format!("{key}="))
}

/// `url` parsed, with `settings` applied where the URL sets nothing of
/// its own: the connect timeout, TCP keepalives and `TCP_USER_TIMEOUT`,
/// and the server-side timeouts as startup options (`-c name=value`,
/// placed before the URL's own `options`, which therefore win).
pub(super) fn session_config(
    url: &str,
    settings: &PostgresSettings,
) -> Result<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config =
        url.parse().map_err(|e| Error::Config(format!("{e}")))?;
    if !sets(url, "connect_timeout") {
        config.connect_timeout(settings.connect_timeout);
    }
    let tcp = settings.tcp_timeout;
    if !tcp.is_zero() {
        if !sets(url, "keepalives") {
            config.keepalives(true);
        }
        // Silent for half the bound, then 4 probes an eighth apart: a peer
        // gone for `tcp` is noticed while the session idles.
        if !sets(url, "keepalives_idle") {
            config.keepalives_idle((tcp / 2).max(Duration::from_secs(1)));
        }
        if !sets(url, "keepalives_interval") {
            config.keepalives_interval((tcp / 8).max(Duration::from_secs(1)));
        }
        if !sets(url, "keepalives_retries") {
            config.keepalives_retries(4);
        }
        // Data sent and not acknowledged for `tcp`: the kernel gives up.
        if !sets(url, "tcp_user_timeout") {
            config.tcp_user_timeout(tcp);
        }
    }
    let ms = |d: Duration| d.as_millis();
    let mut options = format!(
        "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
        ms(settings.statement_timeout),
        ms(settings.lock_timeout),
        ms(settings.idle_in_transaction_timeout),
    );
    if let Some(own) = config.get_options().filter(|o| !o.trim().is_empty()) {
        options.push(' ');
        options.push_str(own);
    }
    config.options(&options);
    Ok(config)
}

/// Opens a session on `config`, the whole handshake bounded by `deadline`.
fn open(config: &tokio_postgres::Config, deadline: Duration) -> Result<Session> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let connected =
        runtime.block_on(async { tokio::time::timeout(deadline, config.connect(NoTls)).await });
    let (client, connection) = match connected {
        Ok(connected) => connected?,
        Err(_) => {
            return Err(Error::Unanswered(format!(
                "no session within {:.1} s of connecting (the server or the network to it does not answer)",
                deadline.as_secs_f64()
            )))
        }
    };
    // Driven whenever a call blocks on the runtime (a current-thread
    // runtime runs its tasks only then).
    let connection = runtime.spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "a PostgreSQL session ended");
        }
    });
    Ok(Session {
        client: Some(client),
        connection: Some(connection),
        runtime,
        abandoned: false,
    })
}

/// Runs a request on `$self`'s session client, bounded by the call
/// deadline ([`PgConnection::wait`], [`PgConnection::answered`]). A macro,
/// not a method taking a closure: the request's future borrows the client
/// and the caller's parameters, which a closure's return cannot say.
macro_rules! call {
    ($self:ident, $what:expr, |$client:ident| $request:expr) => {{
        let answered = {
            let session = $self.session.borrow();
            match session.as_ref() {
                None => None,
                Some(session) => {
                    let $client = session.client();
                    Some($self.wait(session, $request))
                }
            }
        };
        $self.answered($what, answered)
    }};
}

impl PgConnection {
    /// Connects to `url` (a `postgres://` URL or a key=value string) with
    /// `settings`: its timeouts where the URL sets none of its own, and
    /// every call bounded by `settings.call_timeout`.
    pub(super) fn connect(url: &str, settings: &PostgresSettings) -> Result<PgConnection> {
        let config = session_config(url, settings)?;
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(settings.connect_timeout);
        let call_timeout = (!settings.call_timeout.is_zero()).then_some(settings.call_timeout);
        let clock = Arc::new(CallClock::new(
            stall_bound(settings.call_timeout, connect_timeout),
            answers_of(url),
        ));
        clock.begin();
        let session = open(&config, connect_timeout);
        clock.end();
        if session.is_ok() {
            clock.answered();
        }
        Ok(PgConnection {
            config,
            connect_timeout,
            call_timeout,
            deadline_on: Cell::new(true),
            clock,
            session: RefCell::new(Some(session?)),
            statements: RefCell::new(HashMap::new()),
            in_transaction: Cell::new(false),
            shared_lock: Cell::new(false),
            read_only: Cell::new(false),
            changes: Cell::new(0),
            broken: Cell::new(false),
            calls: Cell::new(0),
            pending: RefCell::new(Vec::new()),
        })
    }

    /// The clock of this connection's pending call.
    pub(super) fn clock(&self) -> Arc<CallClock> {
        self.clock.clone()
    }

    /// Applies the node's deadline on each call, or lifts it (`false`:
    /// wait as long as it takes, as a migration does).
    pub(super) fn set_call_deadline(&self, on: bool) {
        self.deadline_on.set(on);
    }

    /// Whether the session is gone (the server closed it, restarted, the
    /// socket failed, or a call went unanswered): every statement on it
    /// fails from then on.
    pub(super) fn is_broken(&self) -> bool {
        self.broken.get()
            || self
                .session
                .borrow()
                .as_ref()
                .is_none_or(|s| s.client().is_closed())
    }

    /// Waits for `request` (a call on `session`'s client), at most the
    /// call deadline (then `Err` with the deadline).
    fn wait<T, F>(
        &self,
        session: &Session,
        request: F,
    ) -> std::result::Result<std::result::Result<T, postgres::Error>, Duration>
    where
        F: Future<Output = std::result::Result<T, postgres::Error>>,
    {
        let limit = self.call_timeout.filter(|_| self.deadline_on.get());
        self.calls.set(self.calls.get() + 1);
        self.clock.begin();
        let answered = match limit {
            Some(limit) => session
                .runtime
                .block_on(async { tokio::time::timeout(limit, request).await })
                .map_err(|_| limit),
            None => Ok(session.runtime.block_on(request)),
        };
        self.clock.end();
        // A result, or an error the server sent (not a dropped session).
        if match &answered {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => e.as_db_error().is_some(),
            Err(_) => false,
        } {
            self.clock.answered();
        }
        answered
    }

    /// What a call answered (`None`: there was no session to call on);
    /// an unanswered call closes the session.
    fn answered<T>(
        &self,
        what: &str,
        answered: Option<std::result::Result<std::result::Result<T, postgres::Error>, Duration>>,
    ) -> Result<T> {
        match answered {
            None => {
                self.broken.set(true);
                Err(Error::Unanswered(
                    "the session was closed after a call went unanswered".to_owned(),
                ))
            }
            Some(Ok(result)) => self.track(result),
            Some(Err(limit)) => {
                self.broken.set(true);
                if let Some(mut session) = self.session.borrow_mut().take() {
                    session.abandoned = true;
                }
                Err(Error::Unanswered(format!(
                    "no answer to {what} within {:.1} s (the server hangs, or the network to it drops packets); the session was closed",
                    limit.as_secs_f64()
                )))
            }
        }
    }

    /// `result`, noting a failure that lost the session: the client
    /// does not always report its connection closed at once, so the
    /// errors that say so are kept.
    fn track<T>(&self, result: std::result::Result<T, postgres::Error>) -> Result<T> {
        result.map_err(|e| {
            if super::error::postgres_unavailable(&e) {
                self.broken.set(true);
            }
            Error::Postgres(e)
        })
    }

    /// Opens a new session with the same settings in place of this one;
    /// its prepared statements are prepared again as they are used.
    pub(super) fn reconnect(&mut self) -> Result<()> {
        if let Some(mut old) = self.session.get_mut().take() {
            old.abandoned = true;
        }
        self.statements.get_mut().clear();
        self.pending.get_mut().clear();
        self.in_transaction.set(false);
        self.shared_lock.set(false);
        self.clock.begin();
        let session = open(&self.config, self.connect_timeout);
        self.clock.end();
        let session = session?;
        self.clock.answered();
        *self.session.get_mut() = Some(session);
        self.broken.set(false);
        Ok(())
    }

    /// The statement prepared for `sql` (translated), from the cache.
    pub(super) fn prepare_cached(&self, sql: &str) -> Result<postgres::Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.prepare(sql)?;
        let mut cache = self.statements.borrow_mut();
        if cache.len() >= STATEMENT_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// `sql` translated and prepared, not kept.
    pub(super) fn prepare(&self, sql: &str) -> Result<postgres::Statement> {
        self.flush()?;
        let sql = translate(sql);
        call!(self, "a prepare", |client| client.prepare(&sql))
    }

    pub(super) fn execute(
        &self,
        statement: &postgres::Statement,
        values: &[&dyn ToSql],
    ) -> Result<usize> {
        let bound = bind(values)?;
        let refs: Vec<&(dyn PgToSql + Sync)> =
            bound.iter().map(|v| v as &(dyn PgToSql + Sync)).collect();
        let changed = self.with_pending("a statement", Last::Execute(statement, &refs))?;
        let changed = match changed {
            Outcome::Changed(n) => n,
            _ => 0,
        };
        self.changes.set(changed);
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    pub(super) fn query(
        &self,
        statement: &postgres::Statement,
        values: &[&dyn ToSql],
    ) -> Result<Vec<postgres::Row>> {
        let bound = bind(values)?;
        let refs: Vec<&(dyn PgToSql + Sync)> =
            bound.iter().map(|v| v as &(dyn PgToSql + Sync)).collect();
        let rows = self.with_pending("a query", Last::Query(statement, &refs))?;
        Ok(match rows {
            Outcome::Rows(rows) => rows,
            _ => Vec::new(),
        })
    }

    /// One call: what is pending, then the request `last` makes, sent in
    /// one write and answered in order; `last`'s answer, or the first
    /// error (a pending write that failed fails this call).
    fn with_pending(&self, what: &str, last: Last<'_>) -> Result<Outcome> {
        let pending = self.pending.take();
        let refs = pending_refs(&pending);
        call!(self, what, |client| async {
            let mut sent: Vec<Answer<'_>> = Vec::with_capacity(pending.len() + 1);
            send_pending(client, &pending, &refs, &mut sent);
            sent.push(match last {
                Last::Execute(statement, values) => Box::pin(async move {
                    client
                        .execute(statement, values)
                        .await
                        .map(Outcome::Changed)
                }),
                Last::Query(statement, values) => {
                    Box::pin(
                        async move { client.query(statement, values).await.map(Outcome::Rows) },
                    )
                }
                Last::Simple(sql) => {
                    Box::pin(async move { client.batch_execute(sql).await.map(|()| Outcome::Done) })
                }
            });
            last_answer(in_order(sent).await)
        })
    }

    /// Runs `statements` (each prepared, with its parameters) as one
    /// pipeline: all sent before any answer is awaited, answered in order,
    /// one round trip. `begin` (a simple query opening a transaction) goes
    /// first, after the deferred savepoint commands, and `end` (`COMMIT`)
    /// last, in the same round trip; the transaction state follows them. For
    /// statements that need no earlier one's answer: a read snapshot's
    /// several queries. Every answer is awaited; the first error in order is
    /// answered (a statement after a failed one fails too, its transaction
    /// aborted; a `COMMIT` after it rolls back).
    pub(super) fn pipeline(
        &self,
        begin: Option<&str>,
        statements: &[(postgres::Statement, &[&dyn ToSql])],
        end: Option<&str>,
    ) -> Result<Vec<Vec<postgres::Row>>> {
        let bound = statements
            .iter()
            .map(|(_, values)| bind(values))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<Vec<&(dyn PgToSql + Sync)>> = bound
            .iter()
            .map(|b| b.iter().map(|v| v as &(dyn PgToSql + Sync)).collect())
            .collect();
        if let Some(begin) = begin {
            self.defer(begin);
            self.in_transaction.set(true);
            self.shared_lock.set(false);
            self.read_only.set(true);
        }
        let pending = self.pending.take();
        let pending_values = pending_refs(&pending);
        let answered = call!(self, "a pipeline of statements", |client| async {
            let mut sent: Vec<Answer<'_>> =
                Vec::with_capacity(pending.len() + statements.len() + 1);
            send_pending(client, &pending, &pending_values, &mut sent);
            for ((statement, _), values) in statements.iter().zip(&refs) {
                sent.push(Box::pin(async move {
                    client.query(statement, values).await.map(Outcome::Rows)
                }));
            }
            if let Some(end) = end {
                sent.push(Box::pin(async move {
                    client.batch_execute(end).await.map(|()| Outcome::Done)
                }));
            }
            let mut answers = in_order(sent).await.into_iter();
            for _ in 0..pending.len() {
                answers.next().transpose()?;
            }
            let mut rows = Vec::with_capacity(statements.len());
            for _ in statements {
                rows.push(match answers.next().transpose()? {
                    Some(Outcome::Rows(r)) => r,
                    _ => Vec::new(),
                });
            }
            if end.is_some() {
                answers.next().transpose()?;
            }
            Ok(rows)
        });
        if end.is_some() {
            if answered.is_err() && !self.is_broken() {
                // As [`PgConnection::end`]: whatever failed, no transaction
                // stays open on the server.
                let _ = self.batch("ROLLBACK");
            }
            self.in_transaction.set(false);
            self.shared_lock.set(false);
            self.read_only.set(false);
        }
        answered
    }

    /// Runs `sql` (no parameters, `;`-separated) as one simple query,
    /// after what is pending, in the same round trip.
    pub(super) fn batch(&self, sql: &str) -> Result<()> {
        if !sql.is_empty() {
            self.defer(sql);
        }
        if self.pending.borrow().is_empty() {
            // Nothing to send: an empty simple query, as before.
            return call!(self, "a command", |client| client.batch_execute(sql));
        }
        let mut pending = self.pending.take();
        let last = match pending.pop() {
            Some(Pending::Simple(sql)) => sql,
            Some(write) => {
                pending.push(write);
                String::new()
            }
            None => String::new(),
        };
        self.pending.replace(pending);
        self.with_pending("a command", Last::Simple(&last))
            .map(|_| ())
    }

    /// Queues `sql` (a `SAVEPOINT` or a `RELEASE SAVEPOINT`) to go with
    /// the next command instead of a round trip of its own: ahead of it in
    /// one simple query when that is transaction control (the next
    /// savepoint, a rollback to one, the commit), pipelined ahead of it
    /// when it is a statement (both sent in one write, answered in order;
    /// a savepoint that fails fails the statement after it). The server
    /// runs them in the order they were asked for, before anything after
    /// them, so the transaction is what it would have been, with a start's
    /// six savepoint commands costing no round trip of their own.
    pub(super) fn defer(&self, sql: &str) {
        let mut pending = self.pending.borrow_mut();
        if let Some(Pending::Simple(deferred)) = pending.last_mut() {
            deferred.push_str(sql);
            deferred.push_str("; ");
            return;
        }
        pending.push(Pending::Simple([sql, "; "].concat()));
    }

    /// Queues `statement` with `values`, a write whose answer nobody reads
    /// (no rows, no row count), to go pipelined ahead of the next call
    /// instead of a round trip of its own, as a deferred savepoint does
    /// ([`PgConnection::defer`]): the server runs it in its place in the
    /// transaction, and an error it meets fails that next call (the
    /// transaction is then aborted; its caller rolls back, as on any
    /// error). Only inside a transaction, whose end is such a next call.
    pub(super) fn queue(
        &self,
        statement: &postgres::Statement,
        values: &[&dyn ToSql],
    ) -> Result<()> {
        let bound = bind(values)?;
        self.pending
            .borrow_mut()
            .push(Pending::Write(statement.clone(), bound));
        Ok(())
    }

    /// Whether a queued write is waiting for the next call.
    pub(super) fn has_queued_writes(&self) -> bool {
        self.pending
            .borrow()
            .iter()
            .any(|p| matches!(p, Pending::Write(..)))
    }

    /// Sends what is pending now.
    pub(super) fn flush(&self) -> Result<()> {
        if self.pending.borrow().is_empty() {
            return Ok(());
        }
        self.batch("")
    }

    pub(super) fn is_autocommit(&self) -> bool {
        !self.in_transaction.get()
    }

    /// Calls made on this connection so far.
    pub(super) fn calls(&self) -> u64 {
        self.calls.get()
    }

    pub(super) fn changes(&self) -> u64 {
        self.changes.get()
    }

    /// Opens a transaction with `begin` (which may take locks after it);
    /// `shared`: it takes the write lock shared (a claim, a start batch);
    /// `read_only`: a snapshot for reads.
    pub(super) fn begin(&self, begin: &str, shared: bool, read_only: bool) -> Result<()> {
        if let Err(e) = self.batch(begin) {
            // `BEGIN` may have run and what followed it failed (a lock
            // wait past `lock_timeout`): the session is then in an
            // aborted transaction, which must end before the next one.
            if !self.is_broken() {
                let _ = self.batch("ROLLBACK");
            }
            return Err(e);
        }
        self.in_transaction.set(true);
        self.shared_lock.set(shared);
        self.read_only.set(read_only);
        Ok(())
    }

    /// [`PgConnection::begin`] without a round trip of its own: `begin`
    /// goes ahead of the transaction's first statement, as a deferred
    /// savepoint does ([`PgConnection::defer`]), so a claim's `BEGIN` and
    /// lock cost no wait of their own. What `begin` meets (a lock wait
    /// past `lock_timeout`, a session the server dropped) fails that first
    /// statement instead, and the caller's rollback ends the transaction.
    /// Only for a caller that rolls back on any error and does not retry
    /// on another session when `BEGIN` fails (a read does: its snapshot
    /// opens with [`PgConnection::begin`]).
    pub(super) fn begin_deferred(&self, begin: &str, shared: bool) {
        self.defer(begin);
        self.in_transaction.set(true);
        self.shared_lock.set(shared);
        self.read_only.set(false);
    }

    /// Whether a write transaction (not a read snapshot) is open.
    pub(super) fn in_write_transaction(&self) -> bool {
        self.in_transaction.get() && !self.read_only.get()
    }

    /// Whether the open transaction holds the write lock shared.
    pub(super) fn holds_shared_lock(&self) -> bool {
        self.in_transaction.get() && self.shared_lock.get()
    }

    /// Ends the open transaction with `end` (`COMMIT` or `ROLLBACK`); it
    /// is over whether or not `end` succeeded (a failed commit rolls back).
    pub(super) fn end(&self, end: &str) -> Result<()> {
        if end == "ROLLBACK" {
            // The whole transaction goes, its savepoints and queued
            // writes with it.
            self.pending.borrow_mut().clear();
        }
        let result = self.batch(end);
        if result.is_err() && !self.is_broken() {
            // A deferred savepoint command that failed kept the `COMMIT`
            // after it from running: the transaction is still open (and
            // aborted) on the server. End it so the next `BEGIN` starts
            // afresh (outside a transaction this only warns).
            let _ = self.batch("ROLLBACK");
        }
        self.in_transaction.set(false);
        self.shared_lock.set(false);
        self.read_only.set(false);
        result
    }

    pub(super) fn write_blob(
        &self,
        table: &str,
        column: &str,
        key_column: &str,
        key: &str,
        source: &mut dyn Read,
        size: u64,
    ) -> Result<u64> {
        let sql = format!("UPDATE {table} SET {column} = {column} || ?2 WHERE {key_column} = ?1");
        let statement = self.prepare_cached(&sql)?;
        let mut source = source.take(size);
        let mut copied = 0u64;
        let mut chunk = Vec::with_capacity(BLOB_WRITE_CHUNK.min(size as usize));
        loop {
            chunk.clear();
            let read = (&mut source)
                .take(BLOB_WRITE_CHUNK as u64)
                .read_to_end(&mut chunk)?;
            if read == 0 {
                return Ok(copied);
            }
            let changed = self.execute(&statement, &[&key, &chunk])?;
            if changed == 0 {
                return Err(Error::NoRows);
            }
            copied += read as u64;
        }
    }

    pub(super) fn read_blob_chunk(
        &self,
        table: &str,
        column: &str,
        key_column: &str,
        key: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT substring({column} FROM ?2 FOR ?3) FROM {table} WHERE {key_column} = ?1"
        );
        let statement = self.prepare_cached(&sql)?;
        let from = i64::try_from(offset).unwrap_or(i64::MAX).saturating_add(1);
        let count = i64::try_from(len).unwrap_or(i64::MAX);
        let rows = self.query(&statement, &[&key, &from, &count])?;
        match rows.first() {
            None => Ok(None),
            Some(row) => match value(row, 0)? {
                Value::Blob(bytes) => Ok(Some(bytes)),
                Value::Null => Ok(Some(Vec::new())),
                other => Err(Error::Conversion {
                    column: 0,
                    source: FromSqlError::Other(
                        format!("a blob chunk read as {:?}", other.data_type()).into(),
                    ),
                }),
            },
        }
    }
}

/// `?N` → `$N`, and a bare `?` → the next number, outside string literals,
/// quoted names and comments; SQLite's index hint `INDEXED BY name` left
/// out (PostgreSQL's planner picks the partial index by itself).
pub(super) fn translate(sql: &str) -> String {
    let sql = strip_index_hints(sql);
    let sql = sql.as_str();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut next = 0u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                out.push('$');
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    next += 1;
                    out.push_str(&next.to_string());
                } else {
                    next = digits.parse().unwrap_or(next);
                    out.push_str(&digits);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `sql` without its `INDEXED BY name` clauses.
fn strip_index_hints(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find("INDEXED BY ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "INDEXED BY ".len()..];
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        rest = &after[name_end..];
    }
    out.push_str(rest);
    out
}

/// Column `idx` of `row` as one of SQLite's dynamic values, read by its
/// PostgreSQL type.
pub(super) fn value(row: &postgres::Row, idx: usize) -> Result<Value> {
    let ty = row
        .columns()
        .get(idx)
        .ok_or(Error::Conversion {
            column: idx,
            source: FromSqlError::OutOfRange(idx as i64),
        })?
        .type_()
        .clone();
    let got = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(idx)?.map(Value::Integer),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::OID => row
            .try_get::<_, Option<u32>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(idx)?.map(Value::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(idx)?
            .map(|v| Value::Real(v.into())),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(idx)?.map(Value::Blob),
        _ => match row.try_get::<_, Option<Raw>>(idx)? {
            None => None,
            Some(Raw(bytes)) => Some(decode_raw(&ty, bytes).map_err(|e| Error::Conversion {
                column: idx,
                source: FromSqlError::Other(e),
            })?),
        },
    };
    Ok(got.unwrap_or(Value::Null))
}

/// A column's bytes as the server sent them (binary format).
struct Raw<'a>(&'a [u8]);

impl<'a> PgFromSql<'a> for Raw<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(raw))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

type BoxError = Box<dyn StdError + Sync + Send>;

fn decode_raw(ty: &Type, bytes: &[u8]) -> std::result::Result<Value, BoxError> {
    match *ty {
        Type::NUMERIC => numeric(bytes),
        // jsonb's binary form is a version byte, then the text.
        Type::JSONB => Ok(Value::Text(
            std::str::from_utf8(bytes.get(1..).unwrap_or_default())?.to_owned(),
        )),
        // text, varchar, bpchar, name, json, unknown: UTF-8 text.
        _ => match std::str::from_utf8(bytes) {
            Ok(text) => Ok(Value::Text(text.to_owned())),
            Err(_) => Err(format!("a column of type {ty} that is not text").into()),
        },
    }
}

/// A binary NUMERIC as an integer when it has no fraction and fits, else
/// a real (SUM and AVG of integers answer NUMERIC on PostgreSQL).
fn numeric(bytes: &[u8]) -> std::result::Result<Value, BoxError> {
    let word = |i: usize| -> std::result::Result<i16, BoxError> {
        let b = bytes.get(i * 2..i * 2 + 2).ok_or("a short numeric")?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::try_from(word(0)?).map_err(|_| "a negative digit count")?;
    let weight = i32::from(word(1)?);
    let sign = word(2)? as u16;
    if sign == 0xC000 {
        return Ok(Value::Real(f64::NAN));
    }
    let mut integer: Option<i128> = Some(0);
    let mut real = 0f64;
    let mut fraction = false;
    for i in 0..ndigits {
        let digit = i128::from(word(4 + i)?);
        let power = weight - i as i32;
        real += digit as f64 * 10000f64.powi(power);
        if power < 0 {
            fraction |= digit != 0;
        } else {
            integer = integer.and_then(|n| {
                10000i128
                    .checked_pow(power as u32)
                    .and_then(|p| digit.checked_mul(p))
                    .and_then(|d| n.checked_add(d))
            });
        }
    }
    let negative = sign == 0x4000;
    match integer.and_then(|n| i64::try_from(n).ok()) {
        Some(n) if !fraction => Ok(Value::Integer(if negative { -n } else { n })),
        _ => Ok(Value::Real(if negative { -real } else { real })),
    }
}

/// The parameters as owned dynamic values, ready to bind by type.
fn bind(values: &[&dyn ToSql]) -> Result<Vec<Param>> {
    values
        .iter()
        .map(|v| {
            let value = match v.to_sql()? {
                ToSqlOutput::Borrowed(r) => Value::from(r),
                ToSqlOutput::Owned(v) => v,
                // A zero blob reserves space an incremental write fills;
                // here the write appends, so the row starts empty.
                ToSqlOutput::ZeroBlob(_) => Value::Blob(Vec::new()),
                _ => {
                    return Err(Error::Conversion {
                        column: 0,
                        source: FromSqlError::Other("an unsupported parameter form".into()),
                    })
                }
            };
            Ok(Param(value))
        })
        .collect()
}

/// One parameter: a dynamic value bound as the prepared statement's type.
#[derive(Debug)]
struct Param(Value);

impl PgToSql for Param {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(n) => integer(*n, ty, out),
            Value::Real(x) => match *ty {
                Type::FLOAT8 => PgToSql::to_sql(&x, ty, out),
                Type::FLOAT4 => PgToSql::to_sql(&(*x as f32), ty, out),
                Type::INT8 | Type::INT4 | Type::INT2 if x.fract() == 0.0 => {
                    integer(*x as i64, ty, out)
                }
                _ if text_like(ty) => PgToSql::to_sql(&x.to_string().as_str(), &Type::TEXT, out),
                _ => Err(format!("a real number cannot bind a parameter of type {ty}").into()),
            },
            Value::Text(s) => match *ty {
                Type::INT8 | Type::INT4 | Type::INT2 | Type::BOOL => {
                    let n: i64 = s
                        .trim()
                        .parse()
                        .map_err(|_| format!("text {s:?} bound to a parameter of type {ty}"))?;
                    integer(n, ty, out)
                }
                Type::FLOAT8 | Type::FLOAT4 => {
                    let x: f64 = s
                        .trim()
                        .parse()
                        .map_err(|_| format!("text {s:?} bound to a parameter of type {ty}"))?;
                    Param(Value::Real(x)).to_sql(ty, out)
                }
                Type::BYTEA => PgToSql::to_sql(&s.as_bytes(), ty, out),
                Type::JSONB => {
                    out.extend_from_slice(&[1]);
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                _ => {
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => PgToSql::to_sql(&b.as_slice(), ty, out),
                _ if text_like(ty) => PgToSql::to_sql(&std::str::from_utf8(b)?, &Type::TEXT, out),
                _ => Err(format!("a blob cannot bind a parameter of type {ty}").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn text_like(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON
    )
}

fn integer(n: i64, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
    match *ty {
        Type::INT8 => PgToSql::to_sql(&n, ty, out),
        Type::INT4 => PgToSql::to_sql(&i32::try_from(n)?, ty, out),
        Type::INT2 => PgToSql::to_sql(&i16::try_from(n)?, ty, out),
        Type::OID => PgToSql::to_sql(&u32::try_from(n)?, ty, out),
        Type::BOOL => PgToSql::to_sql(&(n != 0), ty, out),
        Type::FLOAT8 => PgToSql::to_sql(&(n as f64), ty, out),
        Type::FLOAT4 => PgToSql::to_sql(&(n as f32), ty, out),
        _ if text_like(ty) => PgToSql::to_sql(&n.to_string().as_str(), &Type::TEXT, out),
        _ => Err(format!("an integer cannot bind a parameter of type {ty}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollar_numbers_outside_literals() {
        assert_eq!(
            translate("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?12 -- ?3\n AND e = ?"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $12 -- ?3\n AND e = $13"
        );
        assert_eq!(translate("SELECT \"?x\", ?"), "SELECT \"?x\", $1");
        assert_eq!(
            translate("SELECT a FROM t INDEXED BY t_live WHERE b = ?1"),
            "SELECT a FROM t  WHERE b = $1"
        );
    }

    #[test]
    fn the_stall_bound_is_a_quarter_of_the_lesser_timeout_that_is_on() {
        let ms = Duration::from_millis;
        let defaults = PostgresSettings::default();
        assert_eq!(
            stall_bound(defaults.call_timeout, defaults.connect_timeout),
            ms(1250)
        );
        assert_eq!(stall_bound(ms(2000), ms(5000)), ms(500));
        assert_eq!(stall_bound(ms(400), ms(5000)), ms(250), "at least 0.25 s");
        assert_eq!(stall_bound(ms(60_000), ms(60_000)), ms(5000), "at most 5 s");
        // A deadline turned off leaves the other to set the bound.
        assert_eq!(stall_bound(Duration::ZERO, ms(5000)), ms(1250));
        assert_eq!(stall_bound(Duration::ZERO, Duration::ZERO), ms(5000));
    }

    #[test]
    fn the_settings_apply_where_the_url_sets_none_of_its_own() {
        let settings = PostgresSettings::default();
        let secs = Duration::from_secs;
        let config = session_config("postgres://u@h:5432/d", &settings).unwrap();
        assert_eq!(config.get_connect_timeout(), Some(&secs(5)));
        assert_eq!(config.get_tcp_user_timeout(), Some(&secs(20)));
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), secs(10));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(config.get_keepalives_retries(), Some(4));
        assert_eq!(
            config.get_options(),
            Some(
                "-c statement_timeout=15000 -c lock_timeout=10000 \
                 -c idle_in_transaction_session_timeout=15000"
            )
        );
        // The URL's own settings win: its options come after dwserver's.
        let config = session_config(
            "postgres://u@h:5432/d?connect_timeout=9&tcp_user_timeout=3&keepalives_idle=60\
             &options=-c%20statement_timeout%3D1000%20-csearch_path%3Ds",
            &settings,
        )
        .unwrap();
        assert_eq!(config.get_connect_timeout(), Some(&secs(9)));
        assert_eq!(config.get_tcp_user_timeout(), Some(&secs(3)));
        assert_eq!(config.get_keepalives_idle(), secs(60));
        assert_eq!(
            config.get_options(),
            Some(
                "-c statement_timeout=15000 -c lock_timeout=10000 \
                 -c idle_in_transaction_session_timeout=15000 \
                 -c statement_timeout=1000 -csearch_path=s"
            )
        );
        // A TCP timeout of 0 leaves the client's TCP defaults.
        let config = session_config(
            "postgres://u@h/d",
            &PostgresSettings {
                tcp_timeout: Duration::ZERO,
                ..settings
            },
        )
        .unwrap();
        assert_eq!(config.get_tcp_user_timeout(), None);
        assert!(session_config("postgres://u@h:notaport/d", &settings).is_err());
    }

    #[test]
    fn numerics_decode_to_integers_when_whole() {
        // 12345678: weight 1, digits [1234, 5678].
        let bytes = [0, 2, 0, 1, 0, 0, 0, 0, 0x04, 0xD2, 0x16, 0x2E];
        assert_eq!(numeric(&bytes).unwrap(), Value::Integer(12_345_678));
        // -2.5: weight 0, digits [2, 5000], dscale 1.
        let bytes = [0, 2, 0, 0, 0x40, 0, 0, 1, 0, 2, 0x13, 0x88];
        assert_eq!(numeric(&bytes).unwrap(), Value::Real(-2.5));
        // 0: no digits.
        assert_eq!(
            numeric(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap(),
            Value::Integer(0)
        );
    }
}
