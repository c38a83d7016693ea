package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The floor is the least a service that persists a turn can do: decode the
// request's JSON, one committed INSERT on the same Postgres, answer. Its
// table lives in the run's database only.
func floorPool(ctx context.Context, dbURL string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS load_floor (
		id bigserial PRIMARY KEY, conversation_id text NOT NULL, query text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func floorHandler(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := floorStore(w, r, pool)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":` + strconv.FormatInt(id, 10) + `}`))
	})
}

// floorStore decodes the request and stores it in one committed INSERT; on
// failure it has answered the error.
func floorStore(w http.ResponseWriter, r *http.Request, pool *pgxpool.Pool) (int64, bool) {
	var body struct {
		Query          string `json:"query"`
		ConversationID string `json:"conversationId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Query == "" || body.ConversationID == "" {
		http.Error(w, `{"error":"query and conversationId are required"}`, http.StatusBadRequest)
		return 0, false
	}
	var id int64
	if err := pool.QueryRow(r.Context(), "INSERT INTO load_floor (conversation_id, query) VALUES ($1, $2) RETURNING id",
		body.ConversationID, body.Query).Scan(&id); err != nil {
		http.Error(w, `{"error":"insert failed"}`, http.StatusInternalServerError)
		return 0, false
	}
	return id, true
}

// The floor proxy is the least a service that persists a turn and asks a
// model can do: the floor's committed INSERT, then one call to the model
// over HTTP (a kept connection), its answer relayed. At a low rate, what it
// adds to the model called directly is the yardstick for what Parley adds:
// one more hop and one durable commit, nothing else.
//
// With storeAnswer it is the promises floor: it also stores the answer
// (a second INSERT, its commit not waiting for the disk, as Parley's)
// before it replies, so it keeps both of Parley's promises (the question
// durable before the model is called, the answer stored before the reply)
// and nothing else: the least any service that keeps them adds.
func floorProxyHandler(pool *pgxpool.Pool, client *http.Client, modelURL string, storeAnswer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := floorStore(w, r, pool); !ok {
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), "POST", modelURL+"/v1/chat/completions", strings.NewReader(modelBody+"}"))
		if err != nil {
			http.Error(w, `{"error":"model request"}`, http.StatusInternalServerError)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, `{"error":"model unreachable"}`, http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var completion struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&completion) != nil || len(completion.Choices) == 0 {
			http.Error(w, `{"error":"model failed"}`, http.StatusBadGateway)
			return
		}
		answer := completion.Choices[0].Message.Content
		if storeAnswer {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue("SELECT set_config('synchronous_commit', 'off', true)")
			b.Queue("INSERT INTO load_floor (conversation_id, query) VALUES ($1, $2)", "answer", answer)
			b.Queue("COMMIT")
			if err := pool.SendBatch(r.Context(), b).Close(); err != nil {
				http.Error(w, `{"error":"insert failed"}`, http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"answer": answer})
	})
}
