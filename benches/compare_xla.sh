#!/usr/bin/env bash
# Tessera's JIT tiers against XLA:CPU on the benchmark workloads: execution medians from
# `tessera run --time` and `xla_run.py --time`, which both time executions only, on the same
# argument files; for memory-bound workloads, the bandwidth the LLVM tier reaches as a share of
# this machine's STREAM bandwidth (../shared/tools/stream.sh, measured at the start).
#
# usage: benches/compare_xla.sh [RUNS] [WORKLOAD ...]   (from the repo root, after
#        `cargo build --release`; with workload names, only those)
#
# The tiers and XLA are timed alternately, round by round, so a machine whose load changes
# during the script slows all of them alike; each cell is the median over rounds of each
# round's median. Ratios are XLA's time over the tier's (above 1: the tier is faster). Needs
# python3 with jax and ml_dtypes (TOOLCHAIN.md), gcc with OpenMP for STREAM, and the shared
# corpus at $TESSERA_SHARED (default ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-20}"
shift || true
only=("$@")
rounds=3
shared="${TESSERA_SHARED:-../shared}"
tessera="${CARGO_TARGET_DIR:-target}/release/tessera"
[ -x "$tessera" ] || { echo "error: $tessera is missing; run cargo build --release --bin tessera" >&2; exit 1; }
[ -d "$shared/corpus" ] || { echo "error: no corpus at $shared/corpus (set TESSERA_SHARED)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

wanted() {
    ((${#only[@]} == 0)) && return 0
    local w
    for w in "${only[@]}"; do [ "$w" = "$1" ] && return 0; done
    return 1
}

echo "==> STREAM bandwidth ($(nproc) threads)" >&2
stream="$(bash "$shared/tools/stream.sh")"
echo "    $stream" >&2

# name|module|argument folder|memory-bound (1 or 0)
workloads=()
for case in bench_elementwise_16m bench_reduce_sum_64m bench_softmax_4096 bench_layernorm_8192x1024 \
    bench_transpose_4096 bench_matmul_1024; do
    wanted "${case#bench_}" || continue
    echo "==> arguments for $case" >&2
    python3 "$shared/corpus/make_args.py" "$shared/corpus/$case" --out "$work/$case" >/dev/null
    bound=1
    [ "$case" = bench_matmul_1024 ] && bound=0
    workloads+=("${case#bench_}|$shared/corpus/$case/module.hlo|$work/$case|$bound")
done
# Modules of benches/modules/ with one f32[4096,4096] argument, uniform in [-1, 1).
square_workload() { # name, argument folder, seed
    wanted "$1" || return 0
    echo "==> arguments for $1" >&2
    mkdir -p "$work/$2"
    python3 -c '
import sys, numpy as np
np.save(sys.argv[1], np.random.default_rng(int(sys.argv[2])).uniform(-1, 1, (4096, 4096)).astype(np.float32))
' "$work/$2/0.npy" "$3"
    workloads+=("$1|benches/modules/$1.hlo|$work/$2|1")
}
square_workload relayout_tiled_4096 relayout 4096
# bench_transpose_4096's result layout makes it a copy in memory; this one moves every element.
square_workload transpose_rows_4096 transpose_rows 4097
if wanted argmax_64x65536; then
    echo "==> arguments for argmax_64x65536" >&2
    mkdir -p "$work/argmax"
    python3 -c '
import sys, numpy as np
np.save(sys.argv[1], np.random.default_rng(64).standard_normal((64, 65536)).astype(np.float32))
' "$work/argmax/0.npy"
    workloads+=("argmax_64x65536|benches/modules/argmax_64x65536.hlo|$work/argmax|1")
fi
if wanted f16_fma_4096x1024; then
    echo "==> arguments for f16_fma_4096x1024" >&2
    mkdir -p "$work/f16_fma"
    python3 -c '
import sys, numpy as np
rng = np.random.default_rng(16)
for i in range(3):
    np.save(f"{sys.argv[1]}/{i}.npy", rng.uniform(-2, 2, (4096, 1024)).astype(np.float16))
' "$work/f16_fma"
    workloads+=("f16_fma_4096x1024|benches/modules/f16_fma_4096x1024.hlo|$work/f16_fma|1")
fi
# bf16 modules written with JAX (benches/modules/README.md): arguments uniform in [-1, 1) (the
# layer norm's scale in [0.5, 1.5)), stored as raw bf16 bits.
for name in bf16_row_sum_4096x1024 bf16_row_mean_4096x1024 bf16_layernorm_4096x768; do
    wanted "$name" || continue
    echo "==> arguments for $name" >&2
    python3 - "$work/$name" "$name" <<'EOF'
import os, sys, numpy as np, ml_dtypes
out, name = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(11)
if name.startswith("bf16_layernorm"):
    arrays = [rng.uniform(-1, 1, (1, 4096, 768)), rng.uniform(0.5, 1.5, (768,)), rng.uniform(-0.1, 0.1, (768,))]
else:
    arrays = [rng.uniform(-1, 1, (1, 4096, 1024))]
for i, a in enumerate(arrays):
    np.save(f"{out}/{i}.npy", a.astype(ml_dtypes.bfloat16).view(np.uint16))
EOF
    workloads+=("$name|benches/modules/$name.hlo|$work/$name|1")
done

# One JSON key of one line, or "error".
key() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2" 2>/dev/null || echo error; }

median() { python3 -c '
import statistics, sys
v = [float(x) for x in sys.argv[1:] if x != "error"]
print(f"{statistics.median(v):.0f}" if v else "error")
' "$@"; }

# Bytes a run must move at least: every argument read once, every result written once (the
# .npy payloads; headers are a few hundred bytes).
bytes_moved() {
    local module="$1" args="$2" out="$work/out"
    rm -rf "$out"
    "$tessera" run "$module" --args "$args" --out "$out" --backend cranelift >/dev/null 2>&1 || { echo 0; return; }
    python3 -c '
import glob, sys, numpy as np
print(sum(np.load(f, mmap_mode="r").nbytes for d in sys.argv[1:] for f in glob.glob(d + "/*.npy")))
' "$args" "$out"
}

rows=()
for w in "${workloads[@]}"; do
    IFS='|' read -r name module args bound <<<"$w"
    declare -A times=() compile=()
    for ((r = 1; r <= rounds; r++)); do
        echo "==> $name: round $r/$rounds" >&2
        for tier in cranelift llvm; do
            line="$("$tessera" run "$module" --args "$args" --time "$runs" --backend "$tier" 2>"$work/err")" ||
                { sed 's/^/    /' "$work/err" >&2; line=""; }
            times[$tier]+=" $(key "$line" median_us)"
            compile[$tier]="$(key "$line" compile_us)"
        done
        line="$(python3 "$shared/tools/xla_run.py" "$module" --args "$args" --time "$runs" 2>"$work/err")" ||
            { sed 's/^/    /' "$work/err" >&2; line=""; }
        times[xla]+=" $(key "$line" median_us)"
    done
    # shellcheck disable=SC2086
    xla="$(median ${times[xla]})" cl="$(median ${times[cranelift]})" ll="$(median ${times[llvm]})"
    bytes=0
    [ "$bound" = 1 ] && bytes="$(bytes_moved "$module" "$args")"
    row="$(python3 - "$name" "$xla" "$cl" "$ll" "$bytes" "${compile[cranelift]}" "${compile[llvm]}" "$stream" <<'EOF'
import json, sys
name, xla, cl, ll, nbytes, ccl, cll, stream = sys.argv[1:]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
xla, cl, ll, ccl, cll, nbytes = map(num, (xla, cl, ll, ccl, cll, nbytes))
s = json.loads(stream)
def us(x):
    return f"{x:.0f}" if x else "error"
def ratio(t):
    return f"{xla / t:.2f}x" if xla and t else "-"
if nbytes and ll:
    gbs = nbytes / (ll * 1e-6) / 1e9
    bw = f"{gbs:.1f}|{100 * gbs / s['triad_gbs']:.0f}%|{100 * gbs / s['read_gbs']:.0f}%"
else:
    bw = "-|-|-"
print("|".join([name, us(xla), us(cl), us(ll), ratio(cl), ratio(ll), bw, us(ccl), us(cll)]))
EOF
)"
    rows+=("$row")
    unset times compile
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, $runs runs x $rounds rounds per cell"
echo "STREAM: $stream"
python3 - "${rows[@]}" <<'EOF'
import sys
header = ["workload", "XLA:CPU us", "cranelift us", "llvm us", "XLA/cranelift", "XLA/llvm",
          "llvm GB/s", "of triad", "of read", "cranelift compile us", "llvm compile us"]
rows = [r.split("|") for r in sys.argv[1:]]
widths = [max(len(x) for x in col) for col in zip(header, *rows)]
def line(cells):
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
print(line(header))
print("  ".join("-" * w for w in widths))
for r in rows:
    print(line(r))
EOF
