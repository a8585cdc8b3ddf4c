-- A signal that arrives while its run's workflow task is leased is stored
-- at once (acknowledged, counted, durable) but its SignalReceived event is
-- held here until that task completes, fails or times out, so history
-- records it after the task's own events; NULL once the event is written.
ALTER TABLE signals ADD COLUMN held_event TEXT;
CREATE INDEX signals_held ON signals (run_id, id) WHERE held_event IS NOT NULL;
