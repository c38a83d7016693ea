-- +goose Up

-- The conversations' delete trigger (migration 00024) keeps the plans of
-- its statements. A tenant transaction plans each statement for its
-- parameters (plan_cache_mode force_custom_plan, db.Store.Tenant), and
-- PL/pgSQL's statements inside it alike: the trigger planned its sum of
-- the conversation's answers again for every conversation deleted, 250 µs
-- a row, 1.2-1.7 s of a batch of 5,000 conversations of `parley admin
-- delete-org` and likewise of an agent's deletion. Its statements read
-- one conversation by key, whose generic plan suits every organization
-- (docs/benchmarks.md, "Deleting a large organization").
ALTER FUNCTION parley_keep_usage() SET plan_cache_mode = auto;

-- +goose Down
ALTER FUNCTION parley_keep_usage() RESET plan_cache_mode;
