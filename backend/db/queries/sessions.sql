-- Console sessions (scs's pgxstore statements, run with a context: see
-- console.sessionStore). token is the SHA-256 of the cookie's, in hex.

-- name: FindSession :one
SELECT data FROM sessions WHERE token = sqlc.arg(token) AND current_timestamp < expiry;

-- name: CommitSession :exec
INSERT INTO sessions (token, data, expiry) VALUES (sqlc.arg(token), sqlc.arg(data), sqlc.arg(expiry))
ON CONFLICT (token) DO UPDATE SET data = EXCLUDED.data, expiry = EXCLUDED.expiry;

-- name: DeleteSession :exec
DELETE FROM sessions WHERE token = sqlc.arg(token);

-- name: DeleteExpiredSessions :exec
DELETE FROM sessions WHERE expiry < current_timestamp;
