#!/usr/bin/env bash
# Tessera's JIT tiers against XLA:CPU on the benchmark workloads (the ones benches/tiers.rs
# measures): execution medians from `tessera run --time` and `xla_run.py --time`, which both
# time executions only, on the same argument files.
#
# usage: benches/compare_xla.sh [RUNS]      (from the repo root, after `cargo build --release`)
#
# The tiers and XLA are timed alternately, round by round, so a machine whose load changes
# during the script slows all of them alike; each cell is the median over rounds of each
# round's median. Needs python3 with jax (TOOLCHAIN.md) and the shared corpus at
# $TESSERA_SHARED (default ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-20}"
rounds=3
shared="${TESSERA_SHARED:-../shared}"
tessera="${CARGO_TARGET_DIR:-target}/release/tessera"
[ -x "$tessera" ] || { echo "error: $tessera is missing; run cargo build --release --bin tessera" >&2; exit 1; }
[ -d "$shared/corpus" ] || { echo "error: no corpus at $shared/corpus (set TESSERA_SHARED)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# name|module|argument folder
workloads=()
for case in bench_elementwise_16m bench_softmax_4096 bench_matmul_1024; do
    echo "==> arguments for $case" >&2
    python3 "$shared/corpus/make_args.py" "$shared/corpus/$case" --out "$work/$case" >/dev/null
    workloads+=("${case#bench_}|$shared/corpus/$case/module.hlo|$work/$case")
done
echo "==> arguments for relayout_tiled_4096" >&2
mkdir -p "$work/relayout"
python3 -c '
import sys, numpy as np
np.save(sys.argv[1], np.random.default_rng(4096).uniform(-1, 1, (4096, 4096)).astype(np.float32))
' "$work/relayout/0.npy"
workloads+=("relayout_tiled_4096|benches/modules/relayout_tiled_4096.hlo|$work/relayout")

# One JSON key of one line, or "error".
key() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2" 2>/dev/null || echo error; }

median() { python3 -c '
import statistics, sys
v = [float(x) for x in sys.argv[1:] if x != "error"]
print(f"{statistics.median(v):.0f}" if v else "error")
' "$@"; }

rows=()
for w in "${workloads[@]}"; do
    IFS='|' read -r name module args <<<"$w"
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
    ratio="$(python3 -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")
except (ValueError, ZeroDivisionError): print("-")' "$ll" "$xla")"
    fmt() { python3 -c 'import sys
try: print(f"{float(sys.argv[1]):.0f}")
except ValueError: print("error")' "$1"; }
    rows+=("$name|$xla|$cl|$ll|$ratio|$(fmt "${compile[cranelift]}")|$(fmt "${compile[llvm]}")")
    unset times compile
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, $runs runs x $rounds rounds per cell"
python3 - "${rows[@]}" <<'EOF'
import sys
header = ["workload", "XLA:CPU median us", "cranelift median us", "llvm median us", "llvm/XLA",
          "cranelift compile us", "llvm compile us"]
rows = [r.split("|") for r in sys.argv[1:]]
widths = [max(len(x) for x in col) for col in zip(header, *rows)]
def line(cells):
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
print(line(header))
print("  ".join("-" * w for w in widths))
for r in rows:
    print(line(r))
EOF
