#!/usr/bin/env bash
# The next GPU session's checks, in THREE device calls on one H200 (each <= 590 s wall):
#
#   bash bench/next_session.sh                # part 1: validation, first half of the GPU test suite
#   bash bench/next_session.sh --part 2       # part 2: the suite's second half, fuzz, sanitizer
#   bash bench/next_session.sh --part 3       # part 3: bench, experiment
#   bash bench/next_session.sh --dry-run [--part N]   # print the commands and their time caps, run nothing
#
# Run the parts back to back while the machine is warm (each fresh start costs ~35 s of device time;
# stop 30 ran them in 300 s, 313 s and 62 s without the kernel list; with it parts 1-2 should be shorter).
#
# The whole `pytest -m gpu` suite (~1800 tests, ~800 s in stop 29: the focus
# files ~195 s, test_gemm_full_gpu + test_gemm_gpu ~310 s, test_sass_gpu ~215 s
# before its disassembly cache) no longer fits one call (stop 29's part 1 hit
# both pytest caps), hence three parts: parts 1 and 2 together run the whole
# suite once, part 3 the bench and the session's experiment.
# Steps, in order (each under `timeout`; a failing or timed-out step does not
# stop the next one):
#   every part
#   0 env        versions, GPU, whether torch imports (a previous session saw
#                `import torch` raise RuntimeError on that machine)
#   1 warmup     python -m rawcoop warmup --all --quiet   (fills the kernel cache
#                the later steps use; the pytest steps set RAWCOOP_TEST_KEEP_CACHE=1 for it)
#   part 1
#   2 focus      the regression and new-feature GPU tests: test_narrow_box_gpu, test_misaligned_pitch_gpu, test_streamk_gpu, test_one_row_gpu, test_tune_gpu,
#                test_regressions_gpu, test_fp8_tf32_gpu, test_fp8_block_gpu, test_pingpong_gpu, test_cluster_gpu
#   3 suite-a    the two big end-to-end files: test_gemm_full_gpu, test_gemm_gpu
#   4 kernels    python -m rawcoop cache export gpu_kernels.json: every configuration the cache now holds
#                (commit it as tests/gpu_kernels.json: the warm-up step then compiles it up front)
#   part 2
#   2 suite-b    python -m pytest -m gpu ... over the REST of tests/ (the files of part 1 are
#                --ignore'd: parts 1 and 2 together are the full GPU suite, each file run once)
#   3 fuzz       python bench/fuzz.py --count 1500 --seed 7 --log fuzz_cases.jsonl (progress lines; the log
#                shows the last case run if the step hits its cap)
#   4 kernels    as in part 1 (now with part 2's configurations too, on a machine still warm from part 1)
#   5 sanitize   python bench/sanitize.py --quick --tools memcheck,racecheck,synccheck ...
#   part 3
#   2 bench      python -m rawcoop bench --suite main,fp8,tf32,small_m --dtype bfloat16,float16 ...;
#                bench/host_overhead.py (host us/call incl. fp8 and torch._scaled_mm; --profile: cProfile of
#                the repeated-call path, stop 17 measured 25.8 us vs cupy.matmul 17.6); the short fp8 and
#                small-M rows again with --timing batch (kernels back to back: not host-bound)
#   3 experiment see the comment at the step
#
# Time: each step has a cap (CAPS below, within BUDGET with 3 s of kill grace
# per step).  A step may also use what earlier steps left unused: its timeout is
# BUDGET - elapsed - (caps of the later steps) - grace, so the later steps keep
# their caps and the whole stays under BUDGET (590 s; NEXT_SESSION_BUDGET
# overrides, and must cover the caps plus grace: a smaller one is refused).  Output: every step's log as $OUT/NN_name.log, summary.txt, and
# bench.json, bench.png, san.json, san_logs/ from the steps themselves; the last
# lines printed are the summary (the device tool returns the output's tail).
# With $OUT set (the device tool, which returns at most 8 files) everything but
# summary.txt is packed into results.tgz at the end.
set -u

