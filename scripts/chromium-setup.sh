#!/usr/bin/env bash
# Makes a headless Chromium available for the console's browser tests
# (chromedp drives it): Debian's chromium package (Ubuntu's chromium-browser
# is a snap, which does not run headless in CI containers; there, set
# PARLEY_CHROME to a Chrome or Chromium binary). Idempotent.
set -euo pipefail
log() { printf 'chromium-setup: %s\n' "$*" >&2; }
if [ -n "${PARLEY_CHROME:-}" ]; then
  "$PARLEY_CHROME" --version >/dev/null
  exit 0
fi
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null && "$b" --headless=new --version >/dev/null 2>&1; then exit 0; fi
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
log "installing chromium (Debian package) for the browser tests"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --headless=new --version >/dev/null
