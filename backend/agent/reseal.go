package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/tool"
)

// Reseal seals org's agents' http_request header values under s's current
// key (`parley admin reseal`), at most batch agents a transaction, each
// locked from its read to its write (as UpdateAgent locks it), so that
// settings updated meanwhile are not written over with those read before.
// A value no key of s opens is left as it is, and named by its agent's id,
// endpoint and header (never the value). A value still stored in plain
// text from before values were sealed (tool.Endpoint.Legacy) is sealed
// under the current key too, and counted as resealed: left to the agent's
// next update, a rotation that reseals "every value" left it readable in
// the database.
func Reseal(ctx context.Context, store *db.Store, s *seal.Sealer, org uuid.UUID, batch int32) (seal.Tally, []string, error) {
	var t seal.Tally
	var unopenable []string
	for after, more := uuid.Nil, true; more; {
		err := store.Tenant(ctx, org, func(q *dbq.Queries) error {
			rows, err := q.LockAgentToolSettings(ctx, dbq.LockAgentToolSettingsParams{OrgID: org, After: after, MaxRows: batch})
			if err != nil {
				return err
			}
			more = len(rows) == int(batch)
			for _, r := range rows {
				after = r.ID
				var settings tool.Settings
				if err := json.Unmarshal(r.ToolSettings, &settings); err != nil {
					return fmt.Errorf("agent %s: tool settings: %w", r.ID, err)
				}
				changed, lost, err := settings.ResealHeaders(s, org, r.ID, &t)
				if err != nil {
					return err
				}
				for _, l := range lost {
					unopenable = append(unopenable, fmt.Sprintf("agent %s %s", r.ID, l))
				}
				legacy := 0
				for _, e := range settings.HTTPRequest.Endpoints {
					legacy += len(e.Legacy)
				}
				// SECURITY: a plain value is sealed as an update seals it,
				// in the settings as resealed above (nil: none was left).
				stored, err := sealLegacy(settings, owner{s, org, r.ID})
				if err != nil {
					return err
				}
				t.Resealed += legacy
				if stored == nil {
					if !changed {
						continue
					}
					if stored, err = json.Marshal(settings); err != nil {
						return err
					}
				}
				if err := q.ResealAgentToolSettings(ctx, dbq.ResealAgentToolSettingsParams{OrgID: org, ID: r.ID, ToolSettings: stored}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return seal.Tally{}, nil, err
		}
	}
	return t, unopenable, nil
}
