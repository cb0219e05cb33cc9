#!/usr/bin/env bash
# The GPU acceptance check, one script for a CUDA machine (run from the repository root):
#   bash benchmarks/gpu_acceptance.sh            # results in ./gpu_acceptance/ (or $OUT)
# 1. the GPU, torch, CUDA and NCCL versions;
# 2. `ddpsim selfcheck --gpu` (NCCL on every GPU, gloo --device cuda, trace checks, the recorder
#    against torch's profiler on ResNet-50), beside it the record/minddp/sim tests with CUDA hidden;
# 3. recording overhead, interleaved (benchmarks/bench_gpu_overhead.py): ResNet-50 at batch 32 and 64,
#    and the transformer, with --parts (what Python grad hooks and a Python comm hook cost alone);
# 4. minddp against torch's DDP with comm hooks on NCCL (benchmarks/gpu_hook_equivalence.py), and what
#    a recording measured a hook would cost on the GPU (meta.hook_rates of the ResNet-50 run);
# 5. the record/minddp/sim tests with CUDA visible (beside step 4: neither is timed).
# Each step has a time limit (seconds, below) so that the whole run ends in about 7.5 minutes;
# a step stopped at its limit says so and the counts it reached are kept. $OUT gets 8 files (the
# device tool brings back at most 8): 7 logs and recordings.tgz, the selfcheck's recordings (the
# profiler truth's recording too, without its large profile).
set -u
OUT=${OUT:-$PWD/gpu_acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
TESTS="tests/test_record_*.py tests/test_minddp_*.py tests/test_sim_*.py"
WORKERS=${WORKERS:-8}  # pytest-xdist workers per test run (two runs share the CPUs in step 2)
quiet() { grep -v -e '^USDT' -e '_warn_once' -e 'acc_events=True'; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import torch, sys; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| CUDA', torch.version.cuda, '| NCCL', '.'.join(map(str, torch.cuda.nccl.version())),
'|', torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0))"; } 2>&1 | tee "$OUT/env.txt"

echo "== selfcheck --gpu, and the tests with CUDA hidden beside it"
( CUDA_VISIBLE_DEVICES= timeout -s INT 180 $PY -m pytest -q -n "$WORKERS" --dist load $TESTS \
    > "$OUT/tests_cuda_hidden.txt" 2>&1; echo "exit $?" >> "$OUT/tests_cuda_hidden.txt" ) &
hidden=$!
timeout 180 $PY -m ddpsim selfcheck --gpu --out /tmp/selfcheck 2>&1 | quiet | tee "$OUT/selfcheck.txt"
tar czf "$OUT/recordings.tgz" --exclude='selfcheck/truth/profile_rank*' -C /tmp selfcheck 2>/dev/null
for f in /tmp/selfcheck/nccl_resnet50_x*.json; do  # what a comm hook would cost on this GPU (record/hookprobe.py)
  $PY -c "import json, sys; print(sys.argv[1].split('/')[-1], 'meta.hook_rates', json.load(open(sys.argv[1]))['meta'].get('hook_rates'))" "$f"
done 2>&1 | tee "$OUT/hook_rates.txt"
wait $hidden
tail -n 4 "$OUT/tests_cuda_hidden.txt"

echo "== recording overhead, interleaved"
for m in "ddpsim.models.resnet:resnet50 --parts" "ddpsim.models.resnet:resnet50 --batch-size 64" "transformer --parts"; do
  timeout 40 $PY benchmarks/bench_gpu_overhead.py --model $m --pairs 30 2>&1 | quiet | grep -e "recorded/plain" -e "plain with" \
    || echo "$m: no result (failed, or stopped at its 40 s limit)"
done | tee "$OUT/overhead.txt"

echo "== minddp against torch's DDP with comm hooks on NCCL, and the tests with CUDA visible beside it"
( timeout -s INT 150 $PY -m pytest -q -n 12 --dist load $TESTS > "$OUT/tests_cuda_visible.txt" 2>&1
  echo "exit $?" >> "$OUT/tests_cuda_visible.txt" ) &
visible=$!
timeout 100 $PY benchmarks/gpu_hook_equivalence.py 2>&1 | quiet | grep "^|" | tee "$OUT/hook_equivalence.txt"
wait $visible
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests_cuda_visible.txt" | tail -n 12
