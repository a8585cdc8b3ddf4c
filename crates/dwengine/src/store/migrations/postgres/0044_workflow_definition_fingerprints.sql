-- PostgreSQL twin of ../0044_workflow_definition_fingerprints.sql.
ALTER TABLE workers ADD COLUMN workflow_definition_fingerprints TEXT;
