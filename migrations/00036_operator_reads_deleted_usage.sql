-- +goose Up

-- The operator's page counts each organization's chat turns this month
-- (backend/operator). A deleted conversation's turns live on in
-- usage_deleted (migration 00024), which only the organization's own
-- transactions read: an organization that deleted its conversations took
-- its month's turns off the operator's page, though not off its own
-- overview. Operators read it as they read messages (migration 00006).
CREATE POLICY operator_read ON usage_deleted FOR SELECT USING ((SELECT parley_is_operator()));

-- +goose Down
DROP POLICY operator_read ON usage_deleted;
