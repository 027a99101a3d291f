#!/usr/bin/env bash
# The A/B of the candidates against main.
#   here:        bash benchmarks/candidates/ab.sh make   # out/v_main and out/v_<patch> for each patch
#   device run:  bash benchmarks/candidates/ab.sh run [STAGE...]   (carry: [".whl", "out/v_main", "out/v_<patch>"...])
# STAGEs, in the order given (default: tests warp-slab QUICK HOT_PATH FRAME): `warp-slab` the
# warp-slab counting tests on this checkout, QUICK / HOT_PATH / FRAME the copies in turns
# (benchmarks/variants.py, one results file each); any other is benchmarks/h200.sh's stage of
# that name on this checkout (`tests`: the GPU suite and the capture tests on real CUDA graphs;
# `pipeline`: the frame pipeline, every mode, 1080p and 4K). What finished comes back if the
# call's time runs out.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
case ${1:-} in
  make)
    cd "$here" && python3 benchmarks/variants.py make main
    for patch in benchmarks/candidates/*.patch; do
      name=$(basename "$patch" .patch); tree=$(mktemp -d)
      git worktree add -q --detach "$tree" HEAD && git -C "$tree" apply "$here/$patch" \
        && python3 benchmarks/variants.py make "$name" "$tree"
      git worktree remove --force "$tree"
    done
    find out/v_* -name __pycache__ -prune -exec rm -rf {} + ;;
  run)
    cd "$here"; shift
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    export PYTHONUNBUFFERED=1
    R=${OUT:-out}; nvidia-smi -L
    copies=$(ls -d out/v_main out/v_* | awk '!seen[$0]++')
    stages=${*:-tests warp-slab QUICK HOT_PATH FRAME}
    for stage in $stages; do
      echo "== $stage $(date -u +%T)"
      case $stage in
        warp-slab)
          PYTHONPATH=$PWD:/tmp/site timeout 80 python3 -m pytest -q -p no:cacheprovider -W default \
            --timeout=60 tests/test_warp_slab.py \
            -k "changing_size or counts_reach or usable_fraction or past_16" > "$R/warp-slab.log" 2>&1
          tail -3 "$R/warp-slab.log" ;;
        QUICK|HOT_PATH|FRAME)
          PYTHONPATH=/tmp/site env "VARIANT_$stage=1" timeout 150 python3 benchmarks/variants.py \
            run $copies 2>&1 | tail -4
          mv "$R/variants.json" "$R/variants-$stage.json" ;;
        *) OUT=$R/$stage bash benchmarks/h200.sh "$stage" ;;  # (its logs.txt in a folder of its own)
      esac
    done
    echo "== done $(date -u +%T)" ;;
  *) sed -n 2,10p "$0"; exit 2 ;;
esac
