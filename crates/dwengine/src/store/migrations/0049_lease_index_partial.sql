-- `dispatch_leases` held an entry for every dispatch task, ready, leased
-- and done, though each of its readers names `status = 'leased'`: the
-- expired-lease walk every poll pass runs (`Store::expired_leases`), an
-- expired lease's recovery, and a deregistered worker's released leases.
-- Every task moved its entry twice (ready to leased, leased to done), and
-- a finished task's entry stayed. It now holds the leased tasks only, with
-- the same key, so its readers' plans do not change: a task enters it when
-- it is leased and leaves it when it is done or its lease is given back,
-- two index writes a task instead of five, and a start writes none.
DROP INDEX dispatch_leases;
CREATE INDEX dispatch_leases ON dispatch_tasks (kind, status, lease_expires_at_ms)
    WHERE status = 'leased';
