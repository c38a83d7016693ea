package webhook

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/seal"
)

// The back-off grows from seconds to hours and adds up to about a day;
// attempts past the schedule wait as long as its last step.
func TestNextRetrySchedule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.LessOrEqual(t, NextRetry(1, at).Sub(at), 5*time.Second, "the first retry comes within seconds (River's scheduler adds at most 5 s)")
	var total time.Duration
	prev := time.Duration(0)
	for attempt := 1; attempt < MaxAttempts; attempt++ {
		wait := NextRetry(attempt, at).Sub(at)
		require.GreaterOrEqual(t, wait, prev, "attempt %d waits less than the one before", attempt)
		prev = wait
		total += wait
	}
	require.Greater(t, total, 20*time.Hour)
	require.Less(t, total, 30*time.Hour)
	require.Equal(t, 8*time.Hour, NextRetry(MaxAttempts+5, at).Sub(at))
	require.Equal(t, 3*time.Second, NextRetry(0, at).Sub(at))
}

// A sealed key opens only for its own organization and webhook, and only
// with the key that sealed it; the sealed form does not hold the key.
func TestSealedSecret(t *testing.T) {
	t.Parallel()
	s, err := seal.New(make([]byte, 32))
	require.NoError(t, err)
	org, hook := uuid.New(), uuid.New()
	key, printed, err := newSecret()
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.Regexp(t, `^whsec_[A-Za-z0-9+/]{43}=$`, printed)
	sealed, err := sealSecret(s, org, hook, key)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), string(key))
	got, err := openSecret(s, org, hook, sealed)
	require.NoError(t, err)
	require.Equal(t, key, got)
	_, err = openSecret(s, org, uuid.New(), sealed)
	require.Error(t, err, "opened for another webhook")
	_, err = openSecret(s, uuid.New(), hook, sealed)
	require.Error(t, err, "opened for another organization")
	other, err := seal.New(append(make([]byte, 31), 1))
	require.NoError(t, err)
	_, err = openSecret(other, org, hook, sealed)
	require.Error(t, err, "opened with another key")
}

// A signing key sealed before the sealer moved to backend/seal (this one
// by webhook.Sealer, under 32 zero bytes) still opens: stored endpoints
// keep signing.
func TestSecretSealedBeforeStillOpens(t *testing.T) {
	t.Parallel()
	s, err := seal.New(make([]byte, 32))
	require.NoError(t, err)
	sealed, err := base64.StdEncoding.DecodeString("Ac+3VaqEmLrr7DPl0E/yBnkmRwi7ih5TAR6sXEI9SKtSMLt8DgY+1LYDErDNCuZA4201R9yNxSEnkjJTow==")
	require.NoError(t, err)
	org := uuid.MustParse("01900000-0000-7000-8000-00000000000a")
	hook := uuid.MustParse("01900000-0000-7000-8000-00000000000b")
	key, err := openSecret(s, org, hook, sealed)
	require.NoError(t, err)
	require.Equal(t, "a signing key of 32 bytes.......", string(key))
}
