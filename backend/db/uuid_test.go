package db_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
)

// uuid.UUID travels as Postgres's binary uuid, not through its
// driver.Valuer (text, refused in binary, parsed back): values, pointers
// (nil as NULL), arrays, and NULL read into a pointer, through a real
// connection of a pool Open made; nor is it read through its sql.Scanner
// (text, parsed).
func TestUUIDBinary(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	db.RegisterUUID(m)
	plan := m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.UUID{})
	require.NotNil(t, plan)
	require.Contains(t, typeName(plan), "uuidEncode", "encoded by the registered plan, not the driver.Valuer")
	scan := m.PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &uuid.UUID{})
	require.Contains(t, typeName(scan), "scanUUID", "read by the registered plan, not the sql.Scanner")

	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	id := uuid.New()
	var back uuid.UUID
	var text string
	require.NoError(t, pool.QueryRow(ctx, "select $1::uuid, $1::uuid::text", id).Scan(&back, &text))
	require.Equal(t, id, back)
	require.Equal(t, id.String(), text, "the same 16 bytes Postgres's text form names")

	var none *uuid.UUID
	var isNull bool
	var got *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "select $1::uuid is null, $1::uuid", none).Scan(&isNull, &got))
	require.True(t, isNull)
	require.Nil(t, got)
	require.NoError(t, pool.QueryRow(ctx, "select $1::uuid", &id).Scan(&got))
	require.Equal(t, id, *got)
	require.NoError(t, pool.QueryRow(ctx, "select null::uuid").Scan(&back))
	require.Equal(t, uuid.UUID{}, back, "NULL into a uuid.UUID: the zero UUID, as uuid.Scan made it")

	ids := []uuid.UUID{uuid.New(), uuid.New()}
	var arr []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "select $1::uuid[]", ids).Scan(&arr))
	require.Equal(t, ids, arr)
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
