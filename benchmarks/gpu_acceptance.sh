#!/usr/bin/env bash
# The GPU acceptance check, one script for a CUDA machine (run from the repository root):
#   bash benchmarks/gpu_acceptance.sh            # results in ./gpu_acceptance/ (or $OUT)
# 1. the GPU, torch, CUDA and NCCL versions;
# 2. `ddpsim selfcheck --gpu` (NCCL on every GPU, gloo --device cuda, trace checks, the recorder
#    against torch's profiler on ResNet-50), beside it the record/minddp/sim tests with CUDA hidden;
# 3. recording overhead, interleaved (benchmarks/bench_gpu_overhead.py): ResNet-50 at batch 32 and 64,
#    and the transformer;
# 4. minddp against torch's DDP with comm hooks on NCCL (benchmarks/gpu_hook_equivalence.py), and what
#    a recording measured a hook would cost on the GPU (meta.hook_rates of the ResNet-50 run);
# 5. the record/minddp/sim tests with CUDA visible.
# Each step has a time limit (seconds, below) so that the whole run ends in about 8 minutes;
# a step stopped at its limit says so and the counts it reached are kept.
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
( CUDA_VISIBLE_DEVICES= timeout -s INT 200 $PY -m pytest -q -n "$WORKERS" $TESTS \
    > "$OUT/tests_cuda_hidden.txt" 2>&1; echo "exit $?" >> "$OUT/tests_cuda_hidden.txt" ) &
hidden=$!
timeout 200 $PY -m ddpsim selfcheck --gpu --out /tmp/selfcheck 2>&1 | quiet | tee "$OUT/selfcheck.txt"
cp /tmp/selfcheck/nccl_resnet50_x*.json /tmp/selfcheck/nccl_transformer_x*.json "$OUT/" 2>/dev/null
for f in "$OUT"/nccl_resnet50_x*.json; do  # what a comm hook would cost on this GPU (record/hookprobe.py)
  $PY -c "import json, sys; print(sys.argv[1].split('/')[-1], 'meta.hook_rates', json.load(open(sys.argv[1]))['meta'].get('hook_rates'))" "$f"
done 2>&1 | tee "$OUT/hook_rates.txt"
wait $hidden
tail -n 4 "$OUT/tests_cuda_hidden.txt"

echo "== recording overhead, interleaved"
for m in "ddpsim.models.resnet:resnet50" "ddpsim.models.resnet:resnet50 --batch-size 64" transformer; do
  timeout 45 $PY benchmarks/bench_gpu_overhead.py --model $m --pairs 40 2>&1 | quiet | tail -n 3
done | tee "$OUT/overhead.txt"

echo "== minddp against torch's DDP with comm hooks on NCCL"
timeout 90 $PY benchmarks/gpu_hook_equivalence.py 2>&1 | quiet | grep "^|" | tee "$OUT/hook_equivalence.txt"

echo "== the tests with CUDA visible"
timeout -s INT 130 $PY -m pytest -q -n 14 $TESTS > "$OUT/tests_cuda_visible.txt" 2>&1
echo "exit $?" >> "$OUT/tests_cuda_visible.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests_cuda_visible.txt" | tail -n 12
