#!/usr/bin/env bash
# promtool checks the dashboards' PromQL and unit-tests the alert rules (tests/tessera/monitoring).
# It comes from Debian's `prometheus` package; installing it needs root (CI runs as root).
# The package's Prometheus server is not wanted here: its service is kept from starting.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "promtool is missing; run: sudo apt-get install -y prometheus (or TESSERA_SKIP_PROMTOOL=1 make test to skip its tests)" >&2
  exit 1
fi
guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  # invoke-rc.d asks this script whether to start services; 101 = no (a container or CI box needs no Prometheus daemon)
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  guard=/usr/sbin/policy-rc.d
fi
trap 'if [ -n "$guard" ]; then rm -f "$guard"; fi' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
promtool --version | head -1
