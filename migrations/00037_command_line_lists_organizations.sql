-- +goose Up

-- `parley admin reseal` walks every organization, each then in a
-- transaction of its own scoped to it: a transaction of `parley admin`
-- (app.command_line, db.Store.CommandLineOrganizations) may read every
-- organization's row, and nothing else of theirs. The server never sets
-- app.command_line (TestCommandLineScopeIsTheCommandLines).
CREATE POLICY command_line_read ON organizations FOR SELECT USING (parley_command_line());

-- +goose Down
DROP POLICY command_line_read ON organizations;
