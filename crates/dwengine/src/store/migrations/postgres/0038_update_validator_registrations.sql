-- PostgreSQL twin of ../0038_update_validator_registrations.sql.
CREATE INDEX workers_validating ON workers (namespace, task_queue)
    WHERE update_validators IS NOT NULL;
