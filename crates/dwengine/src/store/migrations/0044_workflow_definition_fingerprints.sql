-- The workflow definition fingerprints a worker registered (a JSON object,
-- workflow type -> fingerprint; NULL: none), from its registration's
-- workflow_definition_fingerprints: the source identity both SDKs compute,
-- which a redrive checks the workers of the failed run's queue against.
-- One column per registration, gone with it. The check walks the queue's
-- registrations through workers_by_queue (0043).
ALTER TABLE workers ADD COLUMN workflow_definition_fingerprints TEXT;
