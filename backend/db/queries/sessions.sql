-- Console sessions (scs's pgxstore statements, run with a context: see
-- console.sessionStore). token is the SHA-256 of the cookie's, in hex.
--
-- A session ended (signed out, renewed at sign-in, found stale) is not
-- deleted but emptied (data = ''), and kept so until expiry: a request that
-- read it before and commits it after (scs commits every session a request
-- read, to move its idle timeout on) must not bring it back, and
-- CommitSession revives no emptied row. No session of scs's is empty.

-- name: FindSession :one
SELECT data FROM sessions WHERE token = sqlc.arg(token) AND current_timestamp < expiry AND data <> ''::bytea;

-- name: CommitSession :exec
INSERT INTO sessions (token, data, expiry) VALUES (sqlc.arg(token), sqlc.arg(data), sqlc.arg(expiry))
ON CONFLICT (token) DO UPDATE SET data = EXCLUDED.data, expiry = EXCLUDED.expiry
WHERE sessions.data <> ''::bytea;

-- name: EndSession :exec
-- Empties the session, kept until expiry, or until sqlc.arg(expiry) when
-- later: past any request that read it before.
INSERT INTO sessions (token, data, expiry) VALUES (sqlc.arg(token), ''::bytea, sqlc.arg(expiry))
ON CONFLICT (token) DO UPDATE SET data = ''::bytea, expiry = greatest(sessions.expiry, EXCLUDED.expiry);

-- name: DeleteExpiredSessions :exec
DELETE FROM sessions WHERE expiry < current_timestamp;
