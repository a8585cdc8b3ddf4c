-- Schedules, continued: the spec time of the next fire (next_fire_at_ms is
-- that time plus the fire's jitter), the fires buffer_one/buffer_all hold
-- while a run is open (a JSON array, capped by the server; buffered_count
-- mirrors its length for the drain's partial index), and the last ten
-- actions describe reports.
ALTER TABLE schedules ADD COLUMN nominal_fire_at_ms INTEGER;
ALTER TABLE schedules ADD COLUMN buffered TEXT NOT NULL DEFAULT '[]';
ALTER TABLE schedules ADD COLUMN buffered_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN recent_actions TEXT NOT NULL DEFAULT '[]';
UPDATE schedules SET nominal_fire_at_ms = next_fire_at_ms;
CREATE INDEX schedules_buffered ON schedules (id) WHERE buffered_count > 0;
