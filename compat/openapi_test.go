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
