#!/usr/bin/env bash
# Creates a demo organization (pro plan) with its owner, and prints its API
# key and a one-time console sign-in link, for `make run`.
set -euo pipefail
parley=${1:-bin/parley}
out=$("$parley" admin bootstrap --org "Demo" --plan pro --json)
field() { printf '%s' "$out" | sed -E "s/.*\"$1\":\"([^\"]+)\".*/\\1/"; }
cat <<MSG

  Demo organization created.

  Console: open this link within 15 minutes (once) to sign in as its owner,
  $(field ownerEmail):

    $(field signInUrl)

  Its API key (admin + chat scopes, shown once):

    export PARLEY_KEY=$(field apiKey)

  Then, for example:
    curl -s localhost:8080/api/agents -H "Authorization: Bearer \$PARLEY_KEY"

  A new sign-in link later: bin/parley admin signin-link --org $(field organizationId) --email $(field ownerEmail)

MSG
