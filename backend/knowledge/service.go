package knowledge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/page"
)

// DefaultTopK is a query's result count when none is asked.
const DefaultTopK = 5

// Service is DatastoreService.
type Service struct {
	K *Knowledge
	// Jobs enqueues ingestion, and the forgetting of deleted datasources'
	// text (it need not run workers).
	Jobs Enqueuer
	// Uploads bounds the uploads read at once, on every path that takes
	// one (Connect: Holding; REST and the console: Hold); nil: no bound.
	Uploads *UploadBudget
}

// Enqueuer schedules the ingestion of a datasource in the transaction that
// creates or changes it, and the forgetting of datasources' cited text
// (Knowledge.ForgetCited) in the transaction that deletes them: the job
// exists if and only if the change commits. backend/jobs implements it
// with River.
type Enqueuer interface {
	EnqueueIngest(ctx context.Context, tx pgx.Tx, job IngestJob) error
	EnqueueForget(ctx context.Context, tx pgx.Tx, job ForgetJob) error
}

// IngestJob is what an ingestion job needs to know: which datasource, and
// how large it is (its timeout grows with it, see IngestTimeout).
type IngestJob struct {
	OrgID, DatasourceID uuid.UUID
	SizeBytes           int64
	MaxPages            int
}

// ingestJob describes the ingestion of a stored datasource.
func ingestJob(org uuid.UUID, r dbq.GetDatasourceRow) IngestJob {
	return IngestJob{OrgID: org, DatasourceID: r.ID, SizeBytes: r.SizeBytes, MaxPages: configOf(r.Config).MaxPages}
}

var _ parleyv1connect.DatastoreServiceHandler = (*Service)(nil)

func parseID(raw, label string) (uuid.UUID, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, apperr.New(apperr.NotFound, "%s %q not found", label, raw)
	}
	return id, nil
}

func (s *Service) tenant(ctx context.Context, fn func(p *auth.Principal, q *dbq.Queries) error) error {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return err
	}
	return s.K.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error { return fn(p, q) })
}

// datastore loads one of the caller's datastores, or explains its absence.
func datastore(ctx context.Context, q *dbq.Queries, org uuid.UUID, raw string) (dbq.Datastore, error) {
	return readDatastore(ctx, q, org, raw, q.GetDatastore)
}

// keyShareDatastore is datastore for a transaction that adds rows referring
// to it: it holds the datastore until the transaction ends, and waits for a
// deletion already running (then the datastore is missing), so the insert
// never meets a deleted datastore's foreign key.
func keyShareDatastore(ctx context.Context, q *dbq.Queries, org uuid.UUID, raw string) (dbq.Datastore, error) {
	return readDatastore(ctx, q, org, raw, func(ctx context.Context, p dbq.GetDatastoreParams) (dbq.Datastore, error) {
		return q.KeyShareDatastore(ctx, dbq.KeyShareDatastoreParams(p))
	})
}

