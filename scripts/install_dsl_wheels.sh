#!/usr/bin/env bash
# On the GPU machine: join the parts stage_dsl_wheels.sh split, and install every wheel
# under SRC (its carry-N folders, brought over one per transfer) into TARGET (a folder to
# put on PYTHONPATH), without touching the image's packages.
#   scripts/install_dsl_wheels.sh SRC TARGET
#   PYTHONPATH=TARGET:src python -m pytest tests/test_gpu_dsls.py -s
# When the wheels come over in two transfers (one per call while the machine is warm),
# run this after the second: the parts of the first wait in SRC.
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
mapfile -t wheels < <(find "$src" -name '*.whl' | sort)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "no wheels in $src" >&2
  exit 1
fi
# --no-deps: the folder holds exactly what the image lacks; torch and numpy stay the image's.
"$python" -m pip install --no-deps --no-index --target "$target" "${wheels[@]}"
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$python" - <<'PY'
import importlib
for name in ("cutlass", "cutlass.cute", "tilelang"):
    try:
        module = importlib.import_module(name)
        print(f"{name}: {getattr(module, '__version__', 'ok')}")
    except Exception as exc:  # report each, so one broken install does not hide the other
        print(f"{name}: FAILED {type(exc).__name__}: {exc}")
PY
