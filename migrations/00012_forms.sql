-- +goose Up

-- Forms (issue 10): an organization's forms and what visitors send with
-- them. backend/form checks a form's fields and every submitted value;
-- the columns hold what it accepted.
CREATE TABLE forms (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  -- parley.v1.FormField objects (protojson), in the order they are shown.
  fields jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(fields) = 'array'),
  published boolean NOT NULL DEFAULT false,
  success_message text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id)
);
CREATE INDEX forms_org_created ON forms (org_id, created_at DESC, id DESC);
ALTER TABLE forms ENABLE ROW LEVEL SECURITY;
ALTER TABLE forms FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON forms
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER forms_resource_id AFTER INSERT OR DELETE ON forms
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('form');

-- Published forms are served without a key: a transaction that names a
-- form (app.public_form_id) may read that form's row, and only if it is
-- published...
CREATE POLICY public_form ON forms FOR SELECT
  USING (published AND id = nullif(current_setting('app.public_form_id', true), '')::uuid);
-- ...and its organization (for its plan's limits). Submissions are then
-- written in the organization's tenant transaction, which reads the form
-- again.
CREATE POLICY public_form_org ON organizations FOR SELECT
  USING (id IN (SELECT f.org_id FROM forms f
                WHERE f.published
                  AND f.id = nullif(current_setting('app.public_form_id', true), '')::uuid));

CREATE TABLE form_submissions (
  org_id uuid NOT NULL,
  id uuid NOT NULL,
  form_id uuid NOT NULL,
  -- The accepted values by field name (a JSON object).
  data jsonb NOT NULL CHECK (jsonb_typeof(data) = 'object'),
  visitor_id text NOT NULL DEFAULT '',
  conversation_id text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, form_id) REFERENCES forms (org_id, id) ON DELETE CASCADE
);
-- A form's submissions, newest first, by cursor.
CREATE INDEX form_submissions_org_form_created ON form_submissions (org_id, form_id, created_at DESC, id DESC);
ALTER TABLE form_submissions ENABLE ROW LEVEL SECURITY;
ALTER TABLE form_submissions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON form_submissions
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER form_submissions_resource_id AFTER INSERT OR DELETE ON form_submissions
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('form_submission');

-- +goose Down
DELETE FROM resource_ids WHERE kind IN ('form', 'form_submission');
DROP TABLE form_submissions;
DROP POLICY public_form_org ON organizations;
DROP TABLE forms;
