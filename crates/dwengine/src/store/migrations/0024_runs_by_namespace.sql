-- A namespace's runs newest first without a sort: the list of runs (the
-- API's GET /api/workflows and the console's runs page) and the console's
-- bounded walks read `namespace = ? AND id < ? ORDER BY id DESC LIMIT n`.
-- Without this index SQLite found the namespace's rows through
-- runs_by_series and sorted all of them, so a page's cost grew with the
-- namespace's total runs (92 ms at 100,000 runs against 2 ms at 1,000).
-- An index on namespace alone holds each row's id after it, in order.
CREATE INDEX runs_by_namespace ON runs (namespace);
