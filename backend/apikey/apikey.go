// Package apikey is the format of Parley's API keys: a recognisable prefix, a
// random secret of 160 bits and a CRC-32 checksum, so that a mistyped or
// made-up key is refused before any database lookup. Only the SHA-256 of a key
// and a short display prefix are ever stored.
//
// A key reads `prly_` + 32 base32 characters of secret + 7 of checksum, e.g.
// prly_m3tq0kx4…; 44 characters in all.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
)

// Prefix starts every key.
const Prefix = "prly_"

const (
	secretBytes = 20 // 160 bits
	secretChars = 32 // base32 of 20 bytes
	sumChars    = 7  // base32 of 4 bytes, unpadded
	// Len is the length of a key.
	Len = len(Prefix) + secretChars + sumChars
	// displayLen is how much of a key is kept to recognise it in a list.
	displayLen = len(Prefix) + 6
)

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ErrMalformed means the string cannot be a Parley key.
var ErrMalformed = errors.New("malformed API key")

// Hash is the SHA-256 of a key, the only form in which keys are stored.
type Hash [sha256.Size]byte

// Key is a parsed, well-formed key.
type Key struct {
	s string
}

// Generate makes a new random key.
func Generate() (Key, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Key{}, err
	}
	secret := enc.EncodeToString(b[:])
	return Key{s: Prefix + secret + checksum(secret)}, nil
}

// Parse checks a key's prefix, length, alphabet and checksum.
func Parse(s string) (Key, error) {
	if len(s) != Len || !strings.HasPrefix(s, Prefix) {
		return Key{}, ErrMalformed
	}
	body := s[len(Prefix):]
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return Key{}, ErrMalformed
		}
	}
	secret, sum := body[:secretChars], body[secretChars:]
	if checksum(secret) != sum {
		return Key{}, ErrMalformed
	}
	return Key{s: s}, nil
}

func checksum(secret string) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.ChecksumIEEE([]byte(secret)))
	return enc.EncodeToString(b[:])
}

// String returns the whole key. Show it once, never log it.
func (k Key) String() string { return k.s }

// Hash returns the key's SHA-256.
func (k Key) Hash() Hash { return sha256.Sum256([]byte(k.s)) }

// DisplayPrefix is the part of the key kept to recognise it.
func (k Key) DisplayPrefix() string { return k.s[:displayLen] }