func readDatastore(ctx context.Context, q *dbq.Queries, org uuid.UUID, raw string, get func(context.Context, dbq.GetDatastoreParams) (dbq.Datastore, error)) (dbq.Datastore, error) {
	id, err := parseID(raw, "datastore")
	if err != nil {
		return dbq.Datastore{}, err
	}
	d, err := get(ctx, dbq.GetDatastoreParams{OrgID: org, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return d, db.Missing(ctx, q, "datastore", "datastore", id)
	}
	return d, err
}

func datastoreProto(ctx context.Context, q *dbq.Queries, d dbq.Datastore) (*parleyv1.Datastore, error) {
	c, err := q.DatastoreCounts(ctx, dbq.DatastoreCountsParams{OrgID: d.OrgID, DatastoreID: d.ID})
	if err != nil {
		return nil, err
	}
	return &parleyv1.Datastore{
		Id: d.ID.String(), Name: d.Name, Description: d.Description, EmbeddingModel: d.EmbeddingModel,
		EmbeddingDimension: d.EmbeddingDim, DatasourceCount: c.Datasources, ChunkCount: c.Chunks,
		CreateTime: timestamppb.New(d.CreatedAt), UpdateTime: timestamppb.New(d.UpdatedAt),
	}, nil
}

// CreateDatastore implements DatastoreService.
func (s *Service) CreateDatastore(ctx context.Context, req *parleyv1.CreateDatastoreRequest) (*parleyv1.CreateDatastoreResponse, error) {
	var out *parleyv1.Datastore
	err := s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		d, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{
			OrgID: p.OrgID, ID: id, Name: req.GetName(), Description: req.GetDescription(),
			EmbeddingModel: s.K.Default.Model(), EmbeddingDim: int32(s.K.Default.Dimension()),
		})
		if err != nil {
			return err
		}
		out, err = datastoreProto(ctx, q, d)
		return err
	})
	return &parleyv1.CreateDatastoreResponse{Datastore: out}, err
}

// GetDatastore implements DatastoreService.
func (s *Service) GetDatastore(ctx context.Context, req *parleyv1.GetDatastoreRequest) (*parleyv1.GetDatastoreResponse, error) {
	var out *parleyv1.Datastore
	err := s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		d, err := datastore(ctx, q, p.OrgID, req.GetId())
		if err != nil {
			return err
		}
		out, err = datastoreProto(ctx, q, d)
		return err
	})
	return &parleyv1.GetDatastoreResponse{Datastore: out}, err
}

// MaxListLimit bounds a page of datastores or datasources; it is also the
// default.
const MaxListLimit = 100

// ListDatastores implements DatastoreService: a page of the organization's
// datastores, newest first. A cursor that is not one of this listing's is
// Invalid.
func (s *Service) ListDatastores(ctx context.Context, req *parleyv1.ListDatastoresRequest) (*parleyv1.ListDatastoresResponse, error) {
	limit := page.Size(req.GetLimit(), MaxListLimit, MaxListLimit)
	beforeTime, beforeID, err := page.After(req.GetCursor())
	if err != nil {
		return nil, err
	}
	resp := &parleyv1.ListDatastoresResponse{Datastores: []*parleyv1.Datastore{}}
	err = s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		rows, err := q.PageDatastores(ctx, dbq.PageDatastoresParams{OrgID: p.OrgID, BeforeTime: beforeTime, BeforeID: beforeID, MaxRows: limit + 1})
		if err != nil {
			return err
		}
		rows, resp.NextCursor = page.Cut(rows, limit, func(d dbq.Datastore) (time.Time, string) { return d.CreatedAt, d.ID.String() })
		for _, d := range rows {
			pd, err := datastoreProto(ctx, q, d)
			if err != nil {
				return err
			}
			resp.Datastores = append(resp.Datastores, pd)
		}
		return nil
	})
	return resp, err
}

