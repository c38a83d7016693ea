package member

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"runtime"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
	"golang.org/x/sync/semaphore"

	"github.com/parleyhq/parley/backend/apperr"
)

// argon2id parameters: OWASP's second recommendation (19 MiB, 2 passes, one
// lane), some 30 ms on this project's two-core machine.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// MinPasswordLength is the shortest password accepted.
const MinPasswordLength = 12

// dummyHash is checked against when no member has the email or the member
// has no password, so that every failure costs the time of a check.
var dummyHash, _ = HashPassword(context.Background(), "parley-no-such-member")

// hashing bounds the argon2id computations running at once in this
// process to one per CPU (at least two): the others wait their turn.
//
// SECURITY: each one holds its 19 MiB (argonMemory) while it runs, and
// anyone may post to the sign-in page. The limits there count per address
// and per minute, not at once: one address sending its 60 attempts of the
// minute together held 1.1 GiB, and a client with a few IPv6 /64s (a home
// line is given 256) as many times that, until the process ran out of
// memory. Bounded, they hold at most hashSlots × 19 MiB, and a flood costs
// the waiting sign-ins time, never the process.
var hashing = semaphore.NewWeighted(hashSlots)

// hashSlots is how many argon2id computations run at once (hashing).
var hashSlots = int64(max(2, runtime.GOMAXPROCS(0)))

// idKey is argon2.IDKey run in one of the hashing slots, waiting for one
// until ctx ends (then its error).
func idKey(ctx context.Context, password, salt []byte, time, memory uint32, threads uint8, keyLen uint32) ([]byte, error) {
	if err := hashing.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer hashing.Release(1)
	return argon2.IDKey(password, salt, time, memory, threads, keyLen), nil
}

// HashPassword returns the argon2id hash of password as a PHC string. It
// waits for a hashing slot (see hashing) until ctx ends.
func HashPassword(ctx context.Context, password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key, err := idKey(ctx, []byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	if err != nil {
		return "", err
	}
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// CheckPassword reports whether password matches the PHC string hash, read
// with the parameters it records. It waits for a hashing slot (see hashing)
// until ctx ends, and then returns ctx's error.
func CheckPassword(ctx context.Context, hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, nil
	}
	var version int
	var mem, iters uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, nil
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &mem, &iters, &threads); err != nil || mem > 1<<20 || iters > 16 || threads == 0 {
		return false, nil
	}
	enc := base64.RawStdEncoding
	salt, err := enc.DecodeString(parts[4])
	if err != nil {
		return false, nil
	}
	want, err := enc.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, nil
	}
	got, err := idKey(ctx, []byte(password), salt, iters, mem, threads, uint32(len(want)))
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// common are passwords of twelve characters or more that lists of breached
// passwords rank among the most used.
var common = map[string]bool{
	"123456789012": true, "1234567890123": true, "12345678901234": true, "qwertyuiopas": true,
	"password1234": true, "password12345": true, "passwordpassword": true, "qwerty123456": true,
	"iloveyou1234": true, "111111111111": true, "000000000000": true, "aaaaaaaaaaaa": true,
	"abcdefghijkl": true, "abc123abc123": true, "letmein12345": true, "welcome12345": true,
	"administrator": true, "qwertyuiop123": true, "1q2w3e4r5t6y": true, "changeme1234": true,
	"password123!": true, "Password1234": true, "Password123!": true, "trustno1trustno1": true,
}

// CheckNewPassword refuses passwords too short or too common.
func CheckNewPassword(password string) error {
	// A browser's form sends UTF-8 text, without NUL: a password of other
	// bytes (only a crafted post can set one) could never be typed to sign in.
	if !utf8.ValidString(password) || strings.ContainsRune(password, 0) {
		return apperr.InvalidField("password", "must be UTF-8 text, without NUL characters")
	}
	if len([]rune(password)) < MinPasswordLength {
		return apperr.InvalidField("password", "must be at least %d characters", MinPasswordLength)
	}
	if len(password) > 1024 {
		return apperr.InvalidField("password", "must be at most 1024 bytes")
	}
	if common[password] || common[strings.ToLower(password)] {
		return apperr.InvalidField("password", "is one of the most common passwords; choose another")
	}
	return nil
}
