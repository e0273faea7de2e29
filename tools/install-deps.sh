#!/usr/bin/env bash
# install-deps.sh: installs the Debian 12 packages lockstep builds, tests and runs with (as root).
# The CUDA toolkit is optional and not installed here: with /usr/local/cuda present the build adds
# the CUDA backend, without it the build is CPU-only.
set -euo pipefail
# slurmctld/slurmd/slurm-client: the launcher's Slurm test starts a private cluster with its own
# configuration; the packages' system services need /etc/slurm/slurm.conf and stay off without it.
# python3: with the CUDA toolkit, the tests that run lockstep's CUDA kernels in a CPU emulator
# translate the kernels' sources with it (tests/gpu/emu/translate.py).
pkgs=(build-essential python3 cmake pkg-config git libopenblas-dev zlib1g-dev libcjson-dev
      openmpi-bin libopenmpi-dev dataset-fashion-mnist iproute2 clang libclang-rt-14-dev clang-format
      slurmctld slurmd slurm-client)
if [ "${LOCKSTEP_WITH_TORCH:-0}" = 1 ]; then pkgs+=(python3-torch python3-numpy); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
