//! The accept loop: every connection capped, timed out and drained.
//!
//! `axum::serve` accepts without limit and never times a connection out,
//! so idle and slow sockets piled up until the process ran out of file
//! descriptors. Here hyper's HTTP/1 connection builder serves each
//! connection with its header-read timeout (which also closes kept-alive
//! connections left idle), a semaphore caps open connections (one past the
//! cap is answered 503 `connection_limit` and closed, through a small
//! overflow lane that itself never waits for the client), and each request
//! body must arrive whole before the body-read deadline
//! ([`DeadlineBody`](crate::server::body_deadline::DeadlineBody)).
//! On shutdown the loop stops accepting, ends every wait and long poll
//! (they answer empty), asks each connection to finish its request and
//! close, and returns after the shutdown deadline whatever clients do.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

use crate::server::body_deadline::DeadlineBody;
use crate::server::connections::ConnectionLimits;
use crate::server::http::App;
use crate::waiters::Waiters;

/// Connections past the cap answered at once with a 503 and closed; past
/// this many such answers in flight, a connection is closed unanswered.
const OVERFLOW_ANSWERS: usize = 256;

/// What a connection past the cap is told before it is closed.
const CONNECTION_LIMIT_ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 143\r\n\r\n\
{\"reason\":\"connection_limit\",\"retryable\":true,\"message\":\"this node serves its maximum of open connections (DW_SERVER_HTTP_MAX_CONNECTIONS)\"}";

/// Serves `app` on `listener` until `stop` resolves, then drains within
/// the shutdown deadline.
pub(crate) async fn serve(
    listener: TcpListener,
    app: App,
    limits: ConnectionLimits,
    max_connections: usize,
    waiters: Arc<Waiters>,
    stop: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_ANSWERS));
    let open = Arc::new(AtomicUsize::new(0));
    let (closing, closing_rx) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or a connection reset before accept):
                // back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let (app, builder, mut closing) =
                    (app.clone(), builder.clone(), closing_rx.clone());
                let open = open.clone();
                open.fetch_add(1, Ordering::AcqRel);
                let body_deadline = limits.body_read_timeout;
                tokio::spawn(async move {
                    let service = service(app, body_deadline);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::pin!(connection);
                    let stopping = async {
                        while !*closing.borrow_and_update() {
                            if closing.changed().await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                    };
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        () = stopping => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                    open.fetch_sub(1, Ordering::AcqRel);
                    drop(permit);
                });
            }
            Err(_) => refuse(stream, &overflow, &app, &builder, limits.body_read_timeout),
        }
    }
    drop(listener);
    tracing::info!(
        open = open.load(Ordering::Acquire),
        "stopping: no longer accepting; ending waits and draining connections"
    );
    waiters.stop_all();
    let _ = closing.send(true);
    let drained = tokio::time::timeout(limits.shutdown_deadline, async {
        while open.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = open.load(Ordering::Acquire),
            deadline_ms = limits.shutdown_deadline.as_millis() as u64,
            "shutdown deadline passed: closing the connections still open"
        );
    }
    Ok(())
}

/// The router as hyper's service, each request body under the body-read
/// deadline.
fn service(
    app: App,
    body_deadline: Duration,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let request = request.map(|body| Body::new(DeadlineBody::new(body, body_deadline)));
        app.clone().oneshot(request)
    })
}

/// How long the overflow lane waits for a request line, and how long it
/// gives the 503 to be written and the connection closed.
const OVERFLOW_LOOK: Duration = Duration::from_millis(200);

/// How long a probe served past the cap may take.
const PROBE_PAST_CAP: Duration = Duration::from_secs(5);

/// A connection past the cap: a liveness or readiness probe (`GET
/// /api/health`, `GET /api/ready`) is still served, one request and
/// closed, so an orchestrator never restarts a node whose sockets a flood
/// took; anything else is answered 503 and closed without its request read.
/// Unanswered when the overflow lane is full.
fn refuse(
    stream: TcpStream,
    overflow: &Arc<Semaphore>,
    app: &App,
    builder: &Arc<hyper::server::conn::http1::Builder>,
    body_deadline: Duration,
) {
    let Ok(permit) = overflow.clone().try_acquire_owned() else {
        drop(stream);
        return;
    };
    let (app, builder) = (app.clone(), builder.clone());
    tokio::spawn(async move {
        if is_probe(&stream).await {
            let mut one = (*builder).clone();
            one.keep_alive(false);
            let connection =
                one.serve_connection(TokioIo::new(stream), service(app, body_deadline));
            let _ = tokio::time::timeout(PROBE_PAST_CAP, connection).await;
        } else {
            // A client that sent its request gets it read (so closing does
            // not reset the answer away); one that sends nothing is closed soon.
            let _ = tokio::time::timeout(OVERFLOW_LOOK, answer_and_close(stream)).await;
        }
        drop(permit);
    });
}

/// Whether the connection's first bytes, within [`OVERFLOW_LOOK`], are a
/// probe's request line (peeked, not read).
async fn is_probe(stream: &TcpStream) -> bool {
    const PROBES: [&[u8]; 2] = [b"GET /api/health", b"GET /api/ready"];
    let look = async {
        let mut head = [0u8; 16];
        loop {
            let seen = match stream.peek(&mut head).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => &head[..n],
            };
            let mut undecided = false;
            for probe in PROBES {
                if seen.len() > probe.len() && seen.starts_with(probe) {
                    return matches!(seen[probe.len()], b' ' | b'?');
                }
                let common = seen.len().min(probe.len());
                undecided |= seen[..common] == probe[..common];
            }
            if !undecided {
                return false;
            }
            // A prefix of a probe's line: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(OVERFLOW_LOOK, look)
        .await
        .unwrap_or(false)
}

/// Writes the 503 (it fits a fresh socket's send buffer: one write, no
/// waiting on a client that does not read), half-closes, and reads what the
/// client sent until it closes too: closing with its request unread would
/// reset the connection and lose the answer.
async fn answer_and_close(stream: TcpStream) {
    if stream.writable().await.is_err() || stream.try_write(CONNECTION_LIMIT_ANSWER).is_err() {
        return;
    }
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    let _ = std_stream.shutdown(std::net::Shutdown::Write);
    let Ok(stream) = TcpStream::from_std(std_stream) else {
        return;
    };
    let mut scratch = [0u8; 1024];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
