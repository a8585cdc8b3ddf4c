//! The one reader of a run's history: pages bounded by events and bytes.
//!
//! Every history read in the store goes through [`read_page`]: a worker's
//! task, the control plane's paged history, and
//! [`Store::history`](crate::store::connection::Store::history) (which
//! walks the pages). Rows are selected in sequence order with a `LIMIT`
//! of the page's events and one more ([`PAGE_ROWS`]) and taken one at a
//! time until the page's bound, so however long a history is, one read
//! holds one page of it in memory (PostgreSQL's client would otherwise
//! receive every row after the first). A read that sends its statements
//! together (a describe's first and last event, the control plane's page
//! with its run's row) pages the same rows by the same rule ([`PageRows`]).

use crate::store::db::{params, Connection};
use serde::Serialize;

use crate::store::error::Error;
use crate::store::model::{EventType, HistoryEvent, RunId};
use crate::store::rows::{to_i64, to_u64};

/// The most history one page carries. A page always holds at least one
/// event, so a single event larger than `max_bytes` still gets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPageLimit {
    /// Events per page at most.
    pub max_events: usize,
    /// Canonical bytes (type name plus payload JSON) per page at most.
    pub max_bytes: usize,
}

impl HistoryPageLimit {
    /// At most `max_events` events, whatever their size.
    pub fn events(max_events: usize) -> HistoryPageLimit {
        HistoryPageLimit {
            max_events,
            max_bytes: usize::MAX,
        }
    }
}

impl Default for HistoryPageLimit {
    fn default() -> Self {
        HistoryPageLimit {
            max_events: 1000,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// One page of a run's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryPage {
    /// Events in order.
    pub events: Vec<HistoryEvent>,
    /// Where the next page starts, when there is one.
    pub next_sequence: Option<u64>,
}

/// One stored event as its row holds it: the payload's JSON text as
/// written (`payload_references::history_text`), not parsed. A workflow
/// task's answer writes this text through where it is already the wire
/// form (`server::task_answer`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Position in the run's history, from 0.
    pub sequence: u64,
    /// What happened.
    pub event_type: EventType,
    /// The payload's stored JSON text.
    pub text: String,
    /// When it was recorded (Unix ms; absent on events older than schema 4).
    pub recorded_at_ms: Option<i64>,
}

impl StoredEvent {
    /// Whether reading the payload rewrites it: runtime external-payload
    /// references take their wire form (`payload_references::history_payload`),
    /// so the stored text is not what the wire carries.
    pub fn rewritten_on_read(&self) -> bool {
        self.text
            .contains(crate::store::payload_references::RUNTIME_URI_PREFIX)
    }

    /// The event with its payload parsed, in the SDK's runtime form (what
    /// [`read_page`] reads).
    pub fn parsed(&self) -> Result<HistoryEvent, Error> {
        Ok(HistoryEvent {
            sequence: self.sequence,
            event_type: self.event_type,
            payload: crate::store::payload_references::history_payload(&self.text)?,
            recorded_at_ms: self.recorded_at_ms,
        })
    }
}

/// One page of a run's history as stored (see [`StoredEvent`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPage {
    /// Events in order.
    pub events: Vec<StoredEvent>,
    /// Where the next page starts, when there is one.
    pub next_sequence: Option<u64>,
}

/// The page of `run`'s history that starts at sequence `from`.
pub(crate) fn read_page(
    conn: &Connection,
    run: RunId,
    from: u64,
    limit: HistoryPageLimit,
) -> Result<HistoryPage, Error> {
    let (events, next_sequence) = read_rows(conn, run, from, limit, |event| event.parsed())?;
    Ok(HistoryPage {
        events,
        next_sequence,
    })
}

/// [`read_page`]'s page with each payload's stored text, unparsed: the
/// same rows within the same bounds.
pub(crate) fn read_stored_page(
    conn: &Connection,
    run: RunId,
    from: u64,
    limit: HistoryPageLimit,
) -> Result<StoredPage, Error> {
    let (events, next_sequence) = read_rows(conn, run, from, limit, Ok)?;
    Ok(StoredPage {
        events,
        next_sequence,
    })
}

