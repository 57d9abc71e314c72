#!/bin/bash
# What an always-on profiler costs a busy program, each round compared with the plain run
# beside it (issue 14). `exec_rate` calls nrt_execute about 10,000 times a second, its timer
# slack 1 ns (EXEC_RATE_TIMER_SLACK_NS) so that a call lasts the simulated device's time, not
# the kernel's 50 us of slack, at NRT_SIM_TIME_SCALE=0.2 (--slack50: the default slack, at
# NRT_SIM_TIME_SCALE=0.01, as bench/run and run_beside.sh measure).
# Each round runs, one after the other:
#   plain          without a profiler
#   plain_again    the same, a second time: what the harness reports when there is nothing to
#                  find (its "loss" is the noise floor of this many rounds on this machine)
#   sys_trace      the program runs the runtime's system trace itself (no nrtprof), every
#                  type, fetched every 100 ms (as the Neuron profiler's capture would)
#   sys_trace_drawn  the same with only the types nrtprof asks for, fetched every 25 ms as
#                  nrtprof's flusher does: the runtime's share of NAME's loss
#   NAME           preloaded with the shim of build NAME against a standing nrtprofd of that
#                  build (flight recorder on, no capture)
#   NAME:off       the same against a daemon without its flight recorder (nothing records)
# A mode's loss in a round is 1 - its rate / plain's rate in that round; printed: the median
# over the rounds (and mean, spread), the calling thread's CPU per call above plain's, how
# much longer the median call took than plain's (exec_rate times each call), and in how many
# rounds the mode was slower than plain, with the chance of so lopsided a count if the mode
# cost nothing (a two-sided sign test: p below 0.05 says the loss is measurable in this many
# rounds; plain_again's p says how often the harness cries wolf).
# Rounds whose rates move together (the host's own noise) then cancel out.
# --gap US: the shape of a training step instead, each call after a US-microsecond sleep, at
# NRT_SIM_TIME_SCALE=0 (the call is the host's work alone): printed per mode are the median
# call's nanoseconds (exec_rate --gap) and what they add over plain's in the same round.
# The host's own slow spells lift whole runs by ~1 us here; "quiet" is the median over
# the rounds where neither run was in one (each within 20% of its mode's fastest run). The last
# column: how much later than plain's the median sleep ended (exec_rate's wake_late_ns): what
# the threads beside the program add to its wake-ups.
# --pin: the program's main thread on CPU 0; its other threads (moved 0.3 s in) and the daemons
# on CPU 1. Beware: on the project's VMs a pinned program loses ~0.15% per other thread it has,
# even threads blocked for good (16 threads in pause(): 2.9%; unpinned: nothing measurable).
#
#   bench/always_on/run_paired.sh [--rounds N] [--seconds S] [--pin] [--slack50 | --gap US]
#                                 [--modes M,M...] [--seed N] [--raw FILE | --analyze FILE...]
#                                 NAME=DIR ...
# --modes M,M... runs only those modes (and plain), for more rounds in the same time.
# --seed N (0-32767) fixes the shuffle of each round's order (printed with the results).
# --raw FILE keeps every run's line ("mode rate cpu-us-per-call call-ns"), round by round.
# --analyze FILE... prints the tables again from kept raw files (runs of the same modes, pooled
# round by round), running nothing: give the same NAME=DIR arguments and --gap if they had it.
#   DIR holds libnrtprof_shim.so, libnrtprof_shim_backend.so and nrtprofd of one build.
# The benchmark binaries come from bazel-out/k8-opt/bin (bazel build --config=opt //bench:all).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=bazel-out/k8-opt/bin
rounds=11
seconds=2
pin=0
scale=0.2
slack=(EXEC_RATE_TIMER_SLACK_NS=1)
gap=()
raw=
seed=$(( $(date +%s) % 32768 ))
analyze=()
only=
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --pin) pin=1; shift ;;
    --slack50) scale=0.01; slack=(); shift ;;
    --gap) scale=0; gap=(--gap "$2"); shift 2 ;;
    --raw) raw="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --modes) only="$2"; shift 2 ;;
    --analyze) shift; while [ $# -gt 0 ] && [ -f "$1" ]; do analyze+=("$1"); shift; done ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "usage: $0 [--rounds N] [--seconds S] [--pin] [--slack50 | --gap US] [--modes M,M...] [--seed N] [--raw FILE | --analyze FILE...] NAME=DIR [NAME=DIR ...]" >&2; exit 2 ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "$0: give at least one NAME=DIR" >&2; exit 2; }
[[ "$seed" =~ ^[0-9]{1,5}$ ]] && [ "$seed" -le 32767 ] ||
  { echo "$0: --seed takes a whole number from 0 to 32767, not '$seed'" >&2; exit 2; }
[ ${#gap[@]} = 0 ] || [ ${#slack[@]} -gt 0 ] || { echo "$0: --gap and --slack50 do not go together" >&2; exit 2; }
modes=(plain plain_again sys_trace sys_trace_drawn)
drawn=nrt_load,device_exec,tensor_read,tensor_write,dmem_buf_copyin,dmem_buf_copyout,timestamp_sync
for b in "${builds[@]}"; do modes+=("${b%%=*}" "${b%%=*}:off"); done
if [ -n "$only" ]; then
  kept=(plain)
  for m in "${modes[@]}"; do
    [ "$m" != plain ] && [[ ",$only," == *",$m,"* ]] && kept+=("$m")
  done
  [ ${#kept[@]} -gt 1 ] || { echo "$0: --modes names none of: ${modes[*]}" >&2; exit 2; }
  modes=("${kept[@]}")
fi
work="$(mktemp -d /tmp/nrtprof-paired-XXXXXX)"
daemons=()
trap '[ ${#daemons[@]} -eq 0 ] || kill "${daemons[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
results="$work/results"
if [ ${#analyze[@]} -gt 0 ]; then
  cat "${analyze[@]}" > "$results"
else
  # A Bazel server left running beside the program takes CPU of its own (its JVM: 1.9% of a CPU in
  # the 20 s after a build, 0.55% a minute later, measured 2026-12-05): as much as what is measured.
  if pgrep -f '^bazel[(]' > /dev/null; then
    echo "$0: warning: a Bazel server is running beside the benchmark (bazel shutdown first)" >&2
  fi
  for b in "${builds[@]}"; do
    for f in libnrtprof_shim.so libnrtprof_shim_backend.so nrtprofd; do
      [ -e "${b#*=}/$f" ] || { echo "$0: ${b#*=}/$f is missing" >&2; exit 2; }
    done
  done
  [ -x $bin/bench/exec_rate ] || { echo "$0: build --config=opt //bench:all first" >&2; exit 2; }
  [ $pin = 0 ] || [ "$(nproc)" -ge 2 ] || { echo "$0: --pin needs two CPUs" >&2; exit 2; }
  cpu0=(); cpu1=()
  [ $pin = 0 ] || { cpu0=(taskset -c 0); cpu1=(taskset -c 1); }

  for b in "${builds[@]}"; do
    name="${b%%=*}"; dir="${b#*=}"
    "${cpu1[@]}" "$dir/nrtprofd" --socket "$work/$name.sock" --output_root "$work/$name-caps" \
      --quiet & daemons+=($!)
    "${cpu1[@]}" "$dir/nrtprofd" --socket "$work/$name-off.sock" \
      --output_root "$work/$name-off-caps" --flight_recorder_seconds 0 --quiet & daemons+=($!)
  done
  for b in "${builds[@]}"; do
    for s in "$work/${b%%=*}.sock" "$work/${b%%=*}-off.sock"; do
      for _ in $(seq 50); do [ -S "$s" ] && break; sleep 0.1; done
    done
  done

  # One run of exec_rate with the given environment and arguments: "rate cpu_us_per_call
  # call_ns_median".
  run() {
    env NRT_SIM_TIME_SCALE=$scale "${slack[@]}" "$@" > "$work/out" 2>/dev/null &
    local pid=$! t
    if [ $pin = 1 ]; then
      sleep 0.3
      for t in /proc/$pid/task/*; do
        [ "${t##*/}" = "$pid" ] || taskset -p -c 1 "${t##*/}" > /dev/null 2>&1 || true
      done
    fi
    wait $pid
    awk 'NR == 1 {rate = $6; cpu = $8; for (i = 1; i < NF; i++) if ($i == "runq_wait_us_per_call") runq = $(i + 1)}
         $1 == "call_ns_median" {ns = $2; for (i = 1; i < NF; i++) if ($i == "wake_late_ns_median") late = $(i + 1)}
         END {print rate, cpu, ns, late + 0, runq + 0}' "$work/out"
  }

  # One run of `mode`: its line of the results.
  run_mode() {
    local mode="$1" name dir
    case "$mode" in
      plain | plain_again) echo "$mode $(run "${cpu0[@]}" $bin/bench/exec_rate "$seconds" "${gap[@]}")" ;;
      sys_trace) echo "sys_trace $(run "${cpu0[@]}" $bin/bench/exec_rate "$seconds" --sys_trace "${gap[@]}")" ;;
      sys_trace_drawn) echo "sys_trace_drawn $(run EXEC_RATE_FETCH_MS=25 "${cpu0[@]}" $bin/bench/exec_rate \
        "$seconds" --sys_trace --sys_trace_types "$drawn" "${gap[@]}")" ;;
      *)
        name="${mode%:off}"; dir=
        for b in "${builds[@]}"; do [ "${b%%=*}" = "$name" ] && dir="${b#*=}"; done
        local sock="$work/$name.sock"
        [ "$mode" = "$name" ] || sock="$work/$name-off.sock"
        echo "$mode $(run LD_PRELOAD="$dir/libnrtprof_shim.so" NRTPROF_ADDR="unix:$sock" \
          "${cpu0[@]}" $bin/bench/exec_rate "$seconds" "${gap[@]}")" ;;
    esac
  }

  # Each round runs the modes in an order of its own, shuffled (Fisher-Yates on bash's RANDOM,
  # seeded by --seed): with a fixed or rotated order each mode always follows the same one,
  # and whatever a run leaves behind for the next (seen: plain_again, always right after
  # plain, 0.77% +- 0.27 faster than it over 120 rounds) is read as that mode's cost.
  RANDOM=$seed
  : > "$results"
  for i in $(seq "$rounds"); do
    order=("${modes[@]}")
    for (( j = ${#order[@]} - 1; j > 0; j-- )); do
      k=$(( RANDOM % (j + 1) )); t="${order[j]}"; order[j]="${order[k]}"; order[k]="$t"
    done
    for m in "${order[@]}"; do run_mode "$m" >> "$results"; done
  done
  [ -z "$raw" ] || cp "$results" "$raw"
fi
rounds=$(( $(grep -c '^plain ' "$results") ))
# For both tables: a median, and a two-sided sign test (the chance, if a mode cost nothing, of
# k or more of n rounds on one side of plain, or as few).
awk_functions='
  function median(v, k,   i, j, t) {
    for (i = 2; i <= k; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
  }
  function sign_p(k, n,   i, c, tail, m) {
    m = k > n - k ? k : n - k; c = 1; tail = 0
    for (i = 0; i <= n; i++) { if (i >= m) tail += c; c = c * (n - i) / (i + 1) }
    tail = 2 * tail / 2 ^ n
    return tail > 1 ? 1 : tail
  }'
[ ${#analyze[@]} = 0 ] || echo "from ${analyze[*]}"
[ ${#analyze[@]} -gt 0 ] || echo "each round's order shuffled, --seed $seed"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of exec_rate $seconds ${gap[*]}" \
  "(NRT_SIM_TIME_SCALE=$scale, ${slack[*]:-default timer slack}$([ $pin = 1 ] && echo ', pinned'))"
if [ ${#gap[@]} -gt 0 ]; then
  awk -v n="${#modes[@]}" -v order="${modes[*]}" "$awk_functions"'
    BEGIN { split(order, name, " "); for (m = 0; m < n; m++) index_of[name[m + 1]] = m }
    !($1 in index_of) { next }
    { m = index_of[$1]; r = ++seen[m]; ns[m, r] = $4; cpu[m, r] = $3; late[m, r] = $5; rounds = r }
    END {
      for (m = 0; m < n; m++) {
        fastest[m] = ns[m, 1]
        for (r = 2; r <= rounds; r++) if (ns[m, r] < fastest[m]) fastest[m] = ns[m, r]
      }
      printf "%-16s %9s %14s %8s %8s %16s %19s %16s %16s\n", "", "call ns", "added median", "mean", "sd", "CPU/call added", "quiet: added (n)", "slower in (p)", "wake late added"
      for (m = 0; m < n; m++) {
        s = 0; ss = 0; q = 0; k = 0
        for (r = 1; r <= rounds; r++) {
          v[r] = ns[m, r]; a[r] = ns[m, r] - ns[0, r]; d[r] = cpu[m, r] - cpu[0, r]
          w[r] = late[m, r] - late[0, r]
          s += a[r]; ss += a[r] * a[r]; k += a[r] > 0
          # Quiet: neither run in one of the host slow spells (each within 20% of its fastest).
          if (ns[0, r] < 1.2 * fastest[0] && ns[m, r] < 1.2 * fastest[m]) qa[++q] = a[r]
        }
        mean = s / rounds; sd = sqrt(ss / rounds - mean * mean)
        printf "%-16s %9.0f %11.0f ns %5.0f ns %5.0f ns %13.2f us %12.0f ns (%d)", name[m + 1], median(v, rounds), median(a, rounds), mean, sd, median(d, rounds), q ? median(qa, q) : 0, q
        if (m > 0) printf " %6d/%d (%.3f) %13.0f ns", k, rounds, sign_p(k, rounds), median(w, rounds)
        printf "\n"
      }
    }' "$results"
  exit 0
fi
awk -v n="${#modes[@]}" -v order="${modes[*]}" "$awk_functions"'
  BEGIN { split(order, name, " "); for (m = 0; m < n; m++) index_of[name[m + 1]] = m }
  !($1 in index_of) { next }
  { m = index_of[$1]; r = ++seen[m]; rate[m, r] = $2; cpu[m, r] = $3; ns[m, r] = $4; runq[m, r] = $6; rounds = r }
  END {
    printf "%-16s %9s %12s %8s %8s %7s %16s %16s %16s %18s\n", "", "calls/s", "loss median", "mean", "sd", "se", "CPU/call added", "call ns added", "slower in (p)", "runq wait added"
    for (m = 0; m < n; m++) {
      s = 0; ss = 0; k = 0
      for (r = 1; r <= rounds; r++) {
        rr[r] = rate[m, r]; l[r] = 100 * (1 - rate[m, r] / rate[0, r]); d[r] = cpu[m, r] - cpu[0, r]
        a[r] = ns[m, r] - ns[0, r]; w[r] = runq[m, r] - runq[0, r]
        s += l[r]; ss += l[r] * l[r]; k += l[r] > 0
      }
      mean = s / rounds; sd = sqrt(ss / rounds - mean * mean)
      printf "%-16s %9.0f %11.2f%% %7.2f%% %7.2f%% %6.2f%% %13.2f us %13.0f ns", name[m + 1], median(rr, rounds), median(l, rounds), mean, sd, sd / sqrt(rounds), median(d, rounds), median(a, rounds)
      if (m > 0) printf " %6d/%d (%.3f) %12.2f us", k, rounds, sign_p(k, rounds), median(w, rounds)
      printf "\n"
    }
    # What each build adds to the trace the runtime keeps of the same types, round by round:
    # its loss against sys_trace_drawn in the same round (mean with its standard error).
    if (!("sys_trace_drawn" in index_of)) exit
    printf "beyond sys_trace_drawn, round by round:\n"
    for (m = 0; m < n; m++) {
      if (name[m + 1] ~ /^(plain|plain_again|sys_trace|sys_trace_drawn)$/ || name[m + 1] ~ /:off$/) continue
      s = 0; ss = 0; k = 0
      for (r = 1; r <= rounds; r++) {
        x = 100 * (rate[index_of["sys_trace_drawn"], r] - rate[m, r]) / rate[0, r]
        s += x; ss += x * x; k += x > 0
      }
      mean = s / rounds; sd = sqrt(ss / rounds - mean * mean)
      printf "%-16s %7.2f%% +- %.2f (se), slower in %d/%d (%.3f)\n", name[m + 1], mean, sd / sqrt(rounds), k, rounds, sign_p(k, rounds)
    }
  }' "$results"
