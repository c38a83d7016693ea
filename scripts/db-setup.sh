#!/usr/bin/env bash
# Makes a local PostgreSQL with pgvector ready for Parley, idempotently:
#   1. use a running server on $PGHOST:$PGPORT (default 127.0.0.1:5432);
#   2. else start an installed but stopped cluster;
#   3. else install PostgreSQL from Debian/Ubuntu packages;
#   4. install pgvector when CREATE EXTENSION vector is not possible
#      (package postgresql-<major>-pgvector where it exists; on Debian bookworm,
#      which does not package it, build Debian's own trixie source package);
#   5. create role parley (LOGIN CREATEDB, not superuser, no BYPASSRLS) and database parley.
# With DATABASE_URL set, nothing is installed: the script only checks that URL.
set -euo pipefail

PGHOST_=${PGHOST:-127.0.0.1}
PGPORT_=${PGPORT:-5432}
log() { printf 'db-setup: %s\n' "$*" >&2; }

if [ -n "${DATABASE_URL:-}" ]; then
  log "DATABASE_URL is set; checking it only"
  psql "$DATABASE_URL" -Atc "select 1" >/dev/null
  exit 0
fi

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Run SQL as the database superuser: peer auth over the socket, else trust on TCP.
su_psql() {
  export PGOPTIONS="-c client_min_messages=warning"
  if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1 && runuser -u postgres -- psql -p "$PGPORT_" -Atqc "select 1" >/dev/null 2>&1; then
    runuser -u postgres -- psql -p "$PGPORT_" -v ON_ERROR_STOP=1 -Atq "$@"
  elif [ "$(id -u)" != 0 ] && sudo -n -u postgres psql -p "$PGPORT_" -Atqc "select 1" >/dev/null 2>&1; then
    sudo -n -u postgres psql -p "$PGPORT_" -v ON_ERROR_STOP=1 -Atq "$@"
  else
    psql -h "$PGHOST_" -p "$PGPORT_" -U postgres -v ON_ERROR_STOP=1 -Atq "$@"
  fi
}

ready() { command -v pg_isready >/dev/null && pg_isready -q -h "$PGHOST_" -p "$PGPORT_"; }

if ! ready; then
  if ! command -v pg_lsclusters >/dev/null; then
    log "PostgreSQL is not installed; installing it"
    apt_install postgresql postgresql-client
  fi
  for c in $(pg_lsclusters -h | awk '{print $1"/"$2}'); do
    log "starting cluster $c"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "${c%/*}" "${c#*/}" start || true
  done
  for _ in $(seq 1 30); do ready && break; sleep 1; done
  ready || { log "PostgreSQL does not answer on $PGHOST_:$PGPORT_"; exit 1; }
fi

major=$(su_psql -c "show server_version_num" | cut -c1-2)
log "PostgreSQL $major is up on $PGHOST_:$PGPORT_"

vector_available() { [ "$(su_psql -c "select count(*) from pg_available_extension_versions where name = 'vector' and string_to_array(version, '.')::int[] >= '{0,8}'")" != 0 ]; }

if ! vector_available; then
  $SUDO apt-get update -qq; apt_updated=1
  if apt-cache policy "postgresql-$major-pgvector" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    log "installing postgresql-$major-pgvector"
    apt_install "postgresql-$major-pgvector"
  fi
fi
if ! vector_available; then
  log "building pgvector from Debian's trixie source package"
  apt_install "postgresql-server-dev-$major" build-essential dpkg-dev
  src=/etc/apt/sources.list.d/parley-trixie-src.sources
  if [ ! -f "$src" ]; then
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' | $SUDO tee "$src" >/dev/null
    $SUDO apt-get update -qq
  fi
  work=$(mktemp -d)
  (cd "$work" && apt-get source -qq --download-only pgvector/trixie >/dev/null 2>&1 || apt-get source -qq --download-only pgvector >/dev/null)
  tar -xf "$work"/pgvector_*.orig.tar.* -C "$work"
  dir=$(find "$work" -maxdepth 1 -type d -name 'pgvector-*' | head -1)
  make -s -C "$dir" PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" OPTFLAGS="" >/dev/null
  $SUDO make -s -C "$dir" PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" install >/dev/null
  rm -rf "$work"
  vector_available || { log "pgvector did not install"; exit 1; }
fi

su_psql <<'SQL'
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'parley') THEN
    -- The password only matters where pg_hba asks for one (local development only).
    CREATE ROLE parley LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS PASSWORD 'parley';
  ELSE
    ALTER ROLE parley LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS;
  END IF;
END $$;
SQL
if [ "$(su_psql -c "select count(*) from pg_database where datname = 'parley'")" = 0 ]; then
  su_psql -c "create database parley owner parley"
fi
# vector is created by a superuser once per database that Parley uses, and in
# template1 so that every database Parley's role creates (test databases) has it.
su_psql -d parley -c "create extension if not exists vector; alter extension vector update"
su_psql -d template1 -c "create extension if not exists vector; alter extension vector update"
log "ready: postgres://parley:parley@$PGHOST_:$PGPORT_/parley?sslmode=disable (vector $(su_psql -d parley -c "select extversion from pg_extension where extname='vector'"))"
