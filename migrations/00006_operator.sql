-- +goose Up

-- Platform operators (members with operator = true, set by `parley admin
-- operator`) read across organizations on /console/admin. Tenant isolation
-- stays as it is for every other transaction: an operator transaction names
-- its member (app.operator_id, set by db.Store.Operator and reset at commit),
-- and the policies below admit it only if the database itself finds that
-- member to be an operator. A transaction that names no one, or a member who
-- is not an operator, gains nothing.

-- The member an operator transaction acts as, or null.
CREATE FUNCTION parley_operator_id() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT nullif(current_setting('app.operator_id', true), '')::uuid $$;

-- Who is an operator, as the database's own check reads it: one row per
-- member with operator = true, kept by the trigger below, removed with the
-- member (ON DELETE CASCADE). Why not read members.operator directly: the
-- operator policy on members calls parley_is_operator(); if that function
-- read members, each check would evaluate members' policies, and so itself,
-- again. Whether Postgres stops that recursion would depend on the order in
-- which the planner evaluates quals. This table's policies never call
-- parley_is_operator(), so the check cannot recurse.
CREATE TABLE operators (
  org_id uuid NOT NULL,
  member_id uuid NOT NULL PRIMARY KEY,
  FOREIGN KEY (org_id, member_id) REFERENCES members (org_id, id) ON DELETE CASCADE
);
ALTER TABLE operators ENABLE ROW LEVEL SECURITY;
ALTER TABLE operators FORCE ROW LEVEL SECURITY;
-- An organization's transaction keeps its own members' rows, and may add one
-- only for a member of its own whose flag is set.
CREATE POLICY tenant_isolation ON operators
  USING (org_id = parley_current_org())
  WITH CHECK (org_id = parley_current_org()
              AND EXISTS (SELECT 1 FROM members m
                          WHERE m.org_id = operators.org_id AND m.id = operators.member_id AND m.operator));
-- An operator transaction sees its own member's row, and no other.
CREATE POLICY self ON operators FOR SELECT
  USING (member_id = parley_operator_id());

-- +goose StatementBegin
CREATE FUNCTION parley_track_operator() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.operator THEN
    INSERT INTO operators (org_id, member_id) VALUES (NEW.org_id, NEW.id) ON CONFLICT (member_id) DO NOTHING;
  ELSE
    DELETE FROM operators WHERE org_id = NEW.org_id AND member_id = NEW.id;
  END IF;
  RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER members_operator AFTER INSERT OR UPDATE OF operator ON members
  FOR EACH ROW EXECUTE FUNCTION parley_track_operator();

-- Operators flagged before this migration. The app role owns members but
-- FORCE makes it see no row without a tenant; lifting FORCE for this one
-- statement is invisible to others (ALTER TABLE holds an exclusive lock
-- until the migration's transaction commits, with FORCE back on).
ALTER TABLE members NO FORCE ROW LEVEL SECURITY;
ALTER TABLE operators NO FORCE ROW LEVEL SECURITY;
INSERT INTO operators (org_id, member_id) SELECT org_id, id FROM members WHERE operator;
ALTER TABLE operators FORCE ROW LEVEL SECURITY;
ALTER TABLE members FORCE ROW LEVEL SECURITY;

-- SECURITY: true only in a transaction that names (app.operator_id) a member
-- whose operator flag is set. SECURITY INVOKER (the default), on purpose:
-- the app role owns every table and FORCE applies to owners, so a SECURITY
-- DEFINER function would run as the same role and see no more; were it ever
-- owned by a role that bypasses RLS, it would answer for anyone's member id
-- instead of for what this transaction may see. It reads operators under
-- that table's own policies (self): a non-operator's transaction finds no
-- row. The policies call it as (SELECT parley_is_operator()): an InitPlan,
-- run at most once per query, and not at all when every row a query reads
-- passes another policy first (a tenant's query and tenant_isolation).
CREATE FUNCTION parley_is_operator() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT parley_operator_id() IS NOT NULL
             AND EXISTS (SELECT 1 FROM operators WHERE member_id = parley_operator_id()) $$;

-- SECURITY: what an operator may do across organizations: read what the
-- admin page counts (members, keys, chat turns), read organizations and
-- change their plan. Nothing else: agents, conversations' other tables,
-- datastores and links stay their organization's alone. (Lowering an
-- organization's keys with its plan is done as that organization, under
-- tenant_isolation.)
CREATE POLICY operator_read ON organizations FOR SELECT USING ((SELECT parley_is_operator()));
CREATE POLICY operator_update ON organizations FOR UPDATE
  USING ((SELECT parley_is_operator())) WITH CHECK ((SELECT parley_is_operator()));
CREATE POLICY operator_read ON members FOR SELECT USING ((SELECT parley_is_operator()));
CREATE POLICY operator_read ON api_keys FOR SELECT USING ((SELECT parley_is_operator()));
CREATE POLICY operator_read ON messages FOR SELECT USING ((SELECT parley_is_operator()));

-- Plans were global and writable by any transaction; their limits are now
-- the operators' to change. Everyone still reads them. (A later migration
-- that adds a plan needs an INSERT policy, or lifts FORCE around its INSERT
-- as the backfill above does.)
ALTER TABLE plans ENABLE ROW LEVEL SECURITY;
ALTER TABLE plans FORCE ROW LEVEL SECURITY;
CREATE POLICY everyone_reads ON plans FOR SELECT USING (true);
CREATE POLICY operator_update ON plans FOR UPDATE
  USING ((SELECT parley_is_operator())) WITH CHECK ((SELECT parley_is_operator()));

-- What operators did. Platform data, not an organization's: only operator
-- transactions read it, and they add rows in their own name only.
CREATE TABLE operator_audit (
  id uuid PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  operator_id uuid NOT NULL,
  operator_email text NOT NULL,
  action text NOT NULL,
  target text NOT NULL,
  detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX operator_audit_at ON operator_audit (at DESC, id DESC);
ALTER TABLE operator_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE operator_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY operator_read ON operator_audit FOR SELECT USING ((SELECT parley_is_operator()));
CREATE POLICY operator_write ON operator_audit FOR INSERT
  WITH CHECK ((SELECT parley_is_operator()) AND operator_id = parley_operator_id());

-- +goose Down
DROP TABLE operator_audit;
DROP POLICY operator_update ON plans;
DROP POLICY everyone_reads ON plans;
ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
ALTER TABLE plans DISABLE ROW LEVEL SECURITY;
DROP POLICY operator_read ON messages;
DROP POLICY operator_read ON api_keys;
DROP POLICY operator_read ON members;
DROP POLICY operator_update ON organizations;
DROP POLICY operator_read ON organizations;
DROP FUNCTION parley_is_operator();
DROP TRIGGER members_operator ON members;
DROP FUNCTION parley_track_operator();
DROP TABLE operators;
DROP FUNCTION parley_operator_id();
