#!/usr/bin/env bash
# Installs the Debian 12 packages streamattn builds with, when any is missing (as root, or
# through sudo). Extra package names may be passed as arguments.
set -euo pipefail

# libopenmpi-dev and openmpi-bin (mpirun): the optional MPI component, libstreamattn_mpi.
# ccache: scripts/build.sh compiles through it.
packages=(build-essential cmake ccache pkg-config libhwy-dev libtbb-dev libgtest-dev
          libgmock-dev libbenchmark-dev libopenblas-dev libopenmpi-dev openmpi-bin "$@")

# Once foreign architectures are enabled (scripts/test-arm.sh adds arm64 and armhf), dpkg-query
# lists a name once per installed architecture: only the native or arch-independent one counts.
native=$(dpkg --print-architecture)
missing=()
for p in "${packages[@]}"; do
  arch=$native
  [[ $p == *:* ]] && arch=${p#*:}
  status=$(dpkg-query -W -f='${Architecture} ${Status}\n' "$p" 2>/dev/null || true)
  grep -Eqx "($arch|all) install ok installed" <<<"$status" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "streamattn: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "streamattn: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# A mirror mid-sync can fail one index (often a foreign architecture's security index) and make
# apt-get update exit non-zero although the lists we need arrived: go on to the install, which
# says plainly if a package is really not there, and retry update and install a few times apart.
# Another apt or dpkg may hold the locks for a while: wait for them instead of failing.
for try in 1 2 3 4; do
  $sudo apt-get update -qq -o DPkg::Lock::Timeout=600 ||
    echo "streamattn: apt-get update failed (try $try); installing with the indexes we have" >&2
  if $sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
      "${missing[@]}"; then
    exit 0
  fi
  [[ $try -lt 4 ]] && { echo "streamattn: install failed (try $try); retrying in $((30 * try)) s" >&2; sleep $((30 * try)); }
done
echo "streamattn: could not install ${missing[*]}" >&2
exit 1
