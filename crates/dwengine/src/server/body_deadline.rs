//! A request body with a deadline, and how a handler tells its timeout apart.
//!
//! The accept loop ([`crate::server::serve`]) wraps every request body in a
//! [`DeadlineBody`]; the handlers that read bodies ([`crate::server::http`])
//! ask [`is_body_timeout`] whether a failed read was that deadline (a 408)
//! or a malformed body (a 400). It is a module of its own so that the
//! handlers need not import the accept loop, which imports them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Frame, Incoming};

/// A request body that must arrive whole before a deadline, counted from
/// when the request head arrived: a client trickling its body a byte at a
/// time cannot hold the connection longer.
///
/// The timer is made only when the body is not all there at the first
/// read: most bodies arrive with their head, and a boxed `Sleep` made and
/// dropped per request was a measurable part of a start's CPU on the
/// runtime threads (docs/performance.md, "the gate's copies").
pub struct DeadlineBody {
    inner: Incoming,
    /// When the request's head arrived: the deadline counts from here.
    since: tokio::time::Instant,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    limit: Duration,
}

impl DeadlineBody {
    pub(crate) fn new(inner: Incoming, limit: Duration) -> Self {
        DeadlineBody {
            inner,
            since: tokio::time::Instant::now(),
            deadline: None,
            limit,
        }
    }
}

/// The body did not arrive within the body-read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} ms (DW_SERVER_HTTP_BODY_READ_TIMEOUT_MS)", .0.as_millis())]
pub struct BodyTimedOut(pub Duration);

impl hyper::body::Body for DeadlineBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        // As `sleep(limit)` did: a limit past what an `Instant` holds is
        // about thirty years.
        let deadline = self
            .since
            .checked_add(self.limit)
            .unwrap_or_else(|| self.since + Duration::from_secs(86_400 * 365 * 30));
        let sleep = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error` (from reading a body) is the body-read deadline.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}
