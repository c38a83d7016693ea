// Package seal seals the secrets Parley must read back for storage: webhook
// signing keys (to sign deliveries) and agents' http_request header values
// (to send them). They cannot be hashed like API keys; sealed with
// AES-256-GCM under the server's secrets key (--secrets-key), a copy of the
// database alone does not give them away.
//
// Each sealed value is bound to what it belongs to (the GCM additional
// data, Seal's bound): a sealed value copied onto another row, or into
// another kind of field, does not open. It must never keep, log or return
// an opened value other than to its caller.
//
// The key can be changed (--secrets-key-previous): a Sealer seals under
// its current key only and opens under it or any previous key, and
// Reseal moves a value to the current key (`parley admin reseal`). The
// sealed form does not say which key sealed it: GCM's authentication
// does, as no other key opens it.
package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Sealer seals values under its current secrets key and opens them under
// it or a previous one.
type Sealer struct {
	// keys are the current key's cipher, then each previous key's, in
	// the order they are tried.
	keys []cipher.AEAD
}

// version leads each sealed value, so that a later key or scheme can be
// told apart.
const version = 1

// New returns a Sealer that seals under key and opens under key, then
// each of previous (the keys it replaced, to open what they sealed until
// it is resealed); each is 32 bytes. A previous key equal to key is
// left out: it opens nothing key does not.
func New(key []byte, previous ...[]byte) (*Sealer, error) {
	s := &Sealer{}
	for i, k := range append([][]byte{key}, previous...) {
		if i > 0 && bytes.Equal(k, key) {
			continue
		}
		if len(k) != 32 {
			return nil, fmt.Errorf("the secrets key must be 32 bytes, not %d", len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, aead)
	}
	return s, nil
}

// Tally counts what resealing found: values sealed anew under the current
// key, values already under it, and values no configured key opens, which
// are left as they are.
type Tally struct{ Resealed, Current, Unopenable int }

// Add counts a value by what Reseal returned for it: resealed, already
// current, or opened by no key (ErrOpen, ErrVersion: false then). Any
// other error is returned, and nothing counted.
func (t *Tally) Add(resealed bool, err error) (opened bool, _ error) {
	switch {
	case errors.Is(err, ErrOpen) || errors.Is(err, ErrVersion):
		t.Unopenable++
		return false, nil
	case err != nil:
		return false, err
	case resealed:
		t.Resealed++
	default:
		t.Current++
	}
	return true, nil
}

// Plus is t and u counted together.
func (t Tally) Plus(u Tally) Tally {
	return Tally{t.Resealed + u.Resealed, t.Current + u.Current, t.Unopenable + u.Unopenable}
}

// ParseKey reads the secrets key as configured: base64 of 32 bytes.
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) != 32 {
		return nil, errors.New("the secrets key must be the base64 of 32 random bytes (openssl rand -base64 32)")
	}
	return key, nil
}

// ParseKeys reads a comma-separated list of keys as configured (the
// previous keys), each as ParseKey reads one; blanks around a key, and an
// empty list, are allowed. Its error names the key at fault by its place
// in the list (1 for the first), never its value.
func ParseKeys(s string) ([][]byte, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var keys [][]byte
	for i, k := range strings.Split(s, ",") {
		key, err := ParseKey(strings.TrimSpace(k))
		if err != nil {
			return nil, fmt.Errorf("key %d of the list: %w", i+1, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// Seal seals plain, bound to bound: Open opens it only with the same bound.
// A bound names the value's kind as well as its owner (Bind), so that no
// value of one kind opens as another.
func (s *Sealer) Seal(plain, bound []byte) ([]byte, error) {
	aead := s.keys[0]
	nonce := make([]byte, aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{version}, nonce...)
	return aead.Seal(out, nonce, plain, bound), nil
}

// Errors of Open; neither holds anything of the value.
var (
	ErrVersion = errors.New("not a sealed value of this version")
	ErrOpen    = errors.New("cannot be opened with the configured secrets keys (another key, or a value sealed for something else)")
)

// Open opens what Seal sealed with the same bound, under the current key
// or a previous one.
func (s *Sealer) Open(sealed, bound []byte) ([]byte, error) {
	plain, _, err := s.open(sealed, bound)
	return plain, err
}

// Reseal returns sealed sealed under the current key, and whether it was
// sealed anew: a value that opens under the current key is returned as it
// is, one that opens under a previous key is sealed again under the
// current one (with the same bound), and one that opens under none is an
// error of Open's.
func (s *Sealer) Reseal(sealed, bound []byte) ([]byte, bool, error) {
	plain, key, err := s.open(sealed, bound)
	if err != nil || key == 0 {
		return sealed, false, err
	}
	out, err := s.Seal(plain, bound)
	if err != nil {
		return sealed, false, err
	}
	return out, true, nil
}

// open opens sealed and says under which key: 0 the current one, then
// each previous one's place. GCM authenticates what it opens, so that a
// key which did not seal the value does not open it.
func (s *Sealer) open(sealed, bound []byte) ([]byte, int, error) {
	n := s.keys[0].NonceSize()
	if len(sealed) < 1+n || sealed[0] != version {
		return nil, 0, ErrVersion
	}
	for i, aead := range s.keys {
		if plain, err := aead.Open(nil, sealed[1:1+n], sealed[1+n:], bound); err == nil {
			return plain, i, nil
		}
	}
	return nil, 0, ErrOpen
}

// Bind is a bound for Seal and Open: kind, then each part, each preceded
// by its length, so that no two lists of parts give the same bytes.
func Bind(kind string, parts ...[]byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(kind)))
	out = append(out, kind...)
	for _, p := range parts {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}
