// Package migrations holds Parley's schema as numbered goose migrations,
// embedded in the binary so that `parley migrate` and `parley serve` need
// nothing beside it.
package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS
