package compat

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/compat/wire"
)

// WithKnowledge adds the datastore and datasource paths; uploads bounds
// the datasources' uploads read at once (nil: no bound).
func (h *Handler) WithKnowledge(ds parleyv1connect.DatastoreServiceHandler, uploads *knowledge.UploadBudget) *Handler {
	h.datastores, h.uploads = ds, uploads
	return h
}

func ts(t *timestamppb.Timestamp) any {
	if t == nil {
		return nil
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

func datastoreJSON(d *parleyv1.Datastore) map[string]any {
	return map[string]any{
		"id": d.GetId(), "name": d.GetName(), "description": d.GetDescription(),
		"embeddingModel": d.GetEmbeddingModel(), "embeddingDimension": d.GetEmbeddingDimension(),
		"datasourceCount": d.GetDatasourceCount(), "chunkCount": d.GetChunkCount(),
		"createdAt": ts(d.GetCreateTime()), "updatedAt": ts(d.GetUpdateTime()),
	}
}

func datasourceJSON(d *parleyv1.Datasource) map[string]any {
	out := map[string]any{
		"id": d.GetId(), "datastoreId": d.GetDatastoreId(), "type": d.GetType(), "name": d.GetName(),
		"status": d.GetStatus(), "error": d.GetError(), "contentType": d.GetContentType(), "sizeBytes": d.GetSizeBytes(),
		"chunkCount": d.GetChunkCount(), "createdAt": ts(d.GetCreateTime()), "updatedAt": ts(d.GetUpdateTime()),
		"syncedAt": ts(d.GetSyncTime()),
	}
	for k, v := range map[string]string{"url": d.GetUrl(), "question": d.GetQuestion(), "answer": d.GetAnswer(), "sourceUrl": d.GetSourceUrl()} {
		if v != "" {
			out[k] = v
		}
	}
	if d.GetMaxPages() > 0 {
		out["maxPages"] = d.GetMaxPages()
	}
	return out
}

func (h *Handler) createDatastore(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	var b struct {
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := wire.DecodeStrict(body, &b); err != nil {
		return err
	}
	req := &parleyv1.CreateDatastoreRequest{Name: deref(b.Name), Description: deref(b.Description)}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.datastores.CreateDatastore(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/datastores/"+resp.GetDatastore().GetId())
	writeJSON(w, http.StatusCreated, datastoreJSON(resp.GetDatastore()))
	return nil
}

func (h *Handler) listDatastores(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	return respond(h, w, r, &parleyv1.ListDatastoresRequest{Limit: limit, Cursor: cursor}, h.datastores.ListDatastores, http.StatusOK,
		func(resp *parleyv1.ListDatastoresResponse) any {
			items := []map[string]any{}
			for _, d := range resp.GetDatastores() {
				items = append(items, datastoreJSON(d))
			}
			return map[string]any{"datastores": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}

func (h *Handler) getDatastore(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.GetDatastoreRequest{Id: r.PathValue("id")}, h.datastores.GetDatastore, http.StatusOK,
		func(resp *parleyv1.GetDatastoreResponse) any { return datastoreJSON(resp.GetDatastore()) })
}

func (h *Handler) updateDatastore(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	var b struct {
		Name           *string `json:"name"`
		Description    *string `json:"description"`
		EmbeddingModel *string `json:"embeddingModel"`
	}
	if err := wire.DecodeStrict(body, &b); err != nil {
		return err
	}
	req := &parleyv1.UpdateDatastoreRequest{Id: r.PathValue("id"), Name: b.Name, Description: b.Description, EmbeddingModel: b.EmbeddingModel}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.datastores.UpdateDatastore(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, datastoreJSON(resp.GetDatastore()))
	return nil
}

func (h *Handler) deleteDatastore(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteDatastoreRequest{Id: r.PathValue("id")}
	return respond(h, w, r, req, h.datastores.DeleteDatastore, http.StatusOK,
		func(*parleyv1.DeleteDatastoreResponse) any { return map[string]any{"id": req.GetId(), "deleted": true} })
}

// createDatasource takes JSON ({"type":"text",...}) or multipart/form-data
// with the file in the field "file" (and an optional "name").
func (h *Handler) createDatasource(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.CreateDatasourceRequest{DatastoreId: r.PathValue("id")}
	release, err := h.uploads.Hold(r, knowledge.MaxUploadBytes)
	if err != nil {
		return err
	}
	defer release()
	// A media type is case-insensitive (RFC 9110 §8.3.1): an upload sent
	// as Multipart/Form-Data was read as JSON, and refused as malformed.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		if err := knowledge.ReadUpload(w, r, req); err != nil {
			return err
		}
	} else {
		body, err := wire.ReadBodyMax(w, r, knowledge.MaxUploadBytes)
		if err != nil {
			return err
		}
		var b struct {
			Type      *string `json:"type"`
			Name      *string `json:"name"`
			Text      *string `json:"text"`
			URL       *string `json:"url"`
			MaxPages  *int32  `json:"maxPages"`
			Question  *string `json:"question"`
			Answer    *string `json:"answer"`
			SourceURL *string `json:"sourceUrl"`
		}
		if err := wire.DecodeStrict(body, &b); err != nil {
			return err
		}
		req.Type, req.Name, req.Text, req.Url = deref(b.Type), deref(b.Name), deref(b.Text), deref(b.URL)
		req.Question, req.Answer, req.SourceUrl = deref(b.Question), deref(b.Answer), deref(b.SourceURL)
		if b.MaxPages != nil {
			req.MaxPages = *b.MaxPages
		}
		if req.Type == "file" {
			return apperr.InvalidField("type", "files are uploaded as multipart/form-data with the field \"file\"")
		}
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.datastores.CreateDatasource(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/datasources/"+resp.GetDatasource().GetId())
	writeJSON(w, http.StatusCreated, datasourceJSON(resp.GetDatasource()))
	return nil
}

func (h *Handler) listDatasources(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	req := &parleyv1.ListDatasourcesRequest{DatastoreId: r.PathValue("id"), Limit: limit, Cursor: cursor}
	return respond(h, w, r, req, h.datastores.ListDatasources, http.StatusOK,
		func(resp *parleyv1.ListDatasourcesResponse) any {
			items := []map[string]any{}
			for _, d := range resp.GetDatasources() {
				items = append(items, datasourceJSON(d))
			}
			return map[string]any{"datasources": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}

func (h *Handler) getDatasource(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.GetDatasourceRequest{Id: r.PathValue("id")}, h.datastores.GetDatasource, http.StatusOK,
		func(resp *parleyv1.GetDatasourceResponse) any { return datasourceJSON(resp.GetDatasource()) })
}

func (h *Handler) deleteDatasource(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteDatasourceRequest{Id: r.PathValue("id")}
	return respond(h, w, r, req, h.datastores.DeleteDatasource, http.StatusOK,
		func(*parleyv1.DeleteDatasourceResponse) any {
			return map[string]any{"id": req.GetId(), "deleted": true}
		})
}

func (h *Handler) resyncDatasource(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.ResyncDatasourceRequest{Id: r.PathValue("id")}, h.datastores.ResyncDatasource, http.StatusAccepted,
		func(resp *parleyv1.ResyncDatasourceResponse) any { return datasourceJSON(resp.GetDatasource()) })
}

func (h *Handler) queryDatastore(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	var b struct {
		Query   *string `json:"query"`
		TopK    *int32  `json:"topK"`
		Filters *struct {
			DatasourceIDs []string `json:"datasourceIds"`
		} `json:"filters"`
	}
	if err := wire.DecodeStrict(body, &b); err != nil {
		return err
	}
	req := &parleyv1.QueryRequest{DatastoreId: r.PathValue("id"), Query: deref(b.Query)}
	if b.TopK != nil {
		// Refused here both ways, so that the message gives the body's
		// bounds: the request's (0 to 50, 0 for the default) let 0 pass.
		if *b.TopK < 1 || *b.TopK > 50 {
			return apperr.InvalidField("topK", "must be between 1 and 50")
		}
		req.TopK = *b.TopK
	}
	if b.Filters != nil {
		req.DatasourceIds = b.Filters.DatasourceIDs
	}
	if err := h.validate(req); err != nil {
		return filtersField(err)
	}
	resp, err := h.datastores.Query(r.Context(), req)
	if err != nil {
		return filtersField(err)
	}
	items := []map[string]any{}
	for _, x := range resp.GetResults() {
		items = append(items, map[string]any{
			"chunk": x.GetChunk(), "score": x.GetScore(), "source": x.GetSource(), "datasourceId": x.GetDatasourceId(),
			"datasourceName": x.GetDatasourceName(), "title": x.GetTitle(), "heading": x.GetHeading(), "url": x.GetUrl(), "page": x.GetPage(),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": items})
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// respond validates req, calls the service and writes the rendered reply
// with status: the shape of every path-only REST handler.
func respond[Req proto.Message, Resp any](h *Handler, w http.ResponseWriter, r *http.Request, req Req,
	call func(context.Context, Req) (Resp, error), status int, render func(Resp) any) error {
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := call(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, status, render(resp))
	return nil
}

// filtersField names a refused datasource id as the REST body holds it,
// under filters (filters.datasourceIds[0]), as chat does.
func filtersField(err error) error {
	var e *apperr.Error
	if errors.As(err, &e) && strings.HasPrefix(e.Field, "datasource_ids") {
		c := *e
		c.Field = "filters." + e.Field
		c.Message = "filters." + e.Message
		return &c
	}
	return err
}