// UpdateDatastore implements DatastoreService. A new embedding model
// re-embeds every datasource: each gets an ingestion job, enqueued with the
// change.
func (s *Service) UpdateDatastore(ctx context.Context, req *parleyv1.UpdateDatastoreRequest) (*parleyv1.UpdateDatastoreResponse, error) {
	if req.Name == nil && req.Description == nil && req.EmbeddingModel == nil {
		// As every other update says: an empty change is a mistake, not a
		// read.
		return nil, apperr.InvalidField("body", "names no field to update (writable: name, description, embeddingModel)")
	}
	var emb embed.Embedder
	if req.EmbeddingModel != nil {
		var err error
		if emb, err = s.K.Embedder(req.GetEmbeddingModel()); err != nil {
			return nil, apperr.InvalidField("embedding_model", "%q is not a configured embedder", req.GetEmbeddingModel())
		}
	}
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Datastore
	err = s.K.Store.TenantTx(ctx, p.OrgID, func(tx pgx.Tx, q *dbq.Queries) error {
		d, err := datastore(ctx, q, p.OrgID, req.GetId())
		if err != nil {
			return err
		}
		id := d.ID
		if emb != nil {
			// A switch takes the row FOR UPDATE before it lists the
			// datasources to re-embed: a datasource being added
			// (KeyShareDatastore) commits first and is listed, or waits
			// and is ingested with the new embedder. Unlisted, its run
			// read the old one, found it replaced and stopped, and no run
			// followed: it stayed running for good. Taken whenever an
			// embedder is named, not only when d (read unlocked) has
			// another: a switch committed since may have left the row on
			// another, and the update below, which reads it again, then
			// switches it back.
			n, err := q.LockDatastore(ctx, dbq.LockDatastoreParams{OrgID: p.OrgID, ID: id})
			if err == nil && n == 0 {
				return db.Missing(ctx, q, "datastore", "datastore", id)
			}
			if err != nil {
				return err
			}
		}
		d, err = q.UpdateDatastore(ctx, dbq.UpdateDatastoreParams{OrgID: p.OrgID, ID: id, Name: req.Name, Description: req.Description})
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted since it was read (the update waited for the
			// deletion to commit): missing, as it would be read now.
			return db.Missing(ctx, q, "datastore", "datastore", id)
		}
		if err != nil {
			return err
		}
		if emb != nil && emb.Model() != d.EmbeddingModel {
			if d, err = q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{
				OrgID: p.OrgID, ID: d.ID, EmbeddingModel: emb.Model(), EmbeddingDim: int32(emb.Dimension()),
			}); err != nil {
				return err
			}
			sources, err := q.ListDatasources(ctx, dbq.ListDatasourcesParams{OrgID: p.OrgID, DatastoreID: d.ID})
			if err != nil {
				return err
			}
			for _, src := range sources {
				if err := q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: p.OrgID, ID: src.ID, Status: "pending"}); err != nil {
					return err
				}
				if err := s.Jobs.EnqueueIngest(ctx, tx, ingestJob(p.OrgID, dbq.GetDatasourceRow(src))); err != nil {
					return err
				}
			}
		}
		out, err = datastoreProto(ctx, q, d)
		return err
	})
	return &parleyv1.UpdateDatastoreResponse{Datastore: out}, err
}

// DeleteDatastore implements DatastoreService.
func (s *Service) DeleteDatastore(ctx context.Context, req *parleyv1.DeleteDatastoreRequest) (*parleyv1.DeleteDatastoreResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
	defer cancel()
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	err = s.K.Store.TenantTx(ctx, p.OrgID, func(tx pgx.Tx, q *dbq.Queries) error {
		d, err := datastore(ctx, q, p.OrgID, req.GetId())
		if err != nil {
			return err
		}
		// The datastore's row first, as its deletion takes it, then the
		// datasources its deletion cascades to, whose cited text goes
		// after them (forget).
		n, err := q.LockDatastore(ctx, dbq.LockDatastoreParams{OrgID: p.OrgID, ID: d.ID})
		if err == nil && n == 0 {
			// Another request deleted it since it was read (this one
			// waited for it): missing, as it would be read now.
			return db.Missing(ctx, q, "datastore", "datastore", d.ID)
		}
		if err != nil {
			return err
		}
		sources, err := q.DatastoreDatasourceIDs(ctx, dbq.DatastoreDatasourceIDsParams{OrgID: p.OrgID, DatastoreID: d.ID})
		if err != nil {
			return err
		}
		if _, err := q.DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: p.OrgID, ID: d.ID}); err != nil {
			return err
		}
		return s.forget(ctx, tx, p.OrgID, sources)
	})
	return &parleyv1.DeleteDatastoreResponse{}, err
}

