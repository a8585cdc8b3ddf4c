-- Child workflows started by workflow code over the wire (the
-- start_child_workflow command): the parent's command sequence the child
-- answers, the parent-close policy applied when the parent closes first,
-- the fields every ChildRun* event in the parent's history repeats
-- (JSON: type, instance id, policies, parallel-group fields), the retry
-- policy and the attempt the open run is (a retry moves the link to its
-- new run, as continue-as-new does). Children the
-- in-process executor starts leave sequence NULL and keep their
-- ChildWorkflowClosed event. One row per child, as before.
ALTER TABLE children ADD COLUMN sequence INTEGER;
ALTER TABLE children ADD COLUMN parent_close_policy TEXT NOT NULL DEFAULT 'abandon';
ALTER TABLE children ADD COLUMN event_fields TEXT;
ALTER TABLE children ADD COLUMN retry_policy TEXT;
ALTER TABLE children ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
