#!/usr/bin/env bash
# make test: the whole suite, as `go test ./...` runs it, from test binaries
# kept in build/test between runs.
#
# Why not `go test ./...` itself: it links every package's test binary
# again on every run, cached build or not, and 14 of them hold the whole
# server (about 75 s of wall and two minutes of CPU of a warm run on two
# cores, before any test starts). `go test -c -o DIR` leaves a binary whose
# build ID is still current alone, so a warm run links only the packages a
# change reached.
#
# Each binary runs in its package's directory (testdata is found there),
# TESTP at a time (default 4: the tests mostly wait on Postgres), the
# slowest of the last run first (build/test/times) so that the longest
# package does not start last; a passing package prints its ok line, a
# failing one all its output, as go test does.
# TESTARGS go to every binary, e.g. TESTARGS='-test.run TestX -test.v'.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/build/test
mkdir -p "$out"

go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' ./... | sed '/^$/d' > "$out/packages"
# shellcheck disable=SC2046
go test -c -trimpath -ldflags="-s -w" -o "$out/" $(cut -d' ' -f1 "$out/packages")
touch "$out/times"
# Slowest first by the last run's times (a package not timed yet first of all).
awk 'FILENAME == ARGV[1] { t[$1] = $2; next } { print ($1 in t ? t[$1] : 1e9), $0 }' "$out/times" "$out/packages" |
  sort -rn -k1,1 | cut -d' ' -f2- > "$out/order"

run() {
  local pkg=$1 dir=$2 bin log start took status=0
  bin=$out/${pkg##*/}.test
  log=$(mktemp)
  start=$EPOCHREALTIME
  # shellcheck disable=SC2086
  (cd "$dir" && "$bin" -test.count=1 -test.timeout="${TESTTIMEOUT:-10m}" -test.paniconexit0 $TESTARGS) >"$log" 2>&1 || status=$?
  took=$(awk "BEGIN { print $EPOCHREALTIME - $start }")
  echo "$pkg $took" >>"$out/times.new"
  if [ "$status" = 0 ]; then
    case " $TESTARGS " in *" -test.v "*) cat "$log" ;; esac
    printf 'ok  \t%s\t%.3fs\n' "$pkg" "$took"
  else
    cat "$log"
    printf 'FAIL\t%s\t%.3fs\n' "$pkg" "$took"
  fi
  rm -f "$log"
  return "$status"
}
export -f run
export out TESTARGS="${TESTARGS:-}"

rm -f "$out/times.new"
status=0
xargs -P "${TESTP:-4}" -L 1 bash -c 'run "$@"' _ <"$out/order" || status=$?
# The patched PDF reader is a module of its own (third_party/pdf, used
# through a replace): ./... does not reach its tests.
(cd third_party/pdf && go test -count=1 ./...) || status=1
mv "$out/times.new" "$out/times"
if [ "$status" = 0 ]; then
  echo PASS
else
  echo FAIL
  exit 1
fi
