-- Input message streams (the SDKs' `ctx.message_stream(name)` and the
-- control plane's `POST /api/workflows/{id}/message-streams/{name}/messages`).
-- A message is delivered to its run as a signal of the reserved name
-- `__durable_workflow_message_stream`; this row gives it its place in its
-- stream (positions 1, 2, … per run and stream) and makes an append with the
-- same message id idempotent. One row per admitted message, each beside its
-- signal row and its SignalReceived event, so the run's pending_signal_count
-- and history bound them; the rows stay with the run like its signals.
CREATE TABLE message_stream_messages (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    stream_name TEXT NOT NULL,
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    signal_id INTEGER NOT NULL REFERENCES signals (id),
    PRIMARY KEY (run_id, stream_name, position)
) WITHOUT ROWID;
CREATE UNIQUE INDEX message_stream_message_ids
    ON message_stream_messages (run_id, stream_name, message_id);
