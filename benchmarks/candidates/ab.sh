#!/usr/bin/env bash
# The A/B of the candidates against main.
#   here:        bash benchmarks/candidates/ab.sh make   # out/v_main and out/v_<patch> for each patch
#   device run:  bash benchmarks/candidates/ab.sh run    (carry: [".whl", "out/v_main", "out/v_<patch>"...])
# `run` takes the stages in order of need, so that what finished comes back if the call's
# time runs out: the GPU suite on this checkout, the warp-slab counting tests, then the
# copies in turns (VARIANT_QUICK, VARIANT_HOT_PATH, VARIANT_FRAME), one results file each.
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
    cd "$here"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
    R=${OUT:-out}; nvidia-smi -L
    echo "== gpu suite $(date -u +%T)"
    timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -W default --timeout=100 tests/ \
      > "$R/gpu-tests.log" 2>&1; tail -4 "$R/gpu-tests.log"
    echo "== warp-slab $(date -u +%T)"
    timeout 80 python3 -m pytest -q -p no:cacheprovider -W default --timeout=60 tests/test_warp_slab.py \
      -k "changing_size or counts_reach or usable_fraction or past_16" > "$R/warp-slab.log" 2>&1
    tail -3 "$R/warp-slab.log"
    export PYTHONPATH=/tmp/site
    copies=$(ls -d out/v_main out/v_* | awk '!seen[$0]++')
    for stage in QUICK HOT_PATH FRAME; do
      echo "== $stage $(date -u +%T)"
      env "VARIANT_$stage=1" timeout 150 python3 benchmarks/variants.py run $copies 2>&1 | tail -4
      mv "$R/variants.json" "$R/variants-$stage.json"
    done
    echo "== done $(date -u +%T)" ;;
  *) sed -n 2,7p "$0"; exit 2 ;;
esac