/// The rows of one page, each made into a `T` by `each`, and where the
/// next page starts.
fn read_rows<T>(
    conn: &Connection,
    run: RunId,
    from: u64,
    limit: HistoryPageLimit,
    each: impl FnMut(StoredEvent) -> Result<T, Error>,
) -> Result<(Vec<T>, Option<u64>), Error> {
    // The `LIMIT` matters on PostgreSQL, whose client collects every row
    // a statement answers before the first is looked at: without it a
    // one-event read (`read_event`) shipped the rest of the history.
    let mut stmt = conn.prepare_cached(PAGE_ROWS)?;
    let mut rows = stmt.query(params![run.0, to_i64(from), PageRows::rows_wanted(limit)])?;
    let mut page = PageRows::new(limit);
    while let Some(row) = rows.next()? {
        if !page.push(row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)? {
            break;
        }
    }
    let (events, next) = page.finish();
    Ok((
        events.into_iter().map(each).collect::<Result<_, _>>()?,
        next,
    ))
}

/// A page's rows, with a `LIMIT` of [`PageRows::rows_wanted`]: `?1` the
/// run, `?2` the first sequence, `?3` the rows. Every history read
/// selects them, one that sends its statements together
/// (`Connection::read_together`) as well as `read_page`.
pub(crate) const PAGE_ROWS: &str = "SELECT sequence, event_type, payload, recorded_at_ms \
     FROM history_events WHERE run_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3";

/// A page gathered row by row, in sequence order, up to its bound: the
/// rule every history read pages by.
pub(crate) struct PageRows {
    limit: HistoryPageLimit,
    events: Vec<StoredEvent>,
    bytes: usize,
    next: Option<u64>,
}

impl PageRows {
    pub(crate) fn new(limit: HistoryPageLimit) -> PageRows {
        PageRows {
            limit,
            events: Vec::new(),
            bytes: 0,
            next: None,
        }
    }

    /// The most rows a page needs read: its events and the one after,
    /// where the next page starts.
    pub(crate) fn rows_wanted(limit: HistoryPageLimit) -> i64 {
        to_i64(u64::try_from(limit.max_events.max(1)).unwrap_or(u64::MAX)).saturating_add(1)
    }

    /// Takes the next row; `false` once the page is full (this row, not
    /// taken, is where the next page starts, and later rows are ignored).
    pub(crate) fn push(
        &mut self,
        sequence: i64,
        event_type: String,
        payload: String,
        recorded_at_ms: Option<i64>,
    ) -> Result<bool, Error> {
        if self.next.is_some() {
            return Ok(false);
        }
        let sequence = to_u64(sequence);
        let size = event_type.len() + payload.len();
        let limit = self.limit;
        if !self.events.is_empty()
            && (self.events.len() >= limit.max_events
                || self.bytes.saturating_add(size) > limit.max_bytes)
        {
            self.next = Some(sequence);
            return Ok(false);
        }
        self.bytes = self.bytes.saturating_add(size);
        let Some(kind) = EventType::from_name(&event_type) else {
            return Err(Error::Corrupt(format!("unknown event type {event_type:?}")));
        };
        self.events.push(StoredEvent {
            sequence,
            event_type: kind,
            text: payload,
            recorded_at_ms,
        });
        Ok(true)
    }

    /// The page's events and where the next page starts.
    pub(crate) fn finish(self) -> (Vec<StoredEvent>, Option<u64>) {
        (self.events, self.next)
    }
}

/// `run`'s event at sequence `at`, if it has one.
pub(crate) fn read_event(
    conn: &Connection,
    run: RunId,
    at: u64,
) -> Result<Option<HistoryEvent>, Error> {
    let page = read_page(conn, run, at, HistoryPageLimit::events(1))?;
    Ok(page.events.into_iter().next().filter(|e| e.sequence == at))
}
