#!/usr/bin/env bash
# Installs the Debian packages h3rt builds with, only those that are missing.
# The CUDA toolkit is optional (the CPU backend builds without it) and is not installed here.
# clang and its runtime libraries build the sanitizer and fuzzing folder (tools/sanitize.sh).
# Usage: tools/install_deps.sh [more packages...]   (other scripts name what they need besides)
set -euo pipefail
packages=(cmake g++ make nlohmann-json3-dev libcli11-dev libgtest-dev clang libclang-rt-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present" >&2
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
