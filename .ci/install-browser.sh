#!/usr/bin/env bash
# Install Debian's Chromium for the dashboard browser test (tests/test_dashboards.py).
# Idempotent: does nothing when /usr/bin/chromium is already there.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "install-browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) already installed"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-liberation
/usr/bin/chromium --version
