//! A leased workflow task's poll answer written as bytes, each history
//! event's payload copied from its stored text.
//!
//! Rendering a workflow task parsed every event's stored payload into a
//! `serde_json::Value`, built the event's wire form around it, serialized
//! the whole tree into the reply and dropped it. The stored text is
//! `serde_json`'s own compact output of a `Value` (keys sorted, nothing
//! escaped that need not be: `payload_references::history_text`), which
//! is byte for byte what serializing the parsed payload writes again, so
//! the answer copies it through. [`canonical`] proves that of each text
//! before it is copied; a text that is not in that form (an integer out of
//! range, a float, an escape `serde_json` would not write, keys out of
//! order) or that carries runtime external-payload references (which the
//! wire form rewrites) is parsed and written as before. The answer's
//! other fields stay a `Value` map and are written around the events in
//! the map's key order (docs/performance.md, "A workflow task's history
//! copied from its stored text").

use std::ops::Range;

use serde_json::{Map, Value};

use crate::server::wire;
use crate::store::{StoredEvent, StoredPage};

/// A poll's answer: a JSON tree, or a leased workflow task's answer
/// already written ([`write_workflow_answer`]).
#[derive(Debug)]
pub(crate) enum PollAnswer {
    /// Any answer as a tree (an empty poll, an activity task, a query or
    /// update validation task).
    Tree(Value),
    /// A workflow task's answer, written.
    Written {
        /// The answer's JSON.
        bytes: Vec<u8>,
        /// Whether it is a replay of an earlier answer (it then carries
        /// `"replayed": true`).
        replayed: bool,
    },
}

impl From<Value> for PollAnswer {
    fn from(value: Value) -> Self {
        PollAnswer::Tree(value)
    }
}

impl PollAnswer {
    /// Whether the answer carries `replayed` (at all: an unanswered poll
    /// carries `false`).
    pub(crate) fn has_replayed(&self) -> bool {
        match self {
            PollAnswer::Tree(value) => value.get("replayed").is_some(),
            PollAnswer::Written { replayed, .. } => *replayed,
        }
    }

    /// Whether the answer carries no task.
    pub(crate) fn task_is_null(&self) -> bool {
        match self {
            PollAnswer::Tree(value) => value["task"].is_null(),
            PollAnswer::Written { .. } => false,
        }
    }

    /// The answer as a tree (a written one parsed again: for tests).
    #[cfg(test)]
    pub(crate) fn into_value(self) -> Value {
        match self {
            PollAnswer::Tree(value) => value,
            // Written by this module from `Value`s and stored texts this
            // module checked: it parses.
            PollAnswer::Written { bytes, .. } => {
                serde_json::from_slice(&bytes).unwrap_or(Value::Null)
            }
        }
    }
}

/// A leased workflow task's answer: what `Engine::answer_by` builds as
/// `{"poll_status": "leased", "replayed": true (a replay only),
/// "server_capabilities": …, "task": task}` where `task` is `fields` with
/// `history_events` set to the page's events in their wire form
/// (`wire::event`), written in the bytes that tree serializes to.
pub(crate) fn write_workflow_answer(
    fields: &Map<String, Value>,
    page: &StoredPage,
    capabilities: &[u8],
    replayed: bool,
) -> Result<Vec<u8>, crate::store::Error> {
    let history: usize = page.events.iter().map(|e| e.text.len() + 160).sum();
    let mut out = Vec::with_capacity(1024 + capabilities.len() + history);
    out.extend_from_slice(b"{\"poll_status\":\"leased\",");
    if replayed {
        out.extend_from_slice(b"\"replayed\":true,");
    }
    out.extend_from_slice(b"\"server_capabilities\":");
    out.extend_from_slice(capabilities);
    out.extend_from_slice(b",\"task\":{");
    let mut first = true;
    let mut events_written = false;
    for (key, value) in fields {
        if !events_written && key.as_str() > "history_events" {
            write_key(&mut out, &mut first, "history_events")?;
            write_events(&mut out, &page.events)?;
            events_written = true;
        }
        write_key(&mut out, &mut first, key)?;
        serde_json::to_writer(&mut out, value)?;
    }
    if !events_written {
        write_key(&mut out, &mut first, "history_events")?;
        write_events(&mut out, &page.events)?;
    }
    out.extend_from_slice(b"}}");
    #[cfg(debug_assertions)]
    same_as_tree(&out, fields, page, capabilities, replayed);
    Ok(out)
}

/// In debug builds (every test and conformance run of one), each written
/// answer is held to the tree it replaced: the engine's own histories
/// are the corpus.
#[cfg(debug_assertions)]
fn same_as_tree(
    written: &[u8],
    fields: &Map<String, Value>,
    page: &StoredPage,
    capabilities: &[u8],
    replayed: bool,
) {
    let mut task = fields.clone();
    let events: Result<Vec<Value>, _> = page
        .events
        .iter()
        .map(|e| e.parsed().map(wire::into_event))
        .collect();
    let Ok(events) = events else {
        return;
    };
    task.insert("history_events".into(), events.into());
    let mut answer = Map::new();
    answer.insert("task".into(), Value::Object(task));
    answer.insert("poll_status".into(), "leased".into());
    let capabilities: Value = serde_json::from_slice(capabilities).unwrap_or(Value::Null);
    answer.insert("server_capabilities".into(), capabilities);
    if replayed {
        answer.insert("replayed".into(), true.into());
    }
    let tree = serde_json::to_vec(&Value::Object(answer)).unwrap_or_default();
    assert_eq!(
        String::from_utf8_lossy(written),
        String::from_utf8_lossy(&tree),
        "a written workflow task answer differs from its tree"
    );
}

