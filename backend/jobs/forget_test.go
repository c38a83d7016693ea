package jobs

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/knowledge"
)

// A deletion's forgetting runs now over every message, and again after
// the longest turn over the answers stored since shortly before now: a
// UUIDv7 made at the bound or later is above it, one made before is below.
func TestForgetArgsLatePass(t *testing.T) {
	t.Parallel()
	now := time.Now()
	job := knowledge.ForgetJob{OrgID: uuid.New(), DatasourceIDs: []uuid.UUID{uuid.New()}}
	params := forgetArgs(job, now, 2*time.Minute)
	require.Len(t, params, 2)

	first := params[0].Args.(ForgetArgs)
	require.Equal(t, uuid.Nil, first.AfterMessage, "the first pass reads every message")
	require.Nil(t, params[0].InsertOpts, "the first pass runs now")

	late := params[1].Args.(ForgetArgs)
	require.Equal(t, job.DatasourceIDs, late.DatasourceIDs)
	require.Equal(t, now.Add(2*time.Minute), params[1].InsertOpts.ScheduledAt)
	floor := late.AfterMessage
	stored, err := uuid.NewV7()
	require.NoError(t, err)
	require.Positive(t, bytes.Compare(stored[:], floor[:]), "an answer stored now is read by the late pass")
	// The greatest UUIDv7 of two minutes ago.
	old := v7Floor(now.Add(-2 * time.Minute))
	for i := 6; i < len(old); i++ {
		old[i] = 0xff
	}
	require.Negative(t, bytes.Compare(old[:], floor[:]), "an answer stored well before is left to the first pass")
}
