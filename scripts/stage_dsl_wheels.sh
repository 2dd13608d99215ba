#!/usr/bin/env bash
# Download the CuTeDSL and TileLang wheels, and the needs a GPU image with torch, numpy and
# CuPy usually lacks, for Python 3.12 on x86-64 Linux; split any file over PART_MIB
# (default 60) MiB into <file>.part-NN, and pack the pieces into DEST/carry-1, carry-2, ...
# of at most PART_MIB MiB each: one folder per transfer to the GPU machine.
#   scripts/stage_dsl_wheels.sh DEST
#   CUTEDSL_VERSION=4.8.1 TILELANG_VERSION=0.1.15 PART_MIB=60 scripts/stage_dsl_wheels.sh DEST
# Then on the GPU machine: scripts/install_dsl_wheels.sh DEST TARGET
set -euo pipefail

dest=${1:?usage: stage_dsl_wheels.sh DEST}
cutedsl=${CUTEDSL_VERSION:-4.8.1}
tilelang=${TILELANG_VERSION:-0.1.15}
part_mib=${PART_MIB:-60}
python=${PYTHON:-python3}
mkdir -p "$dest"

# nvidia-cutlass-dsl is a small wheel over three: libs-core (the `cutlass` Python package),
# libs-base and libs-cu12 (the CUDA 12 one here; swap in libs-cu13 for a CUDA 13 torch). TileLang's needs, less torch, numpy
# and typing-extensions, which the image has.
packages=(
  "nvidia-cutlass-dsl==$cutedsl"
  "nvidia-cutlass-dsl-libs-base==$cutedsl"
  "nvidia-cutlass-dsl-libs-core==$cutedsl"
  "nvidia-cutlass-dsl-libs-cu12==$cutedsl"
  "tilelang==$tilelang"
  "apache-tvm-ffi>=0.1.11,<0.1.13"
  "torch-c-dlpack-ext"
  "z3-solver>=4.13.0,<4.15.5"
  "cloudpickle"
  "ml-dtypes>=0.5.1"
  "psutil"
  "tqdm>=4.62.3"
)
"$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
  -d "$dest" "${packages[@]}"

limit=$((part_mib * 1024 * 1024))
for wheel in "$dest"/*.whl; do
  size=$(stat -c %s "$wheel")
  if [ "$size" -gt "$limit" ]; then
    split -b "${part_mib}m" -d -a 2 "$wheel" "$wheel.part-"
    rm "$wheel"
    echo "split $(basename "$wheel") ($((size / 1048576)) MiB) into $(ls "$wheel".part-* | wc -l) parts"
  fi
done
# First fit, largest first: each carry-N folder stays within the limit.
"$python" - "$dest" "$limit" <<'PY'
import sys
from pathlib import Path

dest, limit = Path(sys.argv[1]), int(sys.argv[2])
files = sorted((p for p in dest.iterdir() if p.is_file()), key=lambda p: -p.stat().st_size)
carries: list[list] = []
for file in files:
    size = file.stat().st_size
    home = next((c for c in carries if c[0] + size <= limit), None)
    if home is None:
        home = [0, []]
        carries.append(home)
    home[0] += size
    home[1].append(file)
for number, (size, members) in enumerate(carries, 1):
    folder = dest / f"carry-{number}"
    folder.mkdir(exist_ok=True)
    for file in members:
        file.rename(folder / file.name)
    print(f"{folder.name}: {size / 2**20:.1f} MiB, {len(members)} file(s)")
PY
du -sh "$dest"