fn write_key(out: &mut Vec<u8>, first: &mut bool, key: &str) -> serde_json::Result<()> {
    if !std::mem::take(first) {
        out.push(b',');
    }
    serde_json::to_writer(&mut *out, key)?;
    out.push(b':');
    Ok(())
}

fn write_events(out: &mut Vec<u8>, events: &[StoredEvent]) -> Result<(), crate::store::Error> {
    out.push(b'[');
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_event(out, event)?;
    }
    out.push(b']');
    Ok(())
}

/// One event as `wire::event` renders it: its stored payload text copied
/// when [`canonical`], else parsed and serialized.
pub(crate) fn write_event(
    out: &mut Vec<u8>,
    event: &StoredEvent,
) -> Result<(), crate::store::Error> {
    if event.rewritten_on_read() || canonical(&event.text).is_none() {
        serde_json::to_writer(&mut *out, &wire::into_event(event.parsed()?))?;
        return Ok(());
    }
    let id = event.sequence + 1;
    let at = event.recorded_at_ms.map(wire::timestamp);
    out.extend_from_slice(b"{\"event_type\":");
    serde_json::to_writer(&mut *out, event.event_type.as_str())?;
    out.extend_from_slice(b",\"id\":\"");
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(b"\",\"payload\":");
    out.extend_from_slice(event.text.as_bytes());
    out.extend_from_slice(b",\"recorded_at\":");
    serde_json::to_writer(&mut *out, &at)?;
    out.extend_from_slice(b",\"sequence\":");
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(b",\"timestamp\":");
    serde_json::to_writer(&mut *out, &at)?;
    out.push(b'}');
    Ok(())
}

/// The `arguments` of a workflow task's first event, as
/// `payload.get("arguments")` reads them (`Null` when absent).
pub(crate) fn first_arguments(event: &StoredEvent) -> Result<Value, crate::store::Error> {
    let found = match event.rewritten_on_read() {
        true => None,
        false => canonical(&event.text),
    };
    match found {
        Some(Canonical { arguments: None }) => Ok(Value::Null),
        Some(Canonical {
            arguments: Some(span),
        }) => Ok(serde_json::from_str(&event.text[span])?),
        None => Ok(event
            .parsed()?
            .payload
            .get("arguments")
            .cloned()
            .unwrap_or(Value::Null)),
    }
}

/// What [`canonical`] found in a text it proved canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Canonical {
    /// Where the top-level object's `arguments` value is, if it has one.
    pub arguments: Option<Range<usize>>,
}

/// Nesting deeper than this falls back to the parse (which refuses past
/// 128 levels, as before).
const MAX_DEPTH: usize = 100;

/// `Some` when `text` is exactly what serializing its parse writes back
/// (`serde_json::to_string(&serde_json::from_str::<Value>(text)?)`) and
/// no whitespace, object keys in
/// strictly increasing order (and none with an escape), strings escaped
/// only as `serde_json` escapes, integers within `u64` and `i64` (no `-0`),
/// no floats.
pub(crate) fn canonical(text: &str) -> Option<Canonical> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        at: 0,
        arguments: None,
    };
    scan.value(0)?;
    (scan.at == scan.bytes.len()).then_some(Canonical {
        arguments: scan.arguments,
    })
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    arguments: Option<Range<usize>>,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.integer(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        let mut previous: Option<&'a [u8]> = None;
        loop {
            let key = self.string()?;
            // A key with an escape sorts by its unescaped text: not
            // compared here, so not copied.
            if key.contains(&b'\\') || previous.is_some_and(|p| p >= key) {
                return None;
            }
            previous = Some(key);
            self.eat(b':')?;
            let start = self.at;
            self.value(depth + 1)?;
            if depth == 0 && key == b"arguments" {
                self.arguments = Some(start..self.at);
            }
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string's contents (between its quotes) when every escape in it
    /// is one `serde_json` writes: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`, and `\u00xx` (lowercase) for the other control characters.
    fn string(&mut self) -> Option<&'a [u8]> {
        let bytes = self.bytes;
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match *bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(&bytes[start..self.at - 1]);
                }
                b'\\' => {
                    match *bytes.get(self.at + 1)? {
                        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                        b'u' => {
                            let hex = bytes.get(self.at + 2..self.at + 6)?;
                            let lower = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
                            if hex[0] != b'0'
                                || hex[1] != b'0'
                                || !hex[2..].iter().all(|&b| lower(b))
                            {
                                return None;
                            }
                            let code = u8::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16)
                                .ok()?;
                            // Those with a short escape are written short.
                            if code >= 0x20 || matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.at += 6;
                        }
                        _ => return None,
                    }
                }
                // A raw control character does not parse.
                b if b < 0x20 => return None,
                _ => self.at += 1,
            }
        }
    }

    /// An integer as `serde_json` writes a `u64` or an `i64`.
    fn integer(&mut self) -> Option<()> {
        let start = self.at;
        let negative = self.eat(b'-').is_some();
        let digits = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.bytes[digits..self.at]).ok()?;
        if text.is_empty() || (text.len() > 1 && text.starts_with('0')) {
            return None;
        }
        // A fraction or an exponent makes a float, written its own way.
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let fits = if negative {
            // `-0` parses as the float -0.0.
            text != "0"
                && std::str::from_utf8(&self.bytes[start..self.at])
                    .ok()?
                    .parse::<i64>()
                    .is_ok()
        } else {
            text.parse::<u64>().is_ok()
        };
        fits.then_some(())
    }
}

#[cfg(test)]
mod tests;
