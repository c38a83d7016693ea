package knowledge

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// uploadRequest builds a multipart request; parts are written in order, a
// part with a file name as a file.
func uploadRequest(t *testing.T, parts ...[3]string) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range parts {
		field, fileName, content := p[0], p[1], p[2]
		if fileName != "" {
			fw, err := mw.CreateFormFile(field, fileName)
			require.NoError(t, err)
			_, err = fw.Write([]byte(content))
			require.NoError(t, err)
			continue
		}
		require.NoError(t, mw.WriteField(field, content))
	}
	require.NoError(t, mw.Close())
	r := httptest.NewRequest(http.MethodPost, "/upload", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

func TestReadUpload(t *testing.T) {
	t.Parallel()
	read := func(r *http.Request) (*parleyv1.CreateDatasourceRequest, error) {
		req := &parleyv1.CreateDatasourceRequest{DatastoreId: "d"}
		return req, ReadUpload(httptest.NewRecorder(), r, req)
	}
	fieldOf := func(err error) string {
		var e *apperr.Error
		require.True(t, errors.As(err, &e), "%v is not an apperr", err)
		require.Equal(t, apperr.Invalid, e.Code)
		return e.Field
	}

	// The file and its name, in either order; other fields ignored.
	req, err := read(uploadRequest(t, [3]string{"name", "", "Manual"}, [3]string{"other", "", "x"}, [3]string{"file", "dir/manual.md", "# Hi"}))
	require.NoError(t, err)
	require.Equal(t, "file", req.GetType())
	require.Equal(t, "manual.md", req.GetFileName())
	require.Equal(t, "Manual", req.GetName())
	require.Equal(t, "# Hi", string(req.GetFile()))
	require.Equal(t, "d", req.GetDatastoreId())
	req, err = read(uploadRequest(t, [3]string{"file", "a.txt", "one"}, [3]string{"name", "", "A"}, [3]string{"file", "b.txt", "two"}))
	require.NoError(t, err)
	require.Equal(t, "a.txt", req.GetFileName(), "the first file wins")
	require.Equal(t, "A", req.GetName())

	// A Windows client's whole path, however long, is the file's name.
	req, err = read(uploadRequest(t, [3]string{"file", `C:\Users\ada\` + strings.Repeat(`Documents\`, 40) + `manual.md`, "# Hi"}))
	require.NoError(t, err)
	require.Equal(t, "manual.md", req.GetFileName())

	// No file (or a "file" field that is not one): Invalid, naming file.
	_, err = read(uploadRequest(t, [3]string{"name", "", "x"}))
	require.Equal(t, "file", fieldOf(err))
	_, err = read(uploadRequest(t, [3]string{"file", "", "not a file"}))
	require.Equal(t, "file", fieldOf(err))

	// A name longer than the schema allows.
	_, err = read(uploadRequest(t, [3]string{"name", "", strings.Repeat("n", maxNameBytes+1)}, [3]string{"file", "a.txt", "x"}))
	require.Equal(t, "name", fieldOf(err))

	// Invalid UTF-8, which Postgres refuses in text: in the name, and in a
	// file name given as filename*=UTF-8''%FF.txt (decoded to raw bytes).
	_, err = read(uploadRequest(t, [3]string{"name", "", "\xff"}, [3]string{"file", "a.txt", "x"}))
	require.Equal(t, "name", fieldOf(err))
	r8 := httptest.NewRequest(http.MethodPost, "/upload", strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%FF.txt\r\n\r\nabc\r\n--x--\r\n"))
	r8.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	_, err = read(r8)
	require.Equal(t, "file", fieldOf(err))

	// Not multipart, or broken.
	r := httptest.NewRequest(http.MethodPost, "/upload", strings.NewReader("{}"))
	r.Header.Set("Content-Type", "application/json")
	_, err = read(r)
	require.Equal(t, "body", fieldOf(err))
	r = httptest.NewRequest(http.MethodPost, "/upload", strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nabc"))
	r.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	_, err = read(r)
	require.Error(t, err)

	// Too large: one byte over the file limit (the file's name known), and
	// a body over the upload limit.
	big := strings.Repeat("a", MaxFileBytes+1)
	_, err = read(uploadRequest(t, [3]string{"file", "big.txt", big}))
	var tl *TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, "big.txt", tl.FileName)
	tooLarge := func(err error) string {
		var e *apperr.Error
		require.True(t, errors.As(err, &e), "%v is not an apperr", err)
		require.Equal(t, apperr.TooLarge, e.Code, "413")
		return e.Field
	}
	require.Equal(t, "file", tooLarge(err))
	_, err = read(uploadRequest(t, [3]string{"name", "", "x"}, [3]string{"padding", "", strings.Repeat("p", MaxUploadBytes)}, [3]string{"file", "late.txt", "x"}))
	require.ErrorAs(t, err, &tl)
	require.Equal(t, "file", tooLarge(err))
}
