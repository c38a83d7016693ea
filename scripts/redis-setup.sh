#!/usr/bin/env bash
# Makes a Redis answer on 127.0.0.1:6379 for the tests: use a running one,
# else start an installed redis-server, else install it from Debian/Ubuntu
# packages. With PARLEY_TEST_REDIS_URL set, nothing is done.
set -euo pipefail
[ -n "${PARLEY_TEST_REDIS_URL:-}" ] && exit 0
log() { printf 'redis-setup: %s\n' "$*" >&2; }
ping() { timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/6379 && printf "PING\r\n" >&3 && read -r line <&3 && [[ $line == +PONG* ]]' 2>/dev/null; }
ping && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if ! command -v redis-server >/dev/null; then
  log "installing redis-server"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
log "starting redis-server on 127.0.0.1:6379"
redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
for _ in $(seq 1 20); do ping && exit 0; sleep 0.25; done
log "Redis does not answer on 127.0.0.1:6379"
exit 1
