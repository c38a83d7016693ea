package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// slowPost posts to url a body its caller feeds through fed, sent only
// once the server asks for it (Expect: 100-continue): a write to fed
// returns once the handler reads the body. done gets the response's status
// (0: no response).
func slowPost(t *testing.T, url string, header map[string]string) (fed *io.PipeWriter, done <-chan int) {
	feed, fed := io.Pipe()
	t.Cleanup(func() { fed.CloseWithError(io.ErrUnexpectedEOF) }) // a failed test's upload ends
	req, err := http.NewRequest(http.MethodPost, url, feed)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	req.Header.Set("Expect", "100-continue")
	slow := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	status := make(chan int, 1)
	go func() {
		resp, err := slow.Do(req)
		if err != nil {
			status <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	return fed, status
}

// Uploads read at once share one budget of bytes, by what each declares
// (an upload without a length holds the most it may send): past it, one
// waits, then is refused with 503 OVERLOADED and retryAfter, over REST as
// over Connect, rather than the instance holding memory without bound.
func TestUploadsShareABudget(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(c *server.Config) {
		c.UploadBudget = knowledge.MaxMessageBytes // one upload of unknown length, and a little more
		c.UploadWait = 100 * time.Millisecond
	})
	ctx := context.Background()
	r := e.Do("POST", "/api/datastores", e.A.Key, `{"name":"Docs"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)
	path := e.URL + "/api/datastores/" + ds.ID + "/datasources"
	upload := func(name string) ([]byte, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, err := mw.CreateFormFile("file", name)
		require.NoError(t, err)
		_, _ = io.WriteString(fw, "Our shop opens at nine.")
		require.NoError(t, mw.Close())
		return b.Bytes(), mw.FormDataContentType()
	}
	// unsized is a body whose length the client does not know (chunked).
	unsized := func(b []byte) io.Reader { return struct{ io.Reader }{bytes.NewReader(b)} }
	post := func(body io.Reader, contentType string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, path, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+e.A.Key)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	// The first, of unknown length, holds its room while its client sends
	// it slowly: the server asks for the body (Expect: 100-continue) once
	// the room is taken.
	first, firstType := upload("first.txt")
	fed, done := slowPost(t, path, map[string]string{"Authorization": "Bearer " + e.A.Key, "Content-Type": firstType})
	_, err := fed.Write(first[:10])
	require.NoError(t, err)

	// Another of unknown length does not fit beside it.
	second, secondType := upload("second.txt")
	resp := post(unsized(second), secondType)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "OVERLOADED")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	// Nor over Connect (a message without its length).
	creq, err := http.NewRequest(http.MethodPost, e.URL+parleyv1connect.DatastoreServiceCreateDatasourceProcedure,
		unsized([]byte(`{"datastoreId":"`+ds.ID+`","type":"text","name":"c","text":"We close at six."}`)))
	require.NoError(t, err)
	creq.Header.Set("Authorization", "Bearer "+e.A.Key)
	creq.Header.Set("Content-Type", "application/json")
	cresp, err := http.DefaultClient.Do(creq)
	require.NoError(t, err)
	cbody, _ := io.ReadAll(cresp.Body)
	cresp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, cresp.StatusCode, "%s", cbody)
	require.Contains(t, string(cbody), `"code":"unavailable"`)

	// One that says its length holds that much, and fits.
	client := parleyv1connect.NewDatastoreServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = client.CreateDatasource(ctx, &parleyv1.CreateDatasourceRequest{DatastoreId: ds.ID, Type: "text", Name: "c", Text: "We close at six."})
	require.NoError(t, err)
	resp = post(bytes.NewReader(second), secondType)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// The first, whole, is stored; its room is given back.
	_, err = fed.Write(first[10:])
	require.NoError(t, err)
	require.NoError(t, fed.Close())
	require.Equal(t, http.StatusCreated, <-done)
	resp = post(unsized(second), secondType)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// A compressed message holds the most a message may take, not its length
// on the wire: Connect decompresses it whole before the method runs, and a
// few kilobytes of gzip held only those of the budget while they took
// megabytes of memory, many such uploads at once without bound.
func TestCompressedUploadHoldsItsLimit(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(c *server.Config) {
		c.UploadBudget = 1 << 20 // less than a message's limit, more than its compressed length
		c.UploadWait = 100 * time.Millisecond
	})
	r := e.Do("POST", "/api/datastores", e.A.Key, `{"name":"Docs"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)

	msg := `{"datastoreId":"` + ds.ID + `","type":"text","name":"c","text":"We close at six.` + strings.Repeat(" ", 3<<20) + `"}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := io.WriteString(zw, msg)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.Less(t, gz.Len(), 1<<20)

	req, err := http.NewRequest(http.MethodPost, e.URL+parleyv1connect.DatastoreServiceCreateDatasourceProcedure, bytes.NewReader(gz.Bytes()))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.A.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"code":"unavailable"`)
}

// A Connect upload without a key takes no room in the budget: its key is
// checked before its body is read. A keyless caller declaring large bodies
// and sending them slowly held it all, and every organization's uploads on
// the instance were refused 503 meanwhile.
func TestUploadBudgetIsNotHeldWithoutAKey(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(c *server.Config) {
		c.UploadBudget = knowledge.MaxMessageBytes // one upload of unknown length
		c.UploadWait = 100 * time.Millisecond
	})
	r := e.Do("POST", "/api/datastores", e.A.Key, `{"name":"Docs"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)

	// A keyless call of unknown length whose body never comes.
	fed, done := slowPost(t, e.URL+parleyv1connect.DatastoreServiceCreateDatasourceProcedure, map[string]string{"Content-Type": "application/json"})
	// Either it is refused before its body is asked for, or the server
	// reads its body (the transport takes the first bytes): its room held.
	wrote := make(chan struct{})
	go func() {
		if _, err := fed.Write([]byte(`{`)); err == nil {
			close(wrote)
		}
	}()
	status := -1
	select {
	case status = <-done:
	case <-wrote:
	}

	// The organization's upload finds its room.
	client := parleyv1connect.NewDatastoreServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err := client.CreateDatasource(context.Background(), &parleyv1.CreateDatasourceRequest{DatastoreId: ds.ID, Type: "text", Name: "c", Text: "We close at six."})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status, "the keyless call's body was read")
}
