#!/usr/bin/env bash
# Creates a demo organization (pro plan) and prints its API key, for `make run`.
set -euo pipefail
parley=${1:-bin/parley}
out=$("$parley" admin bootstrap --org "Demo" --plan pro --json)
key=$(printf '%s' "$out" | sed -E 's/.*"apiKey":"([^"]+)".*/\1/')
cat <<MSG

  Demo organization created. Its API key (admin + chat scopes, shown once):

    export PARLEY_KEY=$key

  Then, for example:
    curl -s localhost:8080/api/agents -H "Authorization: Bearer \$PARLEY_KEY"

MSG
