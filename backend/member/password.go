package member

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"

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
var dummyHash, _ = HashPassword("parley-no-such-member")

// HashPassword returns the argon2id hash of password as a PHC string.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// CheckPassword reports whether password matches the PHC string hash, read
// with the parameters it records.
func CheckPassword(hash, password string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var version int
	var mem, iters uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &mem, &iters, &threads); err != nil || mem > 1<<20 || iters > 16 || threads == 0 {
		return false
	}
	enc := base64.RawStdEncoding
	salt, err := enc.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := enc.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, iters, mem, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
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
