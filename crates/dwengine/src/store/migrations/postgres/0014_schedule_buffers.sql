-- PostgreSQL twin of ../0014_schedule_buffers.sql: the spec time of the next
-- fire, the fires buffer_one/buffer_all hold while a run is open, and the
-- last ten actions describe reports.
ALTER TABLE schedules ADD COLUMN nominal_fire_at_ms BIGINT;
ALTER TABLE schedules ADD COLUMN buffered TEXT NOT NULL DEFAULT '[]';
ALTER TABLE schedules ADD COLUMN buffered_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN recent_actions TEXT NOT NULL DEFAULT '[]';
UPDATE schedules SET nominal_fire_at_ms = next_fire_at_ms;
CREATE INDEX schedules_buffered ON schedules (id) WHERE buffered_count > 0;
