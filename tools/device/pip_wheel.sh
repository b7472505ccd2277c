#!/usr/bin/env bash
# The Python package as a user gets it: `pip wheel ./python` with pyproject's defaults (CUDA archs
# 90a;100a;120a;121a, the CUTLASS sm_90a GEMMs when the headers are in .deps), installed by pip
# into a plain folder on the GPU machine and imported from outside the checkout: build_info(),
# selftest(), then the Python and ComfyUI-node tests against the installed package.
#
# On the developer machine (PY: the GPU machine's Python minor version, 3.12 there):
#   bash tools/device/pip_wheel.sh --pack /path/to/python3.12 [BUILD]
# writes .wheelcheck/ (git-ignored): the wheel, the h3rt CLI of the build folder BUILD (default
# build; some tests call it), the golden data and pytest's wheels. Carry [".wheelcheck"] (under
# 50 MB) and run there:
#   bash tools/device/pip_wheel.sh
# Results: $OUT/selftest_wheel.txt, $OUT/pytest_wheel.log. Exit status 1 when a step fails.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
W=$root/.wheelcheck

if [ "${1:-}" = "--pack" ]; then
  set -e
  py=${2:?--pack needs the Python the GPU machine runs (its minor version)}
  build=$(cd "$root" && cd "${3:-build}" && pwd)
  [ -x "$build/h3rt" ] || { echo "no h3rt CLI in $build: build it first" >&2; exit 1; }
  grep -qx '/.wheelcheck/' "$root/.git/info/exclude" 2>/dev/null ||
    echo '/.wheelcheck/' >>"$(git -C "$root" rev-parse --git-common-dir)/info/exclude"
  rm -rf "$W" /tmp/h3rt-wheel-venv && mkdir -p "$W/pipwheel" "$W/pytest"
  "$py" -m venv /tmp/h3rt-wheel-venv
  start=$(date +%s)
  /tmp/h3rt-wheel-venv/bin/pip wheel --no-deps -w "$W/pipwheel" "$root/python" >"$W/build.log" 2>&1 ||
    { tail -30 "$W/build.log"; exit 1; }
  echo "wheel built in $(($(date +%s) - start)) s: $(ls "$W/pipwheel")"
  /tmp/h3rt-wheel-venv/bin/pip download -q -d "$W/pytest" pytest
  tar -C "$build" -cf - h3rt | xz -T2 -6 >"$W/cli.tar.xz"
  tar -C "$root/../shared" -cf - golden | xz -T2 -6 >"$W/golden.tar.xz"
  git -C "$root" rev-parse HEAD >"$W/commit"
  du -sh "$W"
  exit 0
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" /tmp/h3rt-cli /tmp/h3rt-shared
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }
tar -C /tmp/h3rt-cli -xJf "$W/cli.tar.xz" && tar -C /tmp/h3rt-shared -xJf "$W/golden.tar.xz"
export H3RT_SHARED_DIR=/tmp/h3rt-shared H3RT_CLI=/tmp/h3rt-cli/h3rt
echo "wheel of $(cat "$W/commit"); $(python3 --version)"
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader
python3 -m pytest --version >/dev/null 2>&1 ||
  { python3 -m pip install -q --no-index --no-deps --target /tmp/h3rt-site "$W"/pytest/*.whl &&
    export PYTHONPATH=/tmp/h3rt-site; }
python3 -m pip install -q --no-index --no-deps --target /tmp/h3rt-pip "$W"/pipwheel/h3rt-*.whl ||
  { el "pip install failed"; exit 1; }
export PYTHONPATH=/tmp/h3rt-pip:${PYTHONPATH:-}
fail=0
(cd /tmp && python3 -c "import h3rt; print(h3rt.__file__); print(h3rt.build_info()['summary'])") ||
  fail=1
(cd /tmp && python3 - >"$OUT/selftest_wheel.txt" 2>&1 <<'PY'
import h3rt, json, sys
r = h3rt.selftest()
print("passed", r.get("passed"))
print(json.dumps(r, indent=1, default=str))
sys.exit(0 if r.get("passed") else 1)
PY
) || fail=1
el "selftest: $(head -1 "$OUT/selftest_wheel.txt")"
(cd "$root" && PYTHONPATH=$PYTHONPATH:python/tests timeout 300 python3 -m pytest -q \
  -p no:cacheprovider -rs python/tests integrations/comfyui/tests >"$OUT/pytest_wheel.log" 2>&1) ||
  fail=1
el "pytest: $(tail -1 "$OUT/pytest_wheel.log")"
# The tests must have imported the installed package, not a build folder.
python3 -c "import h3rt, sys; sys.exit(0 if h3rt.__file__.startswith('/tmp/h3rt-pip/') else 1)" ||
  { el "h3rt did not import from the installed wheel"; fail=1; }
exit $fail
