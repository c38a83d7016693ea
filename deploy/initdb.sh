#!/bin/sh
# Postgres's first start (docker-entrypoint-initdb.d, compose.yaml): the role
# parley owns database parley and is neither a superuser nor BYPASSRLS, so
# row-level security stays a second wall between organizations; vector is
# created here by the superuser because Parley's role cannot.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="${PARLEY_DB_PASSWORD:?PARLEY_DB_PASSWORD is not set}" <<'SQL'
CREATE ROLE parley LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE PASSWORD :'pw';
CREATE DATABASE parley OWNER parley;
\connect parley
CREATE EXTENSION IF NOT EXISTS vector;
SQL
