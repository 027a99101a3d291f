#!/usr/bin/env bash
# The A/B of the candidates against main.
#   here:        bash benchmarks/candidates/ab.sh make   # out/v_main and out/v_<patch> for each patch
#   device run:  bash benchmarks/candidates/ab.sh run [STAGE...]   (carry: [".whl", "out/v_main", "out/v_<patch>"...])
# STAGEs, in the order given (default: suite warp-slab QUICK HOT_PATH FRAME): `suite` the GPU
# suite on this checkout, `warp-slab` its warp-slab counting tests, QUICK / HOT_PATH / FRAME
# the copies in turns (benchmarks/variants.py, one results file each), `pipeline` the frame
# pipeline's graph modes in turns. What finished comes back if the call's time runs out.
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
    stages=${*:-suite warp-slab QUICK HOT_PATH FRAME}
    for stage in $stages; do
      echo "== $stage $(date -u +%T)"
      case $stage in
        suite)
          PYTHONPATH=$PWD:/tmp/site timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
            -W default --timeout=100 tests/ > "$R/gpu-tests.log" 2>&1; tail -4 "$R/gpu-tests.log" ;;
        warp-slab)
          PYTHONPATH=$PWD:/tmp/site timeout 80 python3 -m pytest -q -p no:cacheprovider -W default \
            --timeout=60 tests/test_warp_slab.py \
            -k "changing_size or counts_reach or usable_fraction or past_16" > "$R/warp-slab.log" 2>&1
          tail -3 "$R/warp-slab.log" ;;
        QUICK|HOT_PATH|FRAME)
          PYTHONPATH=/tmp/site env "VARIANT_$stage=1" timeout 150 python3 benchmarks/variants.py \
            run $copies 2>&1 | tail -4
          mv "$R/variants.json" "$R/variants-$stage.json" ;;
        pipeline)
          PYTHONPATH=$PWD:/tmp/site timeout 100 python3 examples/frame_pipeline.py --mode graph \
            --benchmark --frames 200 --out "$R/pipeline" 2>&1 | tail -15 ;;
        *) echo "unknown stage $stage"; exit 2 ;;
      esac
    done
    echo "== done $(date -u +%T)" ;;
  *) sed -n 2,8p "$0"; exit 2 ;;
esac
