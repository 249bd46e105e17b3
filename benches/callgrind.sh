#!/usr/bin/env bash
# Instructions and allocations per message of the runtime benchmark
# (benches/src/bin/runtime.rs), under callgrind.
#
# Each path runs twice, for N1 and N2 messages, with `--only` (one path,
# one run). Callgrind counts only inside the bin's `callgrind_region`
# (`--collect-atstart=no --toggle-collect=*callgrind_region*`): filling the
# stream and dropping the broker are outside it. The app's start-up and
# shutdown are inside, but cost the same at both sizes, so
#
#     instructions per message = (Ir(N2) - Ir(N1)) / (N2 - N1)
#
# and the same for allocations (counted by the bin's counting allocator in
# the same region) and for every function's cost in the breakdowns.
#
# Usage:  benches/callgrind.sh            (N1=50000 N2=150000)
#         N1=20000 N2=60000 benches/callgrind.sh
#         KEEP=/tmp/cg benches/callgrind.sh   (keep the callgrind files there)
#         KEEP=/tmp/cg REUSE=1 benches/callgrind.sh   (reuse the files kept there)
#         EXTRA=--prometheus benches/callgrind.sh   (metrics recording, as with
#                                                    the admin endpoint on)
#
# Needs valgrind (callgrind, callgrind_annotate). Takes a few minutes.

set -euo pipefail

N1=${N1:-50000}
N2=${N2:-150000}
TOP=${TOP:-25}
if ((N2 <= N1)); then
    echo "N2 ($N2) must be larger than N1 ($N1)" >&2
    exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --quiet -p ruststream-benches --bin runtime
target=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin="$target/release/runtime"

if [[ -n ${KEEP:-} ]]; then
    out=$KEEP
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

# run LABEL N ARGS..: one callgrind run of `runtime --only ARGS --messages N`.
run() {
    local label=$1 n=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$out/$label.$n.cg" \
        --collect-atstart=no '--toggle-collect=*callgrind_region*' \
        "$bin" "$@" ${EXTRA:-} --messages "$n" >"$out/$label.$n.txt" 2>"$out/$label.$n.log" || {
        echo "callgrind run failed: $label N=$n (log: $out/$label.$n.log)" >&2
        cat "$out/$label.$n.log" >&2
        exit 1
    }
}

ir() { awk '/^totals:/ { print $2 }' "$out/$1.$2.cg"; }
allocs() { sed -n 's/.*allocations=\([0-9]*\).*/\1/p' "$out/$1.$2.txt"; }
per_message() { awk -v a="$1" -v b="$2" -v d=$((N2 - N1)) 'BEGIN { printf "%.1f", (b - a) / d }'; }

# functions FILE [--inclusive=yes]: "cost<TAB>function" for every
# function in a callgrind file. With line tables, code inlined into a
# function is listed per source file under that function's name: the
# exclusive costs of those entries are disjoint and are summed; an
# inclusive entry already covers its function's inlined parts, so the
# largest is taken.
functions() {
    local file=$1
    shift
    local merge=sum
    [[ ${1:-} == --inclusive=yes ]] && merge=max
    callgrind_annotate --threshold=100 --auto=no --show-percs=no "$@" "$file" 2>/dev/null |
        awk -v merge="$merge" '
            /PROGRAM TOTALS/ { next }
            /^ *[0-9][0-9,]*  / {
                v = $1; gsub(",", "", v); v += 0
                line = $0
                sub(/^ *[0-9,]+ +/, "", line)
                sub(/ \[[^]]*\]$/, "", line)
                i = index(line, ":")
                fn = i ? substr(line, i + 1) : line
                if (merge == "max") { if (v > cost[fn]) cost[fn] = v } else cost[fn] += v
            }
            END { for (f in cost) printf "%d\t%s\n", cost[f], f }'
}