DRY=0
PART=1
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run|-n) DRY=1 ;;
        --part)
            case "${2:-}" in
                1|2|3) PART=$2; shift ;;
                *) echo "next_session.sh: --part takes 1, 2 or 3" >&2; exit 2 ;;
            esac ;;
        -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "next_session.sh: unknown argument '$1' (use --dry-run, --part 1|2|3 or nothing)" >&2; exit 2 ;;
    esac
    shift
done

OUTDIR="${OUT:-next_session_out}"
OUTDIR="${OUTDIR#./}"
case "$OUTDIR" in /*) ;; *) OUTDIR="$PWD/$OUTDIR" ;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if command -v python3 >/dev/null 2>&1; then PY=python3; else PY=python; fi   # the H200 image: python3 holds torch
fi
BUDGET="${NEXT_SESSION_BUDGET:-590}"
GRACE=3

# pytest's per-test --timeout needs pytest-timeout; without it the option would
# make pytest exit 4 before running anything.
PT_TIMEOUT="--timeout 150"
if [ "$DRY" = 0 ] && ! "$PY" -c "import pytest_timeout" >/dev/null 2>&1; then
    PT_TIMEOUT=""
    echo "note: pytest-timeout is not installed: the pytest steps run without --timeout 150 (step caps still apply)"
fi
PYTEST_OPTS="-q -ra $PT_TIMEOUT -p no:cacheprovider --durations=15"   # the slowest tests: where the suite's ~800 s go
SUITE_A="tests/test_gemm_full_gpu.py tests/test_gemm_gpu.py"
FOCUS="tests/test_narrow_box_gpu.py tests/test_misaligned_pitch_gpu.py tests/test_streamk_gpu.py tests/test_one_row_gpu.py tests/test_tune_gpu.py tests/test_regressions_gpu.py tests/test_fp8_tf32_gpu.py tests/test_fp8_block_gpu.py tests/test_pingpong_gpu.py tests/test_cluster_gpu.py"
IGNORE=""
for f in $FOCUS $SUITE_A; do IGNORE="$IGNORE --ignore=$f"; done
Q_OUT="$(printf '%q' "$OUTDIR")"

NAMES=()
CAPS=()
CMDS=()
add() { NAMES+=("$1"); CAPS+=("$2"); CMDS+=("$3"); }

add env 10 "nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; \
$PY -m rawcoop info; \
$PY -c 'import sys
try:
    import torch
    print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available(),
          \"_scaled_mm\", hasattr(torch, \"_scaled_mm\"))
except Exception as e:
    print(\"import torch FAILED:\", type(e).__name__, e)'; \
$PY -c 'import cupy; print(\"cupy\", cupy.__version__)'"
# tests/gpu_kernels.json (committed in stop 30: the `kernels` step's export after part 2, 988
# configurations) lists what the GPU tests compile beyond `--all`; warming it here compiles it on every
# CPU at once instead of one kernel at a time inside pytest.  Stop 30 on the H200: the list's 736 extra
# kernels in 39.7 s, after which test_gemm_full_gpu + test_gemm_gpu took 50 s instead of 127 s.  Parts 1
# and 2 warm it (cap 65 s: --all ~13 s + the list ~40 s); part 3 runs the bench and rule_ab, whose
# kernels --all covers, and warms --all only.
if [ "$PART" = 3 ]; then
add warmup 15 "$PY -m rawcoop warmup --all --quiet"
else
# Stop 32: warm-up with the 988-kernel list took 55-57 s; the list now holds 1257 (cap 65 -> 80, suite-a
# took 49-73 s of its 290 -> 275).
add warmup 80 "$PY -m rawcoop warmup --all --quiet; \
if [ -f tests/gpu_kernels.json ]; then $PY -m rawcoop warmup --from tests/gpu_kernels.json --quiet; fi"
fi
# pytest uses the cache warm-up just filled (RAWCOOP_TEST_KEEP_CACHE=1): with a private cache every
# pytest process compiles every kernel again, which pushed the suite past its cap (2026-11-30).
# The two pytest steps took 130 s + 174 s in stop 12 (the focus step's old 110 s cap fired right after
# its summary line) and did not finish in 277 s on a slower instance in stop 11 (warm-up 13.9 s instead
# of 6 s), hence the caps (focus 124 s and the rest 199 s in stop 15: focus 140 leaves the experiment 95);
# fuzz runs 1500 cases (2000 took 38-51 s).
if [ "$PART" = 1 ]; then
# The focus files took 134 s and the rest of the suite did not finish in 218 s in stop 16's first call
# (~480 of its 652 tests; the other ~170, test_sass_gpu's included, took 114 s in the next call).
# Stop 17: focus 134 s after warm-up (cap 150), then 12 more cluster tests; the rest 235 s (cap 385).
# Stop 29: focus ~195 s (500 tests; 498 done at its 190 s cap); test_gemm_full_gpu + test_gemm_gpu with
# the small files before test_sass_gpu ~310 s (389 tests).  Stop 30 (no kernel list): focus 142 s (499
# tests), suite-a 127 s; with the list warmed, suite-a 50 s.
add focus 200 "RAWCOOP_TEST_KEEP_CACHE=1 $PY -m pytest $FOCUS $PYTEST_OPTS"
add suite-a 275 "RAWCOOP_TEST_KEEP_CACHE=1 $PY -m pytest -m gpu $SUITE_A $PYTEST_OPTS"
add kernels 5 "$PY -m rawcoop cache export $Q_OUT/gpu_kernels.json"
elif [ "$PART" = 2 ]; then
# Stop 29: test_sass_gpu + test_tile_copy_gpu + test_watchdog 225 s (disassembling each kernel twice: now
# once), test_splitk/streams/swap_waves/tall 48 s, the small files ~20 s.  The fuzz compiles most of its
# ~190 configurations itself (stop 29: 189 cases in 60 s cold, 1500 in 38 s warm), hence its 100 s.
# Stop 30 (no kernel list): suite-b 237 s (949 tests), fuzz 38 s, sanitizer 22 s.
add suite-b 300 "RAWCOOP_TEST_KEEP_CACHE=1 $PY -m pytest -m gpu $PYTEST_OPTS$IGNORE"
add fuzz 100 "$PY bench/fuzz.py --count 1500 --seed 7 --log $Q_OUT/fuzz_cases.jsonl"
add kernels 5 "$PY -m rawcoop cache export $Q_OUT/gpu_kernels.json"
add sanitize 40 "$PY bench/sanitize.py --quick --tools memcheck,racecheck,synccheck --timeout 150 \
--json $Q_OUT/san.json --log-dir $Q_OUT/san_logs"
else
add bench 200 "$PY -m rawcoop bench --suite main,fp8,tf32,small_m --fp8-block --dtype bfloat16,float16 --rounds 5 --iters 20 \
--json $Q_OUT/bench.json --plot $Q_OUT/bench.png; $PY bench/host_overhead.py --json $Q_OUT/host.json --profile 2000; \
$PY -m rawcoop bench --suite fp8,small_m --fp8-shapes 128x8192x8192,4096x4096x4096 --timing batch --rounds 5 \
--iters 50 --json $Q_OUT/bench_batch.json"
# Experiment (prepared at the end of stop 41; bench/NOTES.md "Stop 41"):
# (a) surveys seed 46, bf16 and fp16 (GPU-bound rows; stop 41 seed 45: 1.012 / 1.012, misaligned rows 0.967 /
#     0.957; prediction >= 1.0 / >= 1.0).
# (b) oracles: bf16 NT random 24 (seed 55) and fp16 TN random 24 (seed 56): prediction best/auto <= 1.06 each.
# (c) MISALIGNED_PAIR_1X2_RATIO 0.9 -> 0.8 (stop 41: every 16-bit and e4m3 A/B case at ratio <= 0.8 ran faster, the losses
#     sat at 0.83-0.9; in sample, so a fresh draw decides): rule_cases seed 396 (16-bit, four layouts) and 397
#     (e4m3).  B/A > 1 means 0.8 (fewer 1x2 plans) faster; prediction: mixed (<= 10 of 16), i.e. keep 0.9.
P396="fp16:TN:2344x11888x952,bf16:NN:816x15896x1080,bf16:NT:632x14360x1296,bf16:NT:2640x5560x1408,\
bf16:TT:536x15480x1472,fp16:NN:840x13136x1592,bf16:TT:568x15464x2224,fp16:NN:840x13152x2376,fp16:NN:320x13968x2808,\
bf16:NT:1112x10816x2840,bf16:NN:576x16304x4440,bf16:TT:4112x3008x5560,bf16:NT:384x13752x6360,bf16:TT:592x16304x8280,\
bf16:TN:1392x11824x8696,fp16:NT:328x14672x11968"
P397="e4m3:TN:3704x4480x2128,e4m3:TN:4184x2408x2288,e4m3:TN:2312x6008x4560,e4m3:TN:1064x11136x4784,\
e4m3:TN:1336x7496x5040,e4m3:TN:808x13360x5104,e4m3:TN:1912x7640x5776,e4m3:TN:1328x7512x8144,e4m3:TN:2960x1592x8720,\
e4m3:TN:2160x8672x11344,e4m3:TN:1064x14728x12656,e4m3:TN:1368x11520x13808"
add experiment 300 "$PY bench/survey.py --dtype bfloat16 --seed 46 --json $Q_OUT/survey_bf16_s46.json; \
$PY bench/survey.py --dtype float16 --seed 46 --json $Q_OUT/survey_fp16_s46.json; \
$PY bench/oracle.py --dtype bfloat16 --layout NT --random 24 --seed 55 --rounds 5 --iters 10 --widths 160,176,208,224,240 \
--json $Q_OUT/oracle_bf16_nt_s55.json; \
$PY bench/oracle.py --dtype float16 --layout TN --random 24 --seed 56 --rounds 5 --iters 10 --widths 160,176,208,224,240 \
--json $Q_OUT/oracle_fp16_tn_s56.json; \
$PY bench/rule_ab.py --rule gemm_configs.MISALIGNED_PAIR_1X2_RATIO=0.9/0.8 --rounds 9 --iters 30 --cases $P396 \
--json $Q_OUT/ab_pair_1x2_08_s396.json; \
$PY bench/rule_ab.py --rule gemm_configs.MISALIGNED_PAIR_1X2_RATIO=0.9/0.8 --rounds 9 --iters 30 --cases $P397 \
--json $Q_OUT/ab_pair_1x2_08_s397.json"
fi

N=${#NAMES[@]}
total_caps=$GRACE
for c in "${CAPS[@]}"; do total_caps=$((total_caps + c + GRACE)); done
total_caps=$((total_caps - GRACE))
if [ "$total_caps" -gt "$BUDGET" ]; then
    # (stop 17: a budget below the caps silently skipped env and warm-up, and the tests then built
    # every kernel themselves and hit their caps)
    echo "next_session.sh: budget ${BUDGET}s is below the steps' caps plus grace (${total_caps}s):" \
         "raise NEXT_SESSION_BUDGET or lower the caps" >&2
    exit 2
fi
later_caps() {  # sum of the caps after step $1
    local i s=0
    for ((i = $1 + 1; i < N; i++)); do s=$((s + CAPS[i])); done
    echo "$s"
}

if [ "$DRY" = 1 ]; then
    echo "next_session.sh --dry-run: would run in $ROOT with PYTHONPATH=$PWD PYTHONUNBUFFERED=1, python '$PY',"
    echo "output under $OUTDIR, budget ${BUDGET}s (caps $(IFS=+; echo "${CAPS[*]}") s, +${GRACE}s grace each)"
    for ((i = 0; i < N; i++)); do
        printf '\n== [%d/%d] %s (cap %ss, at most %ss) ==\n' "$i" "$((N - 1))" "${NAMES[i]}" "${CAPS[i]}" \
            "$((BUDGET - $(later_caps "$i") - GRACE * (N - i)))"
        printf '%s\n' "${CMDS[i]}"
    done
    exit 0
fi

mkdir -p "$OUTDIR" || exit 2
SUMMARY=()
FAILED=0
for ((i = 0; i < N; i++)); do
    name=${NAMES[i]}
    log="$OUTDIR/$(printf '%02d' "$i")_$name.log"
    t=$((BUDGET - SECONDS - $(later_caps "$i") - GRACE * (N - i)))
    printf '\n========== [%d/%d] %s  (t=%ds, timeout %ds) ==========\n' "$i" "$((N - 1))" "$name" "$SECONDS" "$t"
    printf '%s\n' "${CMDS[i]}"
    if [ "$t" -lt 5 ]; then
        SUMMARY+=("$(printf '%-10s %-26s %5s s' "$name" "SKIPPED (no time left)" 0)")
        FAILED=1
        continue
    fi
    start=$SECONDS
    timeout -k "$GRACE" "$t" bash -c "${CMDS[i]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$((SECONDS - start))
    if [ "$rc" = 0 ]; then
        status="ok"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="TIMEOUT (${t}s)"
        FAILED=1
    else
        status="FAILED (rc $rc)"
        FAILED=1
    fi
    SUMMARY+=("$(printf '%-10s %-26s %5s s' "$name" "$status" "$secs")")
done

{
    echo
    echo "========== details (full logs in $OUTDIR) =========="
    for ((i = 0; i < N; i++)); do
        f="$OUTDIR/$(printf '%02d' "$i")_${NAMES[i]}.log"
        [ -f "$f" ] || continue
        case "${NAMES[i]}" in
            experiment)
                echo "--- experiment:"
                grep -E '^\{"kind"|^\| (bf16|fp16|e4m3|tf32) |^(variant|auto|block_n|cluster|cuBLAS|cuBLASLt) |^[0-9]+ shapes: |^worst:|^  +[0-9]+x[0-9]+x[0-9]+ |^(bf16|fp16|e4m3|tf32):|^B/A |^rule_ab ' "$f" | head -n 110 ;;
            bench)
                echo "--- bench report:"
                if grep -qE '^(main|fp8|tf32):$' "$f"; then
                    awk '/^(main|fp8|tf32):$/{p=1} p' "$f" | tail -n 70
                else
                    tail -n 30 "$f"
                fi ;;
            env) echo "--- env:"; grep -E '^(torch|import torch|cupy|NVIDIA|name)' "$f" | head -n 6 ;;
            fuzz) echo "--- fuzz (last lines):"; tail -n 6 "$f" ;;
            kernels) echo "--- kernels: $(tail -n 1 "$f")" ;;
            sanitize) echo "--- sanitize (last lines):"; tail -n 8 "$f" ;;
            focus|suite-a|suite-b)
                echo "--- ${NAMES[i]}: $(grep -E '[0-9]+ (passed|failed|skipped|errors?|deselected).* in [0-9.]+s' "$f" | tail -n 1)"
                grep -E '^(FAILED|ERROR) ' "$f" | head -n 20 ;;
        esac
    done
    echo
    echo "========== summary (${SECONDS}s of ${BUDGET}s; logs in $OUTDIR) =========="
    printf '%s\n' "${SUMMARY[@]}"
} | tee "$OUTDIR/summary.txt"
if [ -n "${OUT:-}" ]; then
    (cd "$OUTDIR" && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name results.tgz -printf '%P\n' \
        | tar -czf results.tgz -T - && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name results.tgz \
        -exec rm -rf {} +)
fi
exit "$FAILED"
