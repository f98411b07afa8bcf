#!/usr/bin/env bash
# Set-up of a fresh Debian machine for pgshard (run as root, no stdin): installs the
# PostgreSQL 15 servers and clients the clusters and tests run, what the pg_query build
# needs, the benchmark clients; puts cargo on PATH; builds pgshard.
# Idempotent: apt runs only when a package is missing. scripts/test.sh and
# scripts/demo.sh `source` it, so the PATH it sets carries over to them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

packages=(postgresql-15 postgresql-client-15 libclang-dev clang sysbench python3-psycopg pkg-config jq)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages ${missing[*]}; run as root (sudo) to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# rustup lives in /root/.cargo on the build machines; sudo may have reset PATH.
if ! command -v cargo >/dev/null 2>&1; then
  for env in "${HOME:-/root}/.cargo/env" /root/.cargo/env; do
    if [ -f "$env" ]; then . "$env"; break; fi
  done
fi
if ! command -v cargo >/dev/null 2>&1 && [ -x /root/.cargo/bin/cargo ]; then
  export PATH="/root/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found (install Rust with rustup)" >&2; exit 1; }

echo "setup: cargo build --release"
cargo build --release