// forget enqueues, in the transaction that deletes the datasources, the
// job that takes their text out of the answers that cited them
// (Knowledge.ForgetCited). Asynchronous, done within seconds of the
// commit, so that the DELETE stays fast. Rewriting the organization's
// answers in the DELETE's transaction (a trigger on datasources, measured)
// reads and de-TOASTs every answer's sources there: 1.9 s for 100k
// answers, tens of seconds at a million, holding the deletion's locks and
// risking the request's deadline. The job works in short batches instead.
func (s *Service) forget(ctx context.Context, tx pgx.Tx, org uuid.UUID, datasources []uuid.UUID) error {
	if len(datasources) == 0 {
		return nil
	}
	if err := s.Jobs.EnqueueForget(ctx, tx, ForgetJob{OrgID: org, DatasourceIDs: datasources}); err != nil {
		return fmt.Errorf("enqueueing the forgetting of cited text: %w", err)
	}
	return nil
}

// baseName is an uploaded file's name without the folders a client sent
// with it, as "/" or "\" separates them (a Windows browser or client sends
// C:\Users\...\report.pdf, which multipart's FileName keeps whole on
// Linux), or "upload" when no name is left ("", ".", "..", "/").
func baseName(fileName string) string {
	if i := strings.LastIndexAny(fileName, `/\`); i >= 0 {
		fileName = fileName[i+1:]
	}
	if fileName == "" || fileName == "." || fileName == ".." {
		return "upload"
	}
	return fileName
}

// maxNameRunes is a datasource name's length at most (the schema's).
const maxNameRunes = 300

// StoredBytesPerChunk is how many bytes of uploads and texts an
// organization's datasources may keep for each chunk its plan lets it
// hold: 100 MiB on the free plan's 25,000 chunks. A chunk holds about
// 1.2 KB of text; a PDF or an office file is several times its text.
const StoredBytesPerChunk = 4 << 10

// CreateDatasource implements DatastoreService: the row and its ingestion
// job are written in one transaction.
func (s *Service) CreateDatasource(ctx context.Context, req *parleyv1.CreateDatasourceRequest) (*parleyv1.CreateDatasourceResponse, error) {
	cfg := datasourceConfig{URL: req.GetUrl(), MaxPages: int(req.GetMaxPages()), Question: req.GetQuestion(),
		Answer: req.GetAnswer(), SourceURL: req.GetSourceUrl(), FileName: req.GetFileName()}
	name := req.GetName()
	var content []byte
	contentType := ""
	switch req.GetType() {
	case "text":
		content = []byte(req.GetText())
		contentType = KindMarkdown
		if name == "" {
			name = "Text"
		}
	case "qa":
		if name == "" {
			name = cfg.Question
		}
	case "web_page", "web_site":
		if err := s.K.validURL(ctx, cfg.URL); err != nil {
			return nil, apperr.InvalidField("url", "%v", err)
		}
		if name == "" {
			name = cfg.URL
		}
		if req.GetType() == "web_site" && cfg.MaxPages == 0 {
			cfg.MaxPages = DefaultMaxPages
		}
	case "file":
		content = req.GetFile()
		cfg.FileName = baseName(cfg.FileName)
		kind, err := Detect(cfg.FileName, content)
		if err != nil {
			return nil, apperr.InvalidField("file", "%v (supported: PDF, DOCX, PPTX, XLSX, HTML, Markdown, TXT, CSV, JSON)", err)
		}
		contentType = kind
		if name == "" {
			name = cfg.FileName
		}
	}
	if cfg.SourceURL != "" {
		// A host too: "http://" and "https:faq" were taken, and cited as
		// the answer's source, a link that leads nowhere.
		if u, err := url.Parse(cfg.SourceURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, apperr.InvalidField("source_url", "must be an http or https URL with a host")
		}
	}
	// A name taken from the question or the URL keeps to the 300
	// characters a name given may have (whole runes).
	if r := []rune(name); len(r) > maxNameRunes {
		name = string(r[:maxNameRunes-1]) + "…"
	}
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Datasource
	err = s.K.Store.TenantTx(ctx, p.OrgID, func(tx pgx.Tx, q *dbq.Queries) error {
		d, err := keyShareDatastore(ctx, q, p.OrgID, req.GetDatastoreId())
		if err != nil {
			return err
		}
		// The quota is read under the organization's quota lock, held
		// until this commits: creations at once take turns, and each sees
		// the bytes the others keep (all read none kept, and all kept
		// theirs, past the bound by as many uploads as were sent at once).
		if err := q.LockKnowledgeQuota(ctx, p.OrgID); err != nil {
			return err
		}
		// An organization whose datastores hold all the chunks its plan
		// allows adds nothing (its ingestion would fail: withinQuota).
		quota, err := q.KnowledgeQuota(ctx, dbq.KnowledgeQuotaParams{OrgID: p.OrgID})
		if err != nil {
			return err
		}
		allowed, held := quota.KnowledgeChunks, quota.Held
		// SECURITY: nor does one whose kept uploads would pass the bytes
		// its plan allows. A datasource keeps its content for resyncs, and
		// a file that gives few chunks or none (20 MiB of whitespace, of
		// images) counted for nothing: any plan could fill the disk.
		if bound := allowed * StoredBytesPerChunk; quota.Stored+int64(len(content)) > bound {
			return apperr.New(apperr.FailedPrecondition,
				"the organization's datasources keep %d bytes of uploads and texts; %d more would pass the %d its plan allows (%d bytes for each of the %d chunks it may hold): delete datasources, or move to a higher plan",
				quota.Stored, len(content), bound, StoredBytesPerChunk, allowed)
		}
		if held == allowed {
			return apperr.New(apperr.FailedPrecondition,
				"the organization's datastores hold %d chunks, all its plan allows (%d): delete datasources, or move to a higher plan", held, allowed)
		}
		// Above it: the plan was lowered (or moved down) under what it held.
		if held > allowed {
			return apperr.New(apperr.FailedPrecondition,
				"the organization's datastores hold %d chunks, %d more than the %d its plan allows: delete datasources, or move to a higher plan", held, held-allowed, allowed)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		row, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{
			OrgID: p.OrgID, ID: id, DatastoreID: d.ID, Type: req.GetType(), Name: name, Config: rawCfg,
			Content: content, ContentType: contentType, SizeBytes: int64(len(content)),
		})
		if err != nil {
			return err
		}
		if err := s.Jobs.EnqueueIngest(ctx, tx, ingestJob(p.OrgID, dbq.GetDatasourceRow(row))); err != nil {
			return fmt.Errorf("enqueueing ingestion: %w", err)
		}
		out = datasourceProto(dbq.GetDatasourceRow(row))
		return nil
	})
	return &parleyv1.CreateDatasourceResponse{Datasource: out}, err
}

func datasourceProto(r dbq.GetDatasourceRow) *parleyv1.Datasource {
	c := configOf(r.Config)
	out := &parleyv1.Datasource{
		Id: r.ID.String(), DatastoreId: r.DatastoreID.String(), Type: r.Type, Name: r.Name, Status: r.Status,
		Error: r.Error, Url: c.URL, MaxPages: int32(c.MaxPages), Question: c.Question, Answer: c.Answer,
		SourceUrl: c.SourceURL, ContentType: r.ContentType, SizeBytes: r.SizeBytes, ChunkCount: int64(r.ChunkCount),
		CreateTime: timestamppb.New(r.CreatedAt), UpdateTime: timestamppb.New(r.UpdatedAt),
	}
	if r.SyncedAt != nil {
		out.SyncTime = timestamppb.New(*r.SyncedAt)
	}
	return out
}

func datasource(ctx context.Context, q *dbq.Queries, org uuid.UUID, raw string) (dbq.GetDatasourceRow, error) {
	id, err := parseID(raw, "datasource")
	if err != nil {
		return dbq.GetDatasourceRow{}, err
	}
	r, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: org, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return r, db.Missing(ctx, q, "datasource", "datasource", id)
	}
	return r, err
}

// GetDatasource implements DatastoreService.
func (s *Service) GetDatasource(ctx context.Context, req *parleyv1.GetDatasourceRequest) (*parleyv1.GetDatasourceResponse, error) {
	var out *parleyv1.Datasource
	err := s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		r, err := datasource(ctx, q, p.OrgID, req.GetId())
		out = datasourceProto(r)
		return err
	})
	return &parleyv1.GetDatasourceResponse{Datasource: out}, err
}

// ListDatasources implements DatastoreService: a page of a datastore's
// datasources, newest first.
func (s *Service) ListDatasources(ctx context.Context, req *parleyv1.ListDatasourcesRequest) (*parleyv1.ListDatasourcesResponse, error) {
	limit := page.Size(req.GetLimit(), MaxListLimit, MaxListLimit)
	beforeTime, beforeID, err := page.After(req.GetCursor())
	if err != nil {
		return nil, err
	}
	resp := &parleyv1.ListDatasourcesResponse{Datasources: []*parleyv1.Datasource{}}
	err = s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		d, err := datastore(ctx, q, p.OrgID, req.GetDatastoreId())
		if err != nil {
			return err
		}
		rows, err := q.PageDatasources(ctx, dbq.PageDatasourcesParams{
			OrgID: p.OrgID, DatastoreID: d.ID, BeforeTime: beforeTime, BeforeID: beforeID, MaxRows: limit + 1,
		})
		if err != nil {
			return err
		}
		rows, resp.NextCursor = page.Cut(rows, limit, func(r dbq.PageDatasourcesRow) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		for _, r := range rows {
			resp.Datasources = append(resp.Datasources, datasourceProto(dbq.GetDatasourceRow(r)))
		}
		return nil
	})
	return resp, err
}

// DeleteDatasource implements DatastoreService.
func (s *Service) DeleteDatasource(ctx context.Context, req *parleyv1.DeleteDatasourceRequest) (*parleyv1.DeleteDatasourceResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
	defer cancel()
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	err = s.K.Store.TenantTx(ctx, p.OrgID, func(tx pgx.Tx, q *dbq.Queries) error {
		r, err := datasource(ctx, q, p.OrgID, req.GetId())
		if err != nil {
			return err
		}
		n, err := q.DeleteDatasource(ctx, dbq.DeleteDatasourceParams{OrgID: p.OrgID, ID: r.ID})
		if err == nil && n == 0 {
			// Deleted by another request since it was read: missing, as
			// DeleteDatastore says of a datastore.
			return db.Missing(ctx, q, "datasource", "datasource", r.ID)
		}
		if err != nil {
			return err
		}
		return s.forget(ctx, tx, p.OrgID, []uuid.UUID{r.ID})
	})
	return &parleyv1.DeleteDatasourceResponse{}, err
}

// ResyncDatasource implements DatastoreService.
func (s *Service) ResyncDatasource(ctx context.Context, req *parleyv1.ResyncDatasourceRequest) (*parleyv1.ResyncDatasourceResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Datasource
	err = s.K.Store.TenantTx(ctx, p.OrgID, func(tx pgx.Tx, q *dbq.Queries) error {
		r, err := datasource(ctx, q, p.OrgID, req.GetId())
		if err != nil {
			return err
		}
		// Taken as an ingestion takes it (its datastore first): a deletion
		// of either under way is waited for, then the datasource is
		// missing. The status's update found no row, and a resync of a
		// datasource deleted since it was read was 202, its job queued.
		if _, err := q.LockDatasource(ctx, dbq.LockDatasourceParams{OrgID: p.OrgID, ID: r.ID}); errors.Is(err, pgx.ErrNoRows) {
			return db.Missing(ctx, q, "datasource", "datasource", r.ID)
		} else if err != nil {
			return err
		}
		if r, err = datasource(ctx, q, p.OrgID, req.GetId()); err != nil {
			return err // as it is now that it is held
		}
		if err := q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: p.OrgID, ID: r.ID, Status: "pending"}); err != nil {
			return err
		}
		if err := s.Jobs.EnqueueIngest(ctx, tx, ingestJob(p.OrgID, r)); err != nil {
			return err
		}
		r.Status, r.Error = "pending", ""
		out = datasourceProto(r)
		return nil
	})
	return &parleyv1.ResyncDatasourceResponse{Datasource: out}, err
}

// Query implements DatastoreService.
func (s *Service) Query(ctx context.Context, req *parleyv1.QueryRequest) (*parleyv1.QueryResponse, error) {
	resp := &parleyv1.QueryResponse{Results: []*parleyv1.QueryResult{}}
	k := int(req.GetTopK())
	if k == 0 {
		k = DefaultTopK
	}
	sources, err := ParseIDs(req.GetDatasourceIds(), "datasource_ids")
	if err != nil {
		return nil, err
	}
	// The datastore and the filter are read in one transaction and searched
	// in another, the query embedded between them: a remote embedder's
	// round trip holds no pooled connection. A datastore deleted between
	// the two finds nothing.
	var (
		org uuid.UUID
		d   dbq.Datastore
	)
	err = s.tenant(ctx, func(p *auth.Principal, q *dbq.Queries) error {
		var err error
		org = p.OrgID
		if d, err = datastore(ctx, q, p.OrgID, req.GetDatastoreId()); err != nil {
			return err
		}
		return CheckFilter(ctx, q, p.OrgID, []uuid.UUID{d.ID}, sources, "datasource_ids", "this datastore")
	})
	if err != nil {
		return nil, err
	}
	stores := []dbq.Datastore{d}
	query, err := s.K.EmbedQuery(ctx, stores, req.GetQuery())
	if err != nil {
		return nil, err
	}
	err = s.K.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		rs, err := s.K.Search(ctx, q, org, stores, sources, query, k)
		for _, r := range rs {
			resp.Results = append(resp.Results, &parleyv1.QueryResult{
				Chunk: r.Text, Score: r.Score, Source: r.Source(), DatasourceId: r.DatasourceID.String(),
				DatasourceName: r.DatasourceName, Title: r.Title, Heading: r.Heading, Url: r.URL, Page: int32(r.Page),
			})
		}
		return err
	})
	return resp, err
}

// CheckFilter refuses a search filter naming a datasource that is not in
// the datastores searched (stores, described as where): another
// datastore's, another organization's (tenant isolation: it reads as
// unknown), a deleted one or a typo. Unchecked, such a filter matched
// nothing and the search quietly found nothing. The error names the
// filter's first such entry, field[i].
func CheckFilter(ctx context.Context, q *dbq.Queries, org uuid.UUID, stores, ids []uuid.UUID, field, where string) error {
	if len(ids) == 0 {
		return nil
	}
	found, err := q.DatasourcesAmong(ctx, dbq.DatasourcesAmongParams{OrgID: org, DatastoreIds: stores, Ids: ids})
	if err != nil {
		return err
	}
	for i, id := range ids {
		if !slices.Contains(found, id) {
			return apperr.InvalidField(fmt.Sprintf("%s[%d]", field, i), "datasource %q is not in %s", id, where)
		}
	}
	return nil
}

// ParseIDs parses datasource ids of a filter; a malformed one is Invalid.
func ParseIDs(raw []string, field string) ([]uuid.UUID, error) {
	out := make([]uuid.UUID, 0, len(raw))
	for i, r := range raw {
		id, err := uuid.Parse(r)
		if err != nil {
			return nil, apperr.InvalidField(fmt.Sprintf("%s[%d]", field, i), "%q is not a datasource id", r)
		}
		out = append(out, id)
	}
	return out, nil
}
