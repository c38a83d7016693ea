package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

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
		var body struct {
			Query          string `json:"query"`
			ConversationID string `json:"conversationId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Query == "" || body.ConversationID == "" {
			http.Error(w, `{"error":"query and conversationId are required"}`, http.StatusBadRequest)
			return
		}
		var id int64
		if err := pool.QueryRow(r.Context(), "INSERT INTO load_floor (conversation_id, query) VALUES ($1, $2) RETURNING id",
			body.ConversationID, body.Query).Scan(&id); err != nil {
			http.Error(w, `{"error":"insert failed"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":` + strconv.FormatInt(id, 10) + `}`))
	})
}
