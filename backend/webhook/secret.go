package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// secretBytes is the size of a signing key (the specification asks for 24
// to 64).
const secretBytes = 32

// SecretPrefix starts every secret, as the specification writes them.
const SecretPrefix = "whsec_"

// newSecret returns a new signing key and its printed form.
func newSecret() ([]byte, string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, "", err
	}
	return key, SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// Sealer seals signing keys for storage (AES-256-GCM under the server's
// secrets key, --secrets-key). A signing key must be read back to sign, so
// it cannot be hashed like an API key; sealed, a copy of the database alone
// does not give it away. Each sealed key is bound to its organization and
// webhook (the GCM additional data), so a sealed value copied onto another
// row does not open.
type Sealer struct{ aead cipher.AEAD }

// sealVersion leads each sealed value, so that a later key or scheme can
// be told apart.
const sealVersion = 1

// NewSealer returns a Sealer over a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
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

func additional(org, webhook uuid.UUID) []byte {
	return append(append([]byte{}, org[:]...), webhook[:]...)
}

// Seal seals key for webhook of org.
func (s *Sealer) Seal(org, webhook uuid.UUID, key []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), 1+s.aead.NonceSize()+len(key)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{sealVersion}, nonce...)
	return s.aead.Seal(out, nonce, key, additional(org, webhook)), nil
}

// Open opens what Seal sealed for the same webhook.
func (s *Sealer) Open(org, webhook uuid.UUID, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, errors.New("webhook secret: not a sealed value of this version")
	}
	key, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], additional(org, webhook))
	if err != nil {
		return nil, errors.New("webhook secret: cannot be opened with the configured secrets key")
	}
	return key, nil
}
