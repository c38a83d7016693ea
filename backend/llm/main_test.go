package llm_test

import (
	"testing"

	"github.com/parleyhq/parley/backend/leaktest"
)

// TestMain fails the tests when they leave goroutines running (leaktest).
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
