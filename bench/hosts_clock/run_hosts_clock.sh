#!/usr/bin/env bash
# The error bound of `nrtprof capture --hosts`'s clock offsets on loopback: three nrtprofd on
# 127.0.0.1 with TLS and a token (certificates made here with openssl), ROUNDS captures of all
# three (--last 1s, from their flight recorders), and the bound each host's line stated, in us:
# min, median, max over every host and round. Prints figures; asserts nothing.
# Usage: bench/hosts_clock/run_hosts_clock.sh [ROUNDS] [FIRST_PORT]   (from the workspace root,
# after bazel build --config=opt //client:nrtprof //daemon:nrtprofd)
set -euo pipefail
rounds=${1:-20}
port=${2:-21001}
bin=${NRTPROF_BIN:-bazel-bin}  # another build's output folder, e.g. bazel-out/k8-fastbuild/bin
dir=$(mktemp -d /tmp/nrtprof-hosts-clock-XXXXXX)
chmod 1777 "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

(
  cd "$dir"
  o=/usr/bin/openssl
  $o genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
  $o req -x509 -new -key ca.key -out ca.pem -days 1 -subj "/CN=bench CA" 2>/dev/null
  $o genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key 2>/dev/null
  $o req -new -key server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
  $o x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 \
    -extfile server.ext 2>/dev/null
  chmod 644 server.key
  (umask 077; $o rand -hex 32 > token)
)
user=()
[ "$(id -u)" -eq 0 ] && user=(--user=nobody) && chown nobody "$dir/token"
hosts=()
for i in 0 1 2; do
  p=$((port + i))
  "$bin/daemon/nrtprofd" --listen "127.0.0.1:$p" --tls_cert "$dir/server.pem" \
    --tls_key "$dir/server.key" --token_file "$dir/token" --socket "$dir/s$i/nrtprofd.sock" \
    --output_root "$dir/c$i" --spool_dir "$dir/spool$i" --quiet "${user[@]}" 2>"$dir/d$i.log" &
  pids+=($!)
  hosts+=("127.0.0.1:$p")
done
[ "$(id -u)" -eq 0 ] && chown root "$dir/token"
sleep 1
list=$(IFS=,; echo "${hosts[*]}")
bounds=()
for r in $(seq "$rounds"); do
  # Exit 3: written but empty, as expected here (the hosts run no program; only their clocks are
  # measured).
  err=$("$bin/client/nrtprof" capture --hosts "$list" --tls_ca "$dir/ca.pem" \
        --token_file "$dir/token" --last 1s --out "$dir/cap$r" 2>&1 >/dev/null) || [ $? -eq 3 ] || {
    echo "$err" >&2; exit 1; }
  while read -r b; do bounds+=("$b"); done < <(echo "$err" | sed -n 's/.*: clock [+-][0-9.]*ms ± \([0-9.]*\)ms$/\1/p')
done
printf '%s\n' "${bounds[@]}" | sort -g | awk -v r="$rounds" '
  { v[NR] = $1 * 1000 }
  END { printf "clock offset error bound on loopback, %d hosts x %d rounds (us): min %.1f  median %.1f  max %.1f\n",
        NR / r, r, v[1], v[int((NR + 1) / 2)], v[NR] }'
