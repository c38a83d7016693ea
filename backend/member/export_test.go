package member

import "testing"

// HoldHashing takes every argon2id slot (hashing) until the test ends, as
// a flood of sign-ins would.
func HoldHashing(t *testing.T) {
	t.Helper()
	if !hashing.TryAcquire(hashSlots) {
		t.Fatal("the hashing slots are in use")
	}
	t.Cleanup(func() { hashing.Release(hashSlots) })
}
