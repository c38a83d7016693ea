package member

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// ChangePassword sets m's own password. A member who has a password must
// give it: a session alone (a borrowed laptop, a stolen cookie) does not
// change it. One who signs in with links only sets a first one.
func (s *Service) ChangePassword(ctx context.Context, m *Member, current, password string) error {
	h, err := newPasswordHash(ctx, password)
	if err != nil {
		return err
	}
	return s.Store.Tenant(ctx, m.OrgID, func(q *dbq.Queries) error {
		row, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: m.OrgID, ID: m.ID})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "member not found")
		}
		if err != nil {
			return err
		}
		// SECURITY: the current password, when there is one, is checked
		// against the row as it is now, not as the session read it.
		if row.PasswordHash != nil && *row.PasswordHash != "" {
			ok, err := CheckPassword(ctx, *row.PasswordHash, current)
			if err != nil {
				return err
			}
			if !ok {
				return apperr.InvalidField("current_password", "is not your current password")
			}
		}
		_, err = q.SetMemberPassword(ctx, dbq.SetMemberPasswordParams{OrgID: m.OrgID, ID: m.ID, PasswordHash: &h})
		return err
	})
}
