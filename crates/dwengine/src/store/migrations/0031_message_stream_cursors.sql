-- How far a run's workflow code consumed each input message stream: the
-- highest `through_position` its workflow-task completions reported
-- (`message_stream_cursors`), and for a run that continued from another,
-- the position its predecessor had reached. Continue-as-new carries it:
-- the successor gets the SDKs' cursor checkpoint and the messages past it,
-- and new appends continue after the highest position. One row per stream
-- a run consumed from (a cursor past 0 names a stream with messages), kept
-- with the run like its messages.
CREATE TABLE message_stream_cursors (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    stream_name TEXT NOT NULL,
    through_position INTEGER NOT NULL,
    PRIMARY KEY (run_id, stream_name)
) WITHOUT ROWID;
