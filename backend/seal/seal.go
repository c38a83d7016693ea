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
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sealer seals and opens values under one secrets key.
type Sealer struct{ aead cipher.AEAD }

// version leads each sealed value, so that a later key or scheme can be
// told apart.
const version = 1

// New returns a Sealer over a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the secrets key must be 32 bytes, not %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// ParseKey reads the secrets key as configured: base64 of 32 bytes.
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) != 32 {
		return nil, errors.New("the secrets key must be the base64 of 32 random bytes (openssl rand -base64 32)")
	}
	return key, nil
}

// Seal seals plain, bound to bound: Open opens it only with the same bound.
// A bound names the value's kind as well as its owner (Bind), so that no
// value of one kind opens as another.
func (s *Sealer) Seal(plain, bound []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{version}, nonce...)
	return s.aead.Seal(out, nonce, plain, bound), nil
}

// Errors of Open; neither holds anything of the value.
var (
	ErrVersion = errors.New("not a sealed value of this version")
	ErrOpen    = errors.New("cannot be opened with the configured secrets key (another key, or a value sealed for something else)")
)

// Open opens what Seal sealed with the same bound.
func (s *Sealer) Open(sealed, bound []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != version {
		return nil, ErrVersion
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], bound)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
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
