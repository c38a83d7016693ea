-- +goose Up

-- `parley admin delete-org` records the deletion in operator_audit, which
-- holds no reference to organizations and so outlives the one deleted.
-- The command line has no operator member to write in the name of
-- (operator_write asks for one): its rows name the command line itself
-- (operator_id nil, operator_email "parley admin"), and only a transaction
-- of `parley admin` (db.Store.CommandLineTx, app.command_line) may add
-- them. Like app.command_line's other uses (migration 00026), this stops a
-- query of the server's, not SQL of an attacker's.
CREATE POLICY command_line_write ON operator_audit FOR INSERT
  WITH CHECK (parley_command_line() AND operator_id = '00000000-0000-0000-0000-000000000000');

-- +goose Down
DROP POLICY command_line_write ON operator_audit;
