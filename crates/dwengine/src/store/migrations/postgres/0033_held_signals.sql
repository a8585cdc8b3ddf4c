-- See the SQLite twin: a SignalReceived event held while a task is leased.
ALTER TABLE signals ADD COLUMN held_event TEXT;
CREATE INDEX signals_held ON signals (run_id, id) WHERE held_event IS NOT NULL;
