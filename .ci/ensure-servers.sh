#!/usr/bin/env bash
# Makes sure the binaries the tests and the demo start are installed:
# redis-server, mariadbd and mariadb-install-db (Debian packages
# redis-server and mariadb-server), chromium for the browser tests
# (Debian package chromium), and npm, which fetches the ALTCHA widget the
# proof-of-work browser test runs (Debian package npm; any npm will do),
# curl and jq, which run the README's examples as written, and ip and iptables
# (Debian packages iproute2 and iptables), which the partition tests use to
# put a server in a network namespace of its own and cut it off.
# Installs them when run as root;
# otherwise prints the command and fails.
set -euo pipefail

have() {
  command -v "$1" >/dev/null 2>&1 && return 0
  for d in /usr/sbin /usr/local/sbin /sbin; do [ -x "$d/$1" ] && return 0; done
  return 1
}

missing=()
for bin in redis-server mariadbd mariadb-install-db chromium npm curl jq ip iptables; do
  have "$bin" || missing+=("$bin")
done
if ! command -v go >/dev/null 2>&1; then
  echo "go is not on PATH: install Go $(sed -n 's/^go //p' go.mod) or newer (https://go.dev/doc/install)" >&2
  exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

# Only the packages of what is missing: a machine whose Node.js (and npm)
# came from elsewhere cannot take Debian's npm beside it (apt refuses with
# "held broken packages"), and needs it not.
pkgs=()
for bin in "${missing[@]}"; do
  case "$bin" in
    redis-server) pkg=redis-server ;;
    mariadbd | mariadb-install-db) pkg=mariadb-server ;;
    ip) pkg=iproute2 ;;
    *) pkg=$bin ;;
  esac
  [[ " ${pkgs[*]} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
cmd="apt-get install -y ${pkgs[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]}: apt-get update && $cmd" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${pkgs[@]}" >/dev/null
  for bin in "${missing[@]}"; do
    have "$bin" || { echo "still missing after install: $bin" >&2; exit 1; }
  done
else
  echo "missing: ${missing[*]}. Install them with:" >&2
  echo "  sudo $cmd" >&2
  exit 1
fi
