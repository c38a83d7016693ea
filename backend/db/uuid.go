package db

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterUUID teaches a connection's type map to send and read
// github.com/google/uuid's UUID as Postgres's binary uuid, its 16 bytes as
// they are. Without it pgx takes the UUID for a driver.Valuer and an
// sql.Scanner: every parameter was formatted as text, its binary encoding
// tried and refused (an error built with fmt each time) and the text
// parsed back; every uuid read was formatted as text and parsed by
// uuid.Scan: 7–10 % of Parley's CPU under `make load` (issue 13). NULL
// read into a uuid.UUID stays the zero UUID, as uuid.Scan made it (read
// into a *uuid.UUID: nil). (jackc/pgx-google-uuid does the like; the
// module proxy here refuses it.)
func RegisterUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncode}, m.TryWrapEncodePlanFuncs...)
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
}

// pgUUID is a uuid.UUID as pgtype's uuid codec encodes it.
type pgUUID uuid.UUID

func (u pgUUID) UUIDValue() (pgtype.UUID, error) {
	return pgtype.UUID{Bytes: u, Valid: true}, nil
}

func tryWrapUUIDEncode(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncode{}, pgUUID(u), true
	}
	return nil, nil, false
}

type uuidEncode struct{ next pgtype.EncodePlan }

func (p *uuidEncode) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncode) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgUUID(value.(uuid.UUID)), buf)
}

// uuidCodec is pgtype's, reading binary into a *uuid.UUID directly (pgx
// asks the codec before it looks for an sql.Scanner).
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return scanUUID{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type scanUUID struct{}

func (scanUUID) Scan(src []byte, dst any) error {
	u := dst.(*uuid.UUID)
	switch len(src) {
	case 16:
		copy(u[:], src)
	case 0:
		if src != nil {
			return fmt.Errorf("invalid length for uuid: 0")
		}
		*u = uuid.UUID{}
	default:
		return fmt.Errorf("invalid length for uuid: %d", len(src))
	}
	return nil
}
