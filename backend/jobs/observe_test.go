package jobs

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/metrics"
)

// A job put back to wait (river.JobSnooze: its organization's fair share, a
// shutdown) counts as snoozed, not as a failed attempt: a busy
// organization's deliveries, snoozed every second, read as a flood of job
// errors.
func TestObserverCountsSnoozeApart(t *testing.T) {
	t.Parallel()
	run := func(kind string, err error) {
		t.Helper()
		got := (&observer{}).Work(context.Background(), &rivertype.JobRow{ID: 1, Kind: kind, Attempt: 1},
			func(context.Context) error { return err })
		require.Equal(t, err, got, "the job's error goes back to River as it is")
	}
	run("observe_test_snooze", river.JobSnooze(time.Second))
	run("observe_test_fail", errors.New("boom"))
	run("observe_test_cancel", river.JobCancel(errors.New("never")))

	h, err := metrics.Handler()
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	require.Contains(t, body, `parley_job_duration_seconds_count{kind="observe_test_snooze",outcome="snoozed"} 1`)
	require.NotContains(t, body, `parley_job_duration_seconds_count{kind="observe_test_snooze",outcome="error"}`, "a snooze counted as a failed attempt")
	require.Contains(t, body, `parley_job_duration_seconds_count{kind="observe_test_fail",outcome="error"} 1`)
	require.Contains(t, body, `parley_job_duration_seconds_count{kind="observe_test_cancel",outcome="cancelled"} 1`)
}
