#!/usr/bin/env bash
# On the GPU machine: join the parts stage_dsl_wheels.sh split, and install every wheel
# under SRC (its carry-N folders, brought over one per transfer) as a prefix at TARGET,
# without touching the image's packages. TARGET/pythonpath then holds what to put on
# PYTHONPATH: the prefix's site-packages and the folders its .pth files add (CuTeDSL's
# `cutlass` lives in one), since Python reads .pth files only in its own site folders.
#   scripts/install_dsl_wheels.sh SRC TARGET
#   PYTHONPATH=$(cat TARGET/pythonpath):src python -m pytest tests/test_gpu_dsls.py -s
# When the wheels come over in several transfers (one per call while the machine is warm),
# run this after the last: the parts of the first wait in SRC.
set -euo pipefail

src=${1:?usage: install_dsl_wheels.sh SRC TARGET}
target=${2:?usage: install_dsl_wheels.sh SRC TARGET}
python=${PYTHON:-python3}

shopt -s nullglob
joined="$src/joined"
mkdir -p "$joined"
# A wheel's parts may sit in different carry folders: join them in name order.
for first in $(find "$src" -name '*.whl.part-00' | sort); do
  name=$(basename "${first%.part-00}")
  find "$src" -name "$name.part-*" -printf '%f\t%p\n' | sort | cut -f2 | xargs cat > "$joined/$name.joining"
  mv "$joined/$name.joining" "$joined/$name"
  echo "joined $name"
done
# -type f: SRC itself may be named .whl
mapfile -t wheels < <(find "$src" -type f -name '*.whl' | sort)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "no wheels in $src" >&2
  exit 1
fi
# --no-deps: the folder holds exactly what the image lacks; torch and numpy stay the image's.
# --prefix, not --target: --target skips a package folder another wheel already made
# (CuTeDSL's three wheels share nvidia_cutlass_dsl/), a prefix install merges them.
target=$(realpath -m "$target")
"$python" -m pip install -q --no-deps --no-index --no-warn-script-location --prefix "$target" \
  "${wheels[@]}"
# -E: a PYTHONPATH that already holds the prefix would hide the folders it adds.
"$python" -E - "$target" <<'PY'
import importlib
import site
import sys
import sysconfig
from pathlib import Path

prefix = Path(sys.argv[1])
before = list(sys.path)
where = {"base": str(prefix), "platbase": str(prefix)}
# One folder, or two on lib64 systems; each once, as its .pth files add to sys.path anew.
for folder in dict.fromkeys(sysconfig.get_path(k, vars=where) for k in ("purelib", "platlib")):
    site.addsitedir(folder)
paths = list(dict.fromkeys(p for p in sys.path if p not in before))  # what the .pth files added too
failed = []
for name in ("cutlass", "cutlass.cute", "tilelang"):
    try:
        module = importlib.import_module(name)
        print(f"{name}: {getattr(module, '__version__', 'ok')}")
    except Exception as exc:  # report each, so one broken install does not hide the other
        print(f"{name}: FAILED {type(exc).__name__}: {exc}")
        failed.append(name)
if failed:  # no pythonpath file: gpu_check.sh installs again next time
    sys.exit(1)
(prefix / "pythonpath").write_text(":".join(paths) + "\n")
print("PYTHONPATH=" + ":".join(paths))
PY
