package compat_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/compat"
)

// The served OpenAPI document lists exactly the registered routes.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("GET", "/api/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.JSON(t, &doc)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	var registered []string
	for _, rt := range compat.New(nil, nil, nil).Routes() {
		registered = append(registered, rt.Method+" "+rt.Path)
	}
	slices.Sort(documented)
	slices.Sort(registered)
	require.Equal(t, registered, documented)
}

// What the Agent schema's field descriptions say of lists holds for a served
// list: a field said to be "absent in lists" (or in "responses only" of
// detail, create and update) is absent, one said to be "[] in lists" is
// empty. The datastores description said lists carry [] after lists began
// to carry each agent's datastores.
func TestOpenAPIAgentListFieldsAsServed(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("GET", "/api/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	r.JSON(t, &doc)
	props := doc.Components.Schemas["Agent"].Properties
	require.NotEmpty(t, props)

	r = e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "kb"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)
	create(t, e, e.A.Key, map[string]any{"name": "a", "instructions": "b", "datastores": []string{ds.ID}})

	r = e.Do("GET", "/api/agents", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list struct{ Agents []map[string]json.RawMessage }
	r.JSON(t, &list)
	require.Len(t, list.Agents, 1)
	served := list.Agents[0]
	for name, p := range props {
		switch {
		case strings.Contains(p.Description, "absent in lists"), strings.HasPrefix(p.Description, "Detail, create and update responses only"):
			require.NotContains(t, served, name, "the schema says %s is absent in lists: %q", name, p.Description)
		case strings.Contains(p.Description, "[] in lists"):
			require.JSONEq(t, `[]`, string(served[name]), "the schema says %s is [] in lists: %q", name, p.Description)
		}
	}
	require.JSONEq(t, `["`+ds.ID+`"]`, string(served["datastores"]))
}
