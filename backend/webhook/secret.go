package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/seal"
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

// sealSecret seals a signing key for storage (seal.Sealer: a signing key
// must be read back to sign, so it cannot be hashed like an API key),
// bound to its organization and webhook, so that a sealed key copied onto
// another row does not open.
func sealSecret(s *seal.Sealer, org, webhook uuid.UUID, key []byte) ([]byte, error) {
	return s.Seal(key, secretBound(org, webhook))
}

// openSecret opens what sealSecret sealed for the same webhook.
func openSecret(s *seal.Sealer, org, webhook uuid.UUID, sealed []byte) ([]byte, error) {
	key, err := s.Open(sealed, secretBound(org, webhook))
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return key, nil
}

// secretBound is a signing key's bound: its organization's and webhook's
// ids, 32 bytes, as the keys stored before seal.Bind existed were sealed
// (every other kind of sealed value has a longer, labelled bound).
func secretBound(org, webhook uuid.UUID) []byte {
	return append(append([]byte{}, org[:]...), webhook[:]...)
}

// Reseal seals org's webhook signing secrets under s's current key
// (`parley admin reseal`), at most batch endpoints a transaction, each
// locked from its read to its write, so that a secret rotated meanwhile
// is not written over with the one read before. A secret no key of s
// opens is left as it is, and its endpoint's id returned (never the
// secret).
func Reseal(ctx context.Context, store *db.Store, s *seal.Sealer, org uuid.UUID, batch int32) (seal.Tally, []uuid.UUID, error) {
	var t seal.Tally
	var unopenable []uuid.UUID
	for after, more := uuid.Nil, true; more; {
		err := store.Tenant(ctx, org, func(q *dbq.Queries) error {
			rows, err := q.LockWebhookSecrets(ctx, dbq.LockWebhookSecretsParams{OrgID: org, After: after, MaxRows: batch})
			if err != nil {
				return err
			}
			more = len(rows) == int(batch)
			for _, r := range rows {
				after = r.ID
				sealed, resealed, err := s.Reseal(r.Secret, secretBound(org, r.ID))
				opened, err := t.Add(resealed, err)
				if err != nil {
					return err
				}
				if !opened {
					unopenable = append(unopenable, r.ID)
				}
				if !resealed {
					continue
				}
				if err := q.ResealWebhookSecret(ctx, dbq.ResealWebhookSecretParams{OrgID: org, ID: r.ID, Secret: sealed}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return seal.Tally{}, nil, err
		}
	}
	return t, unopenable, nil
}
