#!/usr/bin/env bash
# Installs the Python packages the h3rt extension builds and tests with (from PyPI, with pip),
# only those that are missing: nanobind, scikit-build-core, numpy, pytest.
set -euo pipefail
py=${PYTHON:-python3}
missing=()
for p in nanobind scikit_build_core numpy pytest; do
  "$py" -c "import $p" 2>/dev/null || missing+=("${p//_/-}")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_python_deps: all packages present" >&2
  exit 0
fi
echo "install_python_deps: installing ${missing[*]}" >&2
"$py" -m pip install -q "${missing[@]}"
