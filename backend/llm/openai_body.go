package llm

import "encoding/json"

// openAIBody encodes a streaming chat.completions request: the JSON the
// SDK's ChatCompletionNewParams would send (TestOpenAIBodyIsTheSDKs holds
// the two equal for every kind of message), written by encoding/json from
// plain structs. The SDK's own encoder walks its param unions by
// reflection and then rewrites the result to add "stream"; it was 8 to 9 %
// of Parley's CPU a turn (issue 13, docs/benchmarks.md).
func openAIBody(req Request) ([]byte, error) { return openAIBodyFor(req, false) }

// openAIBodyFor is openAIBody, with the bound also in max_tokens when
// maxTokens is set: OpenAI-compatible servers that predate
// max_completion_tokens (Ollama's /v1 reads only max_tokens) ignore it, and
// their replies ran unbounded, to the model's end or the context's.
func openAIBodyFor(req Request, maxTokens bool) ([]byte, error) {
	body := oaRequest{
		Model:               req.Model,
		MaxCompletionTokens: req.OutputBound(),
		Temperature:         &req.Temperature,
		Stream:              true,
		StreamOptions:       oaStreamOptions{IncludeUsage: true},
		Messages:            make([]oaMessage, 0, len(req.Messages)+1),
	}
	if maxTokens {
		body.MaxTokens = body.MaxCompletionTokens
	}
	if req.ModelTemperature {
		body.Temperature = nil
	}
	if sys := systemWithKnowledge(req); sys != "" {
		body.Messages = append(body.Messages, oaMessage{Role: "system", Content: sys})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleAssistant:
			msg := oaMessage{Role: "assistant", Content: m.Content}
			if len(m.ToolCalls) > 0 && m.Content == "" {
				// With tool calls the content may be absent; an empty
				// string is left out rather than sent.
				msg.Content = nil
			}
			for _, c := range m.ToolCalls {
				// The arguments as a JSON object, as the other providers
				// get them: a call the model left unfinished (cut at its
				// bound) or malformed was sent back as it came, and
				// compatible servers that parse it refuse the request
				// (Ollama: 400 "invalid tool call arguments"), so the
				// round after it failed.
				msg.ToolCalls = append(msg.ToolCalls, oaToolCall{ID: c.ID, Type: "function", Function: oaFunctionCall{Name: c.Name, Arguments: jsonObject(c.Arguments)}})
			}
			body.Messages = append(body.Messages, msg)
		case RoleTool:
			for _, r := range m.ToolResults {
				body.Messages = append(body.Messages, oaMessage{Role: "tool", Content: r.Content, ToolCallID: r.CallID})
			}
		default:
			if len(m.Images) == 0 {
				body.Messages = append(body.Messages, oaMessage{Role: "user", Content: m.Content})
				continue
			}
			parts := make([]any, 0, len(m.Images)+1)
			parts = append(parts, oaTextPart{Type: "text", Text: m.Content})
			for _, img := range m.Images {
				parts = append(parts, oaImagePart{Type: "image_url", ImageURL: oaImageURL{URL: img.DataURL()}})
			}
			body.Messages = append(body.Messages, oaMessage{Role: "user", Content: parts})
		}
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, oaTool{Type: "function", Function: oaFunction(t)})
	}
	return json.Marshal(body)
}

type oaRequest struct {
	Messages []oaMessage `json:"messages"`
	Model    string      `json:"model"`
	// MaxCompletionTokens, not the older max_tokens, which OpenAI's
	// reasoning models refuse; it bounds their reasoning tokens too.
	MaxCompletionTokens int `json:"max_completion_tokens"`
	// MaxTokens is the same bound for the servers that read only it
	// (OpenAIConfig.MaxTokens); OpenAI's reasoning models refuse it.
	MaxTokens     int             `json:"max_tokens,omitempty"`
	StreamOptions oaStreamOptions `json:"stream_options"`
	Temperature   *float64        `json:"temperature,omitempty"`
	Tools         []oaTool        `json:"tools,omitempty"`
	Stream        bool            `json:"stream"`
}

type oaStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// oaMessage is any role's message; Content is a string or a list of
// parts (oaTextPart, oaImagePart), nil when absent.
type oaMessage struct {
	Content    any          `json:"content,omitempty"`
	Role       string       `json:"role"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaTextPart struct {
	Text string `json:"text"`
	Type string `json:"type"`
}

type oaImagePart struct {
	ImageURL oaImageURL `json:"image_url"`
	Type     string     `json:"type"`
}

type oaImageURL struct {
	URL string `json:"url"`
}

type oaToolCall struct {
	ID       string         `json:"id"`
	Function oaFunctionCall `json:"function"`
	Type     string         `json:"type"`
}

type oaFunctionCall struct {
	Arguments string `json:"arguments"`
	Name      string `json:"name"`
}

type oaTool struct {
	Function oaFunction `json:"function"`
	Type     string     `json:"type"`
}

type oaFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters,omitzero"` // {} is sent, nil is not
}