# delta LABEL [ANNOTATE-OPTIONS..]: "per-message cost<TAB>function",
# (cost(N2) - cost(N1)) / (N2 - N1), largest first.
delta() {
    local label=$1
    shift
    functions "$out/$label.$N1.cg" "$@" >"$out/$label.a.tsv"
    functions "$out/$label.$N2.cg" "$@" >"$out/$label.b.tsv"
    awk -F'\t' -v d=$((N2 - N1)) '
        NR == FNR { a[$2] = $1; next }
        { printf "%.1f\t%s\n", ($1 - a[$2]) / d, $2; seen[$2] = 1 }
        END { for (f in a) if (!(f in seen)) printf "%.1f\t%s\n", -a[f] / d, f }' \
        "$out/$label.a.tsv" "$out/$label.b.tsv" | sort -t$'\t' -k1,1 -gr
}

show() { awk -F'\t' -v top="$1" 'NR <= top { printf "%9s  %s\n", $1, substr($2, 1, 150) }'; }

# categories: per-message costs by kind, from "cost<TAB>function" lines.
# Inlining blurs the edges: the subscription task's poll loop (`drive`'s
# `poll_fn`: the rounds over the lanes, `catch_unwind`, and the handler's
# own body, `Worker::handle`, `Context`, the settle match) is one `PollFn`;
# the rest of `drive` (starting lanes, reads, the per-wake bookkeeping) is
# inlined into tracing's `Instrumented::poll` of the subscription span.
categories() {
    awk -F'\t' '
        {
            f = $2; c = "other"
            if (f ~ /serde|from_utf8|Payment|subscriber::decode/) c = "serde_json decode (Payment)"
            else if (f ~ /malloc|free|_int_|realloc|__rust_alloc|__rust_dealloc|__rdl_|memcpy|memmove|memset/) c = "allocator, memcpy"
            else if (f ~ /ruststream_engine|ruststream_memory|btree|vec_deque|ruststream_core|ReadBatch|sip::Hasher|hash_one/) c = "engine + memory broker (read, ack, pending list, lock)"
            else if (f ~ /tokio::sync|atomic_waker|Notify|Mutex/) c = "tokio sync, locks (outbox hand-over)"
            else if (f ~ /Timespec|Instant|clock_gettime|SystemTime/) c = "clock reads (handler timing, Backoff seed)"
            else if (f ~ /Instrumented/) c = "drive: lane starts, reads, per-wake work"
            else if (f ~ /PollFn/) c = "drive poll loop: lanes, catch_unwind, handler body"
            else if (f ~ /ruststream::/) c = "ruststream runtime (lanes, settler, Context)"
            else if (f ~ /tokio::/ || f ~ /LocalKey/) c = "tokio scheduler, tasks, wakers"
            else if (f ~ /hand::/) c = "hand loop body"
            sum[c] += $1; total += $1
        }
        END {
            for (c in sum) if (sum[c] >= 0.5 || sum[c] <= -0.5) printf "%9.1f  %s\n", sum[c], c
            printf "%9.1f  total\n", total
        }' | sort -k1,1 -gr
}

# The paths: the framework with workers(8) and workers(1) (adaptive
# read-ahead: 32 and 4 at first, up to 512 on a backlog), the hand loop at
# those first counts, at 64, and at 512 (the framework's reads on the
# benchmark's backlog: the like-for-like row). Current-thread runtime.
labels=(framework-w8 framework-w1 hand-c32 hand-c4 hand-c64 hand-c512)
args_of() {
    case $1 in
    framework-w8) echo "--only framework --workers 8" ;;
    framework-w1) echo "--only framework --workers 1" ;;
    hand-c32) echo "--only hand --count 32" ;;
    hand-c4) echo "--only hand --count 4" ;;
    hand-c64) echo "--only hand --count 64" ;;
    hand-c512) echo "--only hand --count 512" ;;
    esac
}

for label in "${labels[@]}"; do
    for n in "$N1" "$N2"; do
        if [[ -n ${REUSE:-} && -s "$out/$label.$n.cg" && -s "$out/$label.$n.txt" ]]; then
            continue
        fi
        echo "callgrind: $label, $n messages" >&2
        # shellcheck disable=SC2046 # the arguments are meant to split
        run "$label" "$n" $(args_of "$label")
    done
done

