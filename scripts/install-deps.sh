#!/usr/bin/env bash
# Installs mutwo's build and test dependencies: Debian 12's packages (apt-get,
# through sudo when not root; skipped when all are present), then a Python
# environment in .venv/ holding the pins of requirements.txt from PyPI (torch
# and its libtorch, torchvision, transformers, accelerate, pytest, scikit-build-core). pip
# downloads nothing when the pins are already satisfied. MUTWO_VENV moves the
# environment; PYTHON names the interpreter that makes it (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  cmake ninja-build g++ pkg-config
  python3-venv            # the environment below (ensurepip)
  libgloo-dev             # c10d's ProcessGroupGloo headers, which the wheel does not ship: several ranks on the CPU
  libcli11-dev nlohmann-json3-dev
  libgtest-dev googletest
  gnuplot-nox             # plots (mutwo profile, plan --sweep, optimize, sweep)
  coinor-libcbc-dev       # COIN-OR CBC: the optimal planner's MILP (or configure with -DMUTWO_WITH_CBC=OFF)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} Debian packages present"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv=${MUTWO_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "install-deps: making the Python environment $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
if "$venv/bin/python" scripts/check_requirements.py requirements.txt 2>/dev/null; then
  echo "install-deps: $venv holds requirements.txt's pins"
else
  echo "install-deps: installing requirements.txt into $venv (torch's wheels are about 5 GB the first time)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
fi
"$venv/bin/python" -c 'import torch; print("install-deps: torch", torch.__version__, "in", torch.__file__.rsplit("/", 2)[0])'
