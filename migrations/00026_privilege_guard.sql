-- +goose Up

-- Privileges, held by the database as well as by Go. Row security lets a
-- tenant's transaction update its own organization, members and keys; until
-- now only Go kept it from changing in them what the platform grants rather
-- than what the organization owns. The triggers below refuse that, whatever
-- query a tenant transaction runs:
--   members.operator                      (platform operator flag)
--   organizations.plan,
--   organizations.custom_requests_per_*   (its limits)
--   api_keys.plan                         (changed; never above the
--                                          organization's plan, even when set)
-- Plans themselves (limits, knowledge_chunks) are already the operators'
-- alone (migration 00006's policies), and an org_id of any row cannot move
-- to another organization (tenant_isolation's WITH CHECK).
--
-- Who may still change them: an operator transaction (db.Store.Operator:
-- parley_is_operator(), which the database itself checks) for an
-- organization's plan, limits and keys' plans; and `parley admin`
-- (db.Store.CommandLine, app.command_line) for everything here, the operator
-- flag included: there is no operator before the first one.
--
-- app.command_line is a setting like app.org_id: this stops a query of the
-- server's that writes what it must not, not SQL of an attacker's (the app
-- role owns these tables and could drop the triggers). The server never sets
-- it (TestCommandLineScopeIsTheCommandLines).

-- True in a transaction of `parley admin` (db.Store.CommandLine).
CREATE FUNCTION parley_command_line() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT coalesce(current_setting('app.command_line', true), '') = 'on' $$;

-- A plan's place in backend/plan's order (free < starter < pro < enterprise),
-- null for a name that is none of them. TestPlanRankIsGos keeps the two equal.
CREATE FUNCTION parley_plan_rank(plan text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT array_position(ARRAY['free', 'starter', 'pro', 'enterprise'], plan) $$;

-- +goose StatementBegin
CREATE FUNCTION parley_guard_member() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- SECURITY: the operator flag is set by `parley admin operator` only.
  IF NEW.operator IS DISTINCT FROM (CASE WHEN TG_OP = 'INSERT' THEN false ELSE OLD.operator END)
     AND NOT parley_command_line() THEN
    RAISE EXCEPTION 'members.operator is changed by parley admin operator only'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER members_guard BEFORE INSERT OR UPDATE OF operator ON members
  FOR EACH ROW EXECUTE FUNCTION parley_guard_member();

-- +goose StatementBegin
CREATE FUNCTION parley_guard_organization() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- SECURITY: an organization's plan and limits are an operator's to set
  -- (the operator page, parley admin); an organization is made by parley
  -- admin bootstrap.
  IF parley_command_line() OR (SELECT parley_is_operator()) THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT'
     OR NEW.plan IS DISTINCT FROM OLD.plan
     OR NEW.custom_requests_per_minute IS DISTINCT FROM OLD.custom_requests_per_minute
     OR NEW.custom_requests_per_day IS DISTINCT FROM OLD.custom_requests_per_day THEN
    RAISE EXCEPTION 'an organization''s plan and limits are changed by an operator only'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER organizations_guard
  BEFORE INSERT OR UPDATE OF plan, custom_requests_per_minute, custom_requests_per_day ON organizations
  FOR EACH ROW EXECUTE FUNCTION parley_guard_organization();

-- +goose StatementBegin
CREATE FUNCTION parley_guard_api_key() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  org_plan text;
BEGIN
  -- SECURITY: a key's plan changes only with its organization's (an
  -- operator's SetOrgPlan lowering the keys).
  IF TG_OP = 'UPDATE' AND NEW.plan IS DISTINCT FROM OLD.plan
     AND NOT (parley_command_line() OR (SELECT parley_is_operator())) THEN
    RAISE EXCEPTION 'an API key''s plan is changed with its organization''s only'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- SECURITY: per-plan issuance: a key's plan is never above its
  -- organization's. An organization this transaction cannot see (or that is
  -- gone) is left to the foreign key.
  SELECT o.plan INTO org_plan FROM organizations o WHERE o.id = NEW.org_id;
  IF org_plan IS NOT NULL
     AND coalesce(parley_plan_rank(NEW.plan) > parley_plan_rank(org_plan), true) THEN
    RAISE EXCEPTION 'an API key''s plan % is above its organization''s plan %', NEW.plan, org_plan
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER api_keys_guard BEFORE INSERT OR UPDATE OF plan, org_id ON api_keys
  FOR EACH ROW EXECUTE FUNCTION parley_guard_api_key();

-- +goose Down
DROP TRIGGER api_keys_guard ON api_keys;
DROP FUNCTION parley_guard_api_key();
DROP TRIGGER organizations_guard ON organizations;
DROP FUNCTION parley_guard_organization();
DROP TRIGGER members_guard ON members;
DROP FUNCTION parley_guard_member();
DROP FUNCTION parley_plan_rank(text);
DROP FUNCTION parley_command_line();