declare -A instr alloc
echo
echo "Instructions and allocations per message, (X(N2) - X(N1)) / (N2 - N1), N1=$N1, N2=$N2"
echo "(current-thread runtime; Ir counted in callgrind_region only)."
echo
printf '| %-28s | %12s | %12s | %14s | %10s |\n' path "Ir(N1)" "Ir(N2)" "instr/msg" "allocs/msg"
printf '|%s|%s|%s|%s|%s|\n' ":-----------------------------" "-------------:" "-------------:" "---------------:" "-----------:"
for label in "${labels[@]}"; do
    a=$(ir "$label" "$N1")
    b=$(ir "$label" "$N2")
    instr[$label]=$(per_message "$a" "$b")
    alloc[$label]=$(awk -v a="$(allocs "$label" "$N1")" -v b="$(allocs "$label" "$N2")" -v d=$((N2 - N1)) \
        'BEGIN { printf "%.3f", (b - a) / d }')
    case $label in
    framework-w8) name="framework, workers(8)" ;;
    framework-w1) name="framework, workers(1)" ;;
    hand-c32) name="hand loop, count 32" ;;
    hand-c4) name="hand loop, count 4" ;;
    hand-c64) name="hand loop, count 64" ;;
    hand-c512) name="hand loop, count 512" ;;
    esac
    printf '| %-28s | %12s | %12s | %14s | %10s |\n' "$name" "$a" "$b" "${instr[$label]}" "${alloc[$label]}"
done
echo
awk -v f8="${instr[framework-w8]}" -v h="${instr[hand-c512]}" \
    -v f1="${instr[framework-w1]}" 'BEGIN {
        printf "Framework beyond the hand loop at count 512 (the same read size): workers(8) %+.1f instr/msg (x%.2f); ", f8 - h, f8 / h
        printf "workers(1) %+.1f (x%.2f).\n", f1 - h, f1 / h
    }'
awk -v f="${instr[framework-w8]}" -v a="${alloc[framework-w8]}" 'BEGIN {
        printf "Targets (framework, workers(8), issue 15): <= 2,000 instr/msg: %s (%.0f); <= 1 alloc/msg: %s (%.3f).\n",
            (f <= 2000 ? "MET" : "NOT MET"), f, (a <= 1 ? "MET" : "NOT MET"), a
    }'

delta framework-w8 >"$out/fw8.excl.tsv"
delta hand-c512 >"$out/h512.excl.tsv"
delta framework-w8 --inclusive=yes >"$out/fw8.incl.tsv"

echo
echo "Framework, workers(8): instructions per message by kind (exclusive costs):"
categories <"$out/fw8.excl.tsv"
echo
echo "Hand loop, count 512: instructions per message by kind (exclusive costs):"
categories <"$out/h512.excl.tsv"
echo
echo "Framework, workers(8): top $TOP functions, exclusive instructions per message:"
show "$TOP" <"$out/fw8.excl.tsv"
echo
echo "Framework, workers(8): top $TOP functions, inclusive instructions per message"
echo "(below the region; the subscription task is tracing's Instrumented::poll, its"
echo "poll loop with the handler and its decode is the PollFn::poll):"
awk -F'\t' -v total="${instr[framework-w8]}" \
    '$2 ~ /callgrind_region/ || $1 < 0.999 * total' "$out/fw8.incl.tsv" | show "$TOP"
echo
echo "Framework, workers(8) minus hand loop, count 512: largest differences per message (exclusive):"
awk -F'\t' 'NR == FNR { h[$2] = $1; next }
    { d = $1 - h[$2]; seen[$2] = 1; printf "%.1f\t%s\n", d, $2 }
    END { for (f in h) if (!(f in seen)) printf "%.1f\t%s\n", -h[f], f }' \
    "$out/h512.excl.tsv" "$out/fw8.excl.tsv" |
    awk -F'\t' '{ a = $1 < 0 ? -$1 : $1; printf "%s\t%s\t%s\n", a, $1, $2 }' |
    sort -t$'\t' -k1,1 -gr | cut -f2- | show "$TOP"
if [[ -n ${KEEP:-} ]]; then
    echo
    echo "Callgrind files kept in $out (callgrind_annotate $out/framework-w8.$N2.cg)."
fi
