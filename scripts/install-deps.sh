#!/usr/bin/env bash
# Installs the Debian 12 packages streamattn builds with, when any is missing (as root, or
# through sudo). Extra package names may be passed as arguments.
set -euo pipefail

packages=(build-essential cmake pkg-config libhwy-dev libtbb-dev libgtest-dev libgmock-dev
          libbenchmark-dev libopenblas-dev "$@")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "streamattn: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "streamattn: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
