#!/usr/bin/env bash
# Creates a demo organization (pro plan) with its owner on the first
# `make run`, and prints its API key and a one-time console sign-in link.
# Later runs find it again (its id and owner in .parley/demo-org) and print
# a fresh sign-in link: the key was shown once, on the first run. A database
# made anew (the organization gone) gets a new demo organization.
set -euo pipefail
parley=${1:-bin/parley}
state=.parley/demo-org

if [ -s "$state" ]; then
  read -r org email <"$state"
  if link=$("$parley" admin signin-link --org "$org" --email "$email" 2>.parley/demo-org.err); then
    cat <<MSG

  Demo organization $org (made by an earlier run).

  Console: open this link within 15 minutes (once) to sign in as its owner,
  $email:

    $link

  Its API key was shown on the first run. Another (admin + chat scopes):

    $parley admin create-key --org $org

MSG
    exit 0
  fi
  # Only an organization that is gone (a database made anew) is made again;
  # any other failure (the database down, a wrong URL) is shown.
  if ! grep -q "is not a member of this organization" .parley/demo-org.err; then
    cat .parley/demo-org.err >&2
    exit 1
  fi
fi

# Where `parley serve` will listen (PARLEY_ADDR, :8080 by default), for the
# example below: an address without a host, or on every interface, is asked
# on localhost.
addr=${PARLEY_ADDR:-:8080}
case $addr in
  :* | 0.0.0.0:* | "[::]:"*) api=localhost:${addr##*:} ;;
  *) api=$addr ;;
esac

out=$("$parley" admin bootstrap --org "Demo" --plan pro --json)
field() { printf '%s' "$out" | sed -E "s/.*\"$1\":\"([^\"]+)\".*/\\1/"; }
mkdir -p "$(dirname "$state")"
printf '%s %s\n' "$(field organizationId)" "$(field ownerEmail)" >"$state"
cat <<MSG

  Demo organization created.

  Console: open this link within 15 minutes (once) to sign in as its owner,
  $(field ownerEmail):

    $(field signInUrl)

  Its API key (admin + chat scopes, shown once):

    export PARLEY_KEY=$(field apiKey)

  Then, for example:
    curl -s $api/api/agents -H "Authorization: Bearer \$PARLEY_KEY"

  A new sign-in link later: $parley admin signin-link --org $(field organizationId) --email $(field ownerEmail)

MSG
