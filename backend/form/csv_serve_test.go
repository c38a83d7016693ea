package form_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/form"
)

// brokenWriter takes the status and fails every write, as a connection
// that broke mid-download.
type brokenWriter struct{ *httptest.ResponseRecorder }

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

// An export that fails once its status went out aborts the response: the
// client sees a broken download, not a shorter file that looks whole.
// Before that, the error is the caller's to answer.
func TestCSVCutShortAbortsTheResponse(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateForm(ctx, dbq.CreateFormParams{OrgID: org, ID: id, Name: "f", Fields: []byte(`[{"name":"a","type":"text"}]`)}); err != nil {
			return err
		}
		_, err := q.CreateSubmission(ctx, dbq.CreateSubmissionParams{OrgID: org, ID: uuid.Must(uuid.NewV7()), FormID: id, Data: []byte(`{"a":"x"}`)})
		return err
	}))
	s := &form.Service{Store: store}
	r := httptest.NewRequest("GET", "/export", nil).WithContext(auth.WithPrincipal(ctx, &auth.Principal{OrgID: org, Scopes: []string{"admin"}}))

	w := httptest.NewRecorder()
	require.NoError(t, s.ServeCSV(w, r, id.String()))
	require.Equal(t, "a,submitted_at,id\n", w.Body.String()[:len("a,submitted_at,id\n")])

	require.PanicsWithValue(t, http.ErrAbortHandler, func() { _ = s.ServeCSV(brokenWriter{httptest.NewRecorder()}, r, id.String()) })

	err = s.ServeCSV(httptest.NewRecorder(), r, uuid.NewString())
	require.Error(t, err, "an unknown form is the caller's to answer")
}
