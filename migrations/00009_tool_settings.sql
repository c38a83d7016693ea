-- +goose Up

-- An agent's tool settings (issue 9): today the endpoints its http_request
-- tool may call, {"http_request": {"endpoints": [{name, description, method,
-- url, headers}]}}. Header values are stored here and never returned by the
-- API (they are write-only: API keys of the owner's own services).
ALTER TABLE agents
  ADD COLUMN tool_settings jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(tool_settings) = 'object');

-- +goose Down
ALTER TABLE agents DROP COLUMN tool_settings;
