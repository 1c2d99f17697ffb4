#!/usr/bin/env bash
# pip install . as a user does, into the environment of scripts/install-deps.sh
# (--no-build-isolation: against its torch, without a second 5 GB download),
# then, from /tmp with no PYTHONPATH: `mutwo --help` and a step on PATH,
# `import mutwo.torch` with a wrapped module trained one step (its extension
# loaded from the installed package), `python -m mutwo.capture --help`, and
# torch.compile(backend="mutwo") in a fresh process that never imports mutwo:
# torch's registry finds it through the installed entry point.
# mutwo is uninstalled again at the end. Part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD venv=$PWD/${MUTWO_VENV:-.venv}
start=$(date +%s)
# After scripts/test.sh's build, the wheel is built in build/ with the same
# flags, so it compiles nothing again (279 of the 285 s this took on the 2-core
# machine went to a second build in build/wheel-*, before).
reuse=()
[ -f build/CMakeCache.txt ] && reuse=(-C build-dir=build -C cmake.define.MUTWO_BUILD_TESTS=ON)
"$venv/bin/python" -m pip install -q --no-build-isolation --disable-pip-version-check "${reuse[@]}" .
trap '"$venv/bin/python" -m pip uninstall -q -y mutwo' EXIT
echo "test-install: pip install . in $(( $(date +%s) - start )) s"
cd /tmp
export PATH="$venv/bin:$PATH"
unset PYTHONPATH MUTWO_LIBRARY
[ "$(command -v mutwo)" = "$venv/bin/mutwo" ]
mutwo --help >/dev/null
mutwo run --model mlp --batch 8 --steps 1 --json | tail -n 1 | python -c 'import json, sys; json.loads(sys.stdin.read())'
python -m mutwo.capture --help >/dev/null
python - "$root" <<'PY'
import os, sys
import torch
import mutwo.torch
root = sys.argv[1]
assert not mutwo.torch.__file__.startswith(os.path.join(root, "python")), f"imported the source tree's mutwo: {mutwo.torch.__file__}"
model = mutwo.torch.wrap(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), "100%")
model(torch.randn(4, 8)).sum().backward()
print("test-install: mutwo.torch from", os.path.dirname(mutwo.torch.__file__))
PY
python - "$root" <<'PY'
import os, sys
import torch
assert "mutwo" in torch._dynamo.list_backends(), f"no mutwo in {torch._dynamo.list_backends()}"
assert not any(m.startswith("mutwo") for m in sys.modules), "mutwo was imported before the compile"
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
compiled = torch.compile(model, backend="mutwo", options={"budget": "100%", "compiler": "mutwo"})
compiled(torch.randn(4, 8)).sum().backward()
assert all(p.grad is not None for p in model.parameters())
named = sys.modules["mutwo._named"]
assert not named.__file__.startswith(os.path.join(sys.argv[1], "python")), f"the source tree's: {named.__file__}"
print("test-install: backend=\"mutwo\" by name from", named.__file__)
PY
echo "test-install: passed in $(( $(date +%s) - start )) s"
