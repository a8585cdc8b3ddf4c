-- Run-scoped workflow output streams. A stream is named within its run and
-- holds an ordered, append-only list of items (offsets 0, 1, 2, …). It is
-- open until closed or errored, explicitly or when its run ends; from then
-- it expires `retention_seconds` later (`expires_at_ms`), after which reads
-- treat it as gone and the elected worker heartbeat of its namespace
-- reclaims it and its items a bounded batch at a time, through the partial
-- `workflow_streams_expiry` index.
CREATE TABLE workflow_streams (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'closed', 'errored')),
    error_reason TEXT,
    total_items INTEGER NOT NULL DEFAULT 0 CHECK (total_items >= 0),
    acknowledged_offset INTEGER NOT NULL DEFAULT 0 CHECK (acknowledged_offset >= 0),
    retention_seconds INTEGER NOT NULL CHECK (retention_seconds > 0),
    opened_at_ms INTEGER NOT NULL,
    last_appended_at_ms INTEGER,
    closed_at_ms INTEGER,
    expires_at_ms INTEGER,
    UNIQUE (run_id, name)
);
CREATE INDEX workflow_streams_expiry
    ON workflow_streams (namespace, expires_at_ms) WHERE expires_at_ms IS NOT NULL;

CREATE TABLE workflow_stream_items (
    stream_id INTEGER NOT NULL,
    item_offset INTEGER NOT NULL,
    idempotency_key TEXT,
    payload TEXT,
    payload_codec TEXT,
    payload_reference TEXT,
    item_type TEXT,
    content_type TEXT,
    origin TEXT NOT NULL,
    origin_reference TEXT,
    emitted_at_ms INTEGER NOT NULL,
    PRIMARY KEY (stream_id, item_offset)
) WITHOUT ROWID;
CREATE UNIQUE INDEX workflow_stream_items_idempotency
    ON workflow_stream_items (stream_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
