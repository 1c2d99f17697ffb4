#!/usr/bin/env bash
# Installs mutwo's build and test dependencies from Debian 12's packages
# (apt-get; uses sudo when not root). Skips apt entirely when all are present.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config
  libtorch-dev            # ATen kernels (libtorch 1.13, CPU)
  libgloo-dev             # c10d's ProcessGroupGloo headers: several ranks on the CPU (README "Several GPUs")
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev googletest
  python3-torch python3-torchvision  # tests/resnet_oracle.py: torchvision's ResNets as the oracle
  python3-pytest          # tests/python: the capture (python/mutwo) on models outside the zoo
  libopenblas0-pthread    # libtorch-dev's BLAS is the reference one, many times slower
  gnuplot-nox             # plots (mutwo profile, plan --sweep, optimize, sweep)
  coinor-libcbc-dev       # COIN-OR CBC: the optimal planner's MILP (or configure with -DMUTWO_WITH_CBC=OFF)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
