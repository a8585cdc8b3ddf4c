//! The one reader of a run's history: pages bounded by events and bytes.
//!
//! Every history read in the store goes through [`read_page`]: a worker's
//! task, the control plane's paged history, describe's first and last
//! event, and [`Store::history`](crate::store::connection::Store::history) (which
//! walks the pages). Rows are read one at a time in sequence order and
//! reading stops at the page's bound, so however long a history is, one
//! read holds one page of it in memory.

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

/// The page of `run`'s history that starts at sequence `from`.
pub(crate) fn read_page(
    conn: &Connection,
    run: RunId,
    from: u64,
    limit: HistoryPageLimit,
) -> Result<HistoryPage, Error> {
    let mut stmt = conn.prepare_cached(
        "SELECT sequence, event_type, payload, recorded_at_ms FROM history_events \
         WHERE run_id = ?1 AND sequence >= ?2 ORDER BY sequence",
    )?;
    let mut rows = stmt.query(params![run.0, to_i64(from)])?;
    let mut events = Vec::new();
    let mut bytes = 0usize;
    while let Some(row) = rows.next()? {
        let sequence = to_u64(row.get(0)?);
        let event_type: String = row.get(1)?;
        let payload: String = row.get(2)?;
        let size = event_type.len() + payload.len();
        if !events.is_empty()
            && (events.len() >= limit.max_events || bytes.saturating_add(size) > limit.max_bytes)
        {
            return Ok(HistoryPage {
                events,
                next_sequence: Some(sequence),
            });
        }
        bytes = bytes.saturating_add(size);
        let Some(kind) = EventType::from_name(&event_type) else {
            return Err(Error::Corrupt(format!("unknown event type {event_type:?}")));
        };
        events.push(HistoryEvent {
            sequence,
            event_type: kind,
            payload: crate::store::payload_references::history_payload(&payload)?,
            recorded_at_ms: row.get(3)?,
        });
    }
    Ok(HistoryPage {
        events,
        next_sequence: None,
    })
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
