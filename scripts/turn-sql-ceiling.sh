#!/usr/bin/env bash
# turn-sql-ceiling.sh: how many chat turns a second Postgres itself can
# store on this machine, with no Parley in the way: pgbench (-M prepared, 32
# clients) runs a turn's statements as Parley sends them today
# (scripts/pgbench/turn.sql, two round trips), as it sent them before
# (turn-4rt.sql, four), and the floor's single INSERT for comparison.
# Issue 13; figures in docs/benchmarks.md.
#
# Beside each rate, Postgres's own CPU per turn (every postgres process's
# user and system time from /proc, the reaped backends' through the
# postmaster), steadier than the rate on a machine that is not quiet.
#
# Needs a database that a load run kept: bin/parley-load --held "" --keep
# (database parley_load). Reads its organization and agent as the postgres
# superuser (row-level security hides them from parley), runs as parley.
set -euo pipefail
cd "$(dirname "$0")/pgbench"
db=${PARLEY_LOAD_DB:-parley_load}
secs=${SECS:-8}
admin=(psql -h 127.0.0.1 -U postgres -d "$db" -qAt)
read -r org agent < <("${admin[@]}" -F ' ' -c "select org_id, id from agents limit 1")
[ -n "$org" ] || { echo "no agent in $db: run bin/parley-load --held '' --keep first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Variants: today's two round trips (turn.sql), and the four Parley made
# until 2026-11-25 (turn-4rt.sql).
cp turn.sql "$work/2rt.sql"
cp turn-4rt.sql "$work/4rt.sql"
printf '%s\n' '\set r random(1, 1000000000)' \
  "INSERT INTO load_floor (conversation_id, query) VALUES ('c' || :r, 'hello there, what are your hours?') RETURNING id;" > "$work/floor.sql"
# pgcpu: Postgres's CPU so far, in clock ticks.
pgcpu() {
  local pm total=0 p s
  pm=$("${admin[@]}" -c "select pg_postmaster_pid()" 2>/dev/null || head -1 /var/lib/postgresql/*/main/postmaster.pid)
  for p in $(pgrep -u postgres -x postgres); do
    s=$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null) || continue
    set -- $s
    total=$((total + ${12} + ${13}))
    if [ "$p" = "$pm" ]; then total=$((total + ${14} + ${15})); fi
  done
  echo "$total"
}
tick_ms=$((1000 / $(getconf CLK_TCK)))
for v in 2rt 4rt floor; do
  "${admin[@]}" -c "delete from conversations where id like 'pgb-%'" -c "vacuum analyze conversations, messages, conversation_events" >/dev/null
  before=$(pgcpu)
  out=$(pgbench -h 127.0.0.1 -U parley -n -M prepared -c "${CLIENTS:-32}" -j "$(( ${CLIENTS:-32} < 2 ? 1 : 2 ))" -T "$secs" -D org="$org" -D agent="$agent" -f "$work/$v.sql" "$db" 2>&1)
  after=$(pgcpu)
  grep -E "aborted|error" <<<"$out" >&2 || true
  tps=$(awk '/^tps/ {print $3}' <<<"$out")
  n=$(awk '/actually processed/ {print $NF}' <<<"$out")
  awk -v v="$v" -v tps="$tps" -v n="$n" -v t=$((after - before)) -v ms="$tick_ms" \
    'BEGIN {printf "%-6s %8.0f per second  %6.3f ms of Postgres CPU each\n", v, tps, t * ms / n}'
done
