#!/usr/bin/env bash
# The fleet on one machine: everything `nrtprof capture --hosts` and `nrtprof fleet top` need,
# started here on loopback, used once, and stopped again.
#
#   1. a CA, a server certificate for 127.0.0.1 signed by it, and a bearer token (openssl), in a
#      private temporary folder (mktemp -d: mode 0700);
#   2. a ClickHouse server of its own (Debian's clickhouse-server run as a plain process, its
#      data in that folder: examples/clickhouse_local.sh);
#   3. two nrtprofd standing for two hosts, host-a and host-b: each on a free loopback TCP port
#      with TLS and the token, on its own unix socket, exporting to that ClickHouse every second;
#   4. the RMSNorm example under each daemon (the shim preloaded by hand, as on a real host);
#   5. `nrtprof capture --hosts` over both daemons: every host's files and one merged trace and
#      summary, in a new folder under --out;
#   6. `nrtprof fleet top` over what both daemons exported;
#   7. then stops what it started and removes its temporary folders, also when a step fails or
#      it is interrupted. The capture's folder is all that is left.
#
# Run from a clone, as a normal user or as root, after
#   bazel build //client:nrtprof //daemon:nrtprofd //shim:libnrtprof_shim.so //examples:rmsnorm
# (it runs that build itself if one of them is missing). Needs openssl, curl, python3 and
# clickhouse-server (third_party/install_debian_deps.sh installs them). Takes about 15 s. A
# failure is one line, `fleet_on_one_machine: WHAT`, at the end, and exit 1; bad flags exit 2.
#
# As root, the daemons must not stay root: each is started with --user nobody (it becomes nobody
# once it has read its certificate, key and token and bound its port), its socket's folder is
# made beforehand and given to nobody, and the programs are told to trust a daemon of nobody's
# (NRTPROF_SERVICE_USER=nobody). As anyone else, none of that is needed. Step 3 says why.
#
# usage: examples/fleet_on_one_machine.sh [--out DIR] [--iters N] [--bazel_bin DIR]
#   --out DIR        where the capture's folder goes (default ./nrtprof-captures)
#   --iters N        iterations of each RMSNorm program (default 20)
#   --bazel_bin DIR  the built binaries (DIR/daemon/nrtprofd, DIR/client/nrtprof,
#                    DIR/shim/libnrtprof_shim.so, DIR/examples/rmsnorm); default the clone's
#                    bazel-bin, built if needed. Given, nothing is built.
set -u -o pipefail

readonly ME=fleet_on_one_machine
readonly USAGE="usage: examples/fleet_on_one_machine.sh [--out DIR] [--iters N] [--bazel_bin DIR]"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly HERE

out="${PWD}/nrtprof-captures"
iters=20
bin=""
bad_usage() {
  echo "${ME}: $*; ${USAGE}" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out | --iters | --bazel_bin)
      [[ $# -ge 2 && -n "$2" ]] || bad_usage "$1 needs a value"
      case "$1" in
        --out) out=$2 ;;
        --iters) iters=$2 ;;
        --bazel_bin) bin=$2 ;;
      esac
      shift 2
      ;;
    --out=* | --iters=* | --bazel_bin=*)
      value=${1#*=}
      [[ -n "${value}" ]] || bad_usage "${1%%=*} needs a value"
      case "$1" in
        --out=*) out=${value} ;;
        --iters=*) iters=${value} ;;
        --bazel_bin=*) bin=${value} ;;
      esac
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) bad_usage "unknown argument '$1'" ;;
  esac
done
[[ "${iters}" =~ ^[1-9][0-9]{0,5}$ ]] || bad_usage "--iters '${iters}' is not a number from 1 to 999999"

# --- What it starts, and how it all goes away ------------------------------------------------

work=""            # the private folder: certificates, token, ClickHouse, logs
hosts_dir=""       # the daemons' folders (sockets, their own captures); root: a second folder
daemon_pids=()
clickhouse_pid=""
error=""
exit_code=0
step_no=0

say() { echo "${ME}: $*"; }
step() {
  step_no=$((step_no + 1))
  echo
  echo "== ${step_no}. $*"
}
# Shows a command as one would type it (the script then runs it, with the same arguments).
show() { echo "\$ $*"; }
die() {
  error="$*"
  exit 1
}

# Whether PID still runs (a process that exited but was not yet waited for is a zombie, which
# kill -0 would still find).
running() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [[ -n "${state}" && "${state}" != Z ]]
}
# SIGTERM, then SIGKILL if it still runs after SECONDS; waits for it either way.
stop_process() {
  local pid=$1 seconds=$2 i
  kill -TERM "${pid}" 2>/dev/null
  for ((i = 0; i < seconds * 10; i++)); do
    running "${pid}" || break
    sleep 0.1
  done
  if running "${pid}"; then
    echo "${ME}: pid ${pid} did not stop within ${seconds} s of SIGTERM; killing it"
    kill -KILL "${pid}" 2>/dev/null
  fi
  wait "${pid}" 2>/dev/null
}

cleanup() {
  # Once only; and a second Ctrl-C must not cut the stopping short (it is bounded: 50 s at most).
  trap - EXIT
  trap '' INT TERM
  if [[ ${#daemon_pids[@]} -gt 0 || -n "${clickhouse_pid}" || -n "${work}" ]]; then
    step "Stopping what this script started"
  fi
  local pid dir
  # The daemons first: each sends ClickHouse what it still holds as it stops (for 2 s at most).
  for pid in "${daemon_pids[@]}"; do
    say "stopping nrtprofd (pid ${pid})"
    stop_process "${pid}" 10
  done
  if [[ -n "${clickhouse_pid}" ]]; then
    say "stopping ClickHouse (pid ${clickhouse_pid})"
    stop_process "${clickhouse_pid}" 30
  fi
  # (Without root, the daemons' folder is inside the private one.)
  for dir in "${hosts_dir}" "${work}"; do
    if [[ -n "${dir}" && -d "${dir}" && "${dir}" != "${work}/hosts" ]]; then
      say "removing ${dir}"
      rm -rf "${dir}"
    fi
  done
  if [[ -n "${error}" ]]; then
    echo "${ME}: ${error}" >&2
    exit "${exit_code}"
  fi
}
trap 'exit_code=$?; cleanup' EXIT
trap 'error="interrupted (SIGINT); stopped what it had started"; exit 130' INT
trap 'error="terminated (SIGTERM); stopped what it had started"; exit 143' TERM

# --- 0. The parts ------------------------------------------------------------------------------

for tool in openssl curl python3; do
  command -v "${tool}" >/dev/null || die "${tool} is not installed (third_party/install_debian_deps.sh installs it)"
done
command -v clickhouse-server >/dev/null ||
  die "clickhouse-server is not installed (apt-get install clickhouse-server, or third_party/install_debian_deps.sh)"

readonly TARGETS=(//client:nrtprof //daemon:nrtprofd //shim:libnrtprof_shim.so //examples:rmsnorm)
if [[ -z "${bin}" ]]; then
  bin="$(cd "${HERE}/.." && pwd)/bazel-bin"
  for f in daemon/nrtprofd client/nrtprof shim/libnrtprof_shim.so examples/rmsnorm; do
    if [[ ! -e "${bin}/${f}" ]]; then
      step "Building nrtprof (${bin}/${f} is missing)"
      show bazel build "${TARGETS[@]}"
      (cd "${HERE}/.." && bazel build "${TARGETS[@]}") ||
        die "bazel build ${TARGETS[*]} failed (its output is above)"
      break
    fi
  done
fi
readonly NRTPROFD="${bin}/daemon/nrtprofd"
readonly NRTPROF="${bin}/client/nrtprof"
readonly SHIM="${bin}/shim/libnrtprof_shim.so"
readonly RMSNORM="${bin}/examples/rmsnorm"
for f in "${NRTPROFD}" "${NRTPROF}" "${RMSNORM}"; do
  [[ -x "${f}" ]] || die "${f} is missing or not executable (bazel build ${TARGETS[*]})"
done
[[ -f "${SHIM}" ]] || die "${SHIM} is missing (bazel build ${TARGETS[*]})"

# Root: a daemon that listens on TCP refuses to keep root's powers; it must be told which
# unprivileged user to become (--user) once it has read its certificate, key and token and
# bound its port. Everything it makes after that (the socket's folder, the socket, its captures)
# is that user's. Here that is `nobody`; a real host has a user of its own for it
# (packaging/install.sh makes `nrtprof`).
daemon_user=""
if [[ "$(id -u)" == 0 ]]; then
  daemon_user=nobody
  id -u "${daemon_user}" >/dev/null 2>&1 || die "running as root, the daemons need an unprivileged user to become, and there is no user '${daemon_user}'"
fi

# --- 1. Certificates and token -------------------------------------------------------------------

# /tmp rather than $TMPDIR: a unix socket's path may be 107 bytes at most, and as root the
# daemons' own folders must be reachable by `nobody`.
work="$(mktemp -d /tmp/nrtprof-fleet.XXXXXX)" || die "mktemp -d /tmp/nrtprof-fleet.XXXXXX failed"
chmod 0700 "${work}"
mkdir -m 0700 "${work}/tls" "${work}/logs"
readonly TLS="${work}/tls"
step "A CA, a certificate for 127.0.0.1 and a token, in ${TLS} (only you can read it; removed at the end)"
show "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key"
show "openssl req -x509 -new -key ca.key -out ca.pem -days 1 -subj '/CN=nrtprof fleet demo CA'"
show "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key"
show "openssl req -new -key server.key -out server.csr -subj /CN=127.0.0.1"
show "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > server.ext"
show "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile server.ext -out server.pem"
show "(umask 077; openssl rand -hex 32 > token)"
(
  cd "${TLS}" || exit 1
  set -e
  # EC P-256 keys: made in a moment. A day's validity is plenty for a try.
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
  openssl req -x509 -new -key ca.key -out ca.pem -days 1 -subj "/CN=nrtprof fleet demo CA"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key
  openssl req -new -key server.key -out server.csr -subj "/CN=127.0.0.1"
  # The clients connect to 127.0.0.1:PORT, so the certificate must name that address.
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile server.ext -out server.pem
  # The daemons and the CLI refuse a token file anyone but its owner can read.
  (umask 077 && openssl rand -hex 32 >token)
) >"${work}/logs/openssl.log" 2>&1 || die "openssl failed: $(tail -1 "${work}/logs/openssl.log")"
# --- 2. ClickHouse -------------------------------------------------------------------------------

step "ClickHouse: clickhouse-server as a plain process on 127.0.0.1, its data in ${work}/clickhouse"
readonly PORTS_FILE="${work}/ports"
# shellcheck source=examples/clickhouse_local.sh
source "${HERE}/clickhouse_local.sh"
show "clickhouse-server --config-file=${work}/clickhouse/config.xml &"
clickhouse_local_start "${work}/clickhouse" ||
  die "ClickHouse did not start within 30 s: $(grep -v '^\s*$' "${work}/clickhouse/server.log" | tail -1)"
say "ClickHouse $(curl -s --max-time 5 "${CLICKHOUSE_URL}/?query=SELECT%20version()") answers at ${CLICKHOUSE_URL} (pid ${clickhouse_pid})"

# --- 3. Two daemons, two hosts -----------------------------------------------------------------

if [[ -n "${daemon_user}" ]]; then
  # The daemons are nobody by the time they make their socket's folder (or check that they can
  # write in it), so that folder must be nobody's: made here, 0700 and owned by nobody (what
  # systemd's RuntimeDirectory= does for the packaged service), inside a folder of root's that
  # anyone may pass through (0755) but only root may write: the programs and the CLI trust no
  # socket in a folder that someone other than root or the service user could change. The
  # private folder above stays closed to nobody: the daemons read the certificate, key and token
  # while still root.
  hosts_dir="$(mktemp -d /tmp/nrtprof-fleet-hosts.XXXXXX)" || die "mktemp -d failed"
  chmod 0755 "${hosts_dir}"
else
  hosts_dir="${work}/hosts"
  mkdir -m 0700 "${hosts_dir}"
fi
step "Two nrtprofd standing for two hosts, host-a and host-b$([[ -n "${daemon_user}" ]] && echo ", run as ${daemon_user} (you are root)")"
if [[ -n "${daemon_user}" ]]; then
  say "root: each daemon gets --user ${daemon_user}, and its folder in ${hosts_dir} is ${daemon_user}'s (chown ${daemon_user}, chmod 0700)"
fi

declare -A port
start_daemon() {  # start_daemon NAME: a daemon standing for host NAME; sets port[NAME]
  local name=$1 dir="${hosts_dir}/$1" pid i ready=""
  mkdir -m 0700 "${dir}"
  [[ -z "${daemon_user}" ]] || chown "${daemon_user}:" "${dir}" || die "cannot give ${dir} to ${daemon_user}"
  local args=(--listen 127.0.0.1:0 --tls_cert "${TLS}/server.pem" --tls_key "${TLS}/server.key"
    --token_file "${TLS}/token" --socket "${dir}/nrtprofd.sock" --output_root "${dir}/captures"
    --clickhouse_url "${CLICKHOUSE_URL}" --clickhouse_export_ms 1000 --fleet_host "${name}")
  [[ -z "${daemon_user}" ]] || args+=(--user "${daemon_user}")
  show "nrtprofd ${args[*]} &"
  # --ready_fd: the daemon writes "ready 127.0.0.1:PORT" there once it listens (port 0 above:
  # any free port, so two daemons, and anything else on this machine, never collide).
  "${NRTPROFD}" "${args[@]}" --ready_fd 3 3>"${work}/logs/${name}.ready" 2>"${work}/logs/${name}.log" &
  pid=$!
  daemon_pids+=("${pid}")
  for ((i = 0; i < 200; i++)); do
    ready=$(cat "${work}/logs/${name}.ready" 2>/dev/null)
    [[ "${ready}" == "ready 127.0.0.1:"* ]] && break
    running "${pid}" || break
    sleep 0.1
  done
  [[ "${ready}" == "ready 127.0.0.1:"* ]] ||
    die "${name}'s nrtprofd did not start within 20 s: $(tail -1 "${work}/logs/${name}.log")"
  port[${name}]=${ready##*:}
  # Its own words on where it listens and where it exports (written just after "ready").
  for ((i = 0; i < 50; i++)); do
    grep -q "listening on" "${work}/logs/${name}.log" && break
    sleep 0.1
  done
  grep -E "listening on|fleet store" "${work}/logs/${name}.log" | sed 's/^/  /'
  say "${name}: nrtprofd pid ${pid}, at 127.0.0.1:${port[${name}]}"
}
start_daemon host-a
start_daemon host-b

# --- 4. Programs under them --------------------------------------------------------------------

step "The RMSNorm example under each daemon, the shim preloaded (${iters} iterations each)"
run_under() {  # run_under HOST VARIANT
  local name=$1 variant=$2 log="${work}/logs/$1.program.log"
  local envs=(LD_PRELOAD="${SHIM}" NRTPROF_ADDR="unix:${hosts_dir}/${name}/nrtprofd.sock")
  # The programs trust a daemon, and its socket's folder, only if they are their own user's or
  # root's, or the user NRTPROF_SERVICE_USER names: as root here, the daemons are nobody.
  [[ -z "${daemon_user}" ]] || envs+=(NRTPROF_SERVICE_USER="${daemon_user}")
  show "${envs[*]} rmsnorm --variant ${variant} --iters ${iters}"
  # In the foreground (Ctrl-C reaches it), its pid noted first: the subshell execs env, which
  # execs the program, all one process.
  (
    echo "${BASHPID}" >"${work}/logs/${name}.pid"
    exec env "${envs[@]}" "${RMSNORM}" --variant "${variant}" --iters "${iters}"
  ) >"${log}" 2>&1 || die "rmsnorm --variant ${variant} under ${name} failed: $(tail -1 "${log}")"
  # The shim says in one line why it does not profile (a daemon it does not trust, ...) and the
  # program runs on: that would be a failure here.
  if grep -q "^nrtprof: " "${log}"; then
    die "rmsnorm under ${name}: $(grep -m1 "^nrtprof: " "${log}")"
  fi
  sed 's/^/  /' "${log}" | tail -2
  say "${name}: rmsnorm --variant ${variant} ran as pid $(cat "${work}/logs/${name}.pid")"
}
run_under host-a naive
run_under host-b fused

# --- 5. Capture across the hosts ---------------------------------------------------------------

mkdir -p "${out}" 2>/dev/null || die "cannot create the folder ${out} (--out)"
# Absolute, so that what it prints can be opened from anywhere.
out="$(cd "${out}" && pwd)"
CAPTURE="${out}/fleet-demo-$(date +%Y%m%d-%H%M%S)"
readonly CAPTURE
readonly HOSTS="127.0.0.1:${port[host-a]},127.0.0.1:${port[host-b]}"
step "One capture on both hosts at one instant: the last 30 s from their flight recorders, into ${CAPTURE}"
say "(the capture names each host by its address, host-a 127.0.0.1:${port[host-a]} and host-b 127.0.0.1:${port[host-b]};"
say " the fleet store by its --fleet_host)"
show "nrtprof capture --hosts ${HOSTS} --tls_ca ${TLS}/ca.pem --token_file ${TLS}/token --last 30s --out ${CAPTURE}"
# The programs above ran in the last few seconds; a standing daemon keeps every process's
# events of the last 30 s (its flight recorder), so --last 30s holds them whole. It takes a
# second or two; 120 s bounds it should a daemon stop answering (--foreground: Ctrl-C still
# reaches it).
timeout --foreground 120 "${NRTPROF}" capture --hosts "${HOSTS}" --tls_ca "${TLS}/ca.pem" \
  --token_file "${TLS}/token" --last 30s --out "${CAPTURE}" 2>&1 | tee "${work}/logs/capture.log"
code=$?
[[ ${code} != 124 ]] || die "nrtprof capture --hosts did not finish within 120 s"
[[ ${code} == 0 ]] || die "nrtprof capture --hosts failed (exit ${code}): $(tail -1 "${work}/logs/capture.log")"
grep -q " on 2 of 2 hosts" "${work}/logs/capture.log" ||
  die "the capture left a host out: $(grep -m1 "left out" "${work}/logs/capture.log")"
[[ -f "${CAPTURE}/summary.txt" && -f "${CAPTURE}/trace.pftrace" ]] ||
  die "the capture wrote no summary.txt or trace.pftrace in ${CAPTURE}"

# --- 6. The fleet store ------------------------------------------------------------------------

step "The fleet store: what both daemons exported to ClickHouse"
# Each daemon folds what it received a second ago and exports every second: wait until both
# hosts are there and two reads a second apart agree (everything has arrived), 30 s at most.
by_host=""
for ((i = 0; i < 30; i++)); do
  now=$("${NRTPROF}" fleet top --clickhouse_url "${CLICKHOUSE_URL}" --by host --format csv 2>&1)
  if [[ "${now}" == "${by_host}" && "${now}" == *$'\nhost-a,'* && "${now}" == *$'\nhost-b,'* ]]; then
    break
  fi
  by_host=${now}
  sleep 1
done
[[ "${by_host}" == *$'\nhost-a,'* && "${by_host}" == *$'\nhost-b,'* ]] ||
  die "ClickHouse did not get rows from both hosts within 30 s: fleet top --by host said: $(echo "${by_host}" | tr '\n' ' ')"
show "nrtprof fleet top --clickhouse_url ${CLICKHOUSE_URL} --by host"
"${NRTPROF}" fleet top --clickhouse_url "${CLICKHOUSE_URL}" --by host ||
  die "nrtprof fleet top --by host failed"
echo
show "nrtprof fleet top --clickhouse_url ${CLICKHOUSE_URL} --limit 6"
"${NRTPROF}" fleet top --clickhouse_url "${CLICKHOUSE_URL}" --limit 6 ||
  die "nrtprof fleet top failed"

# --- 7. Done -----------------------------------------------------------------------------------

cleanup
echo
say "done. The capture of both hosts is in ${CAPTURE}:"
say "  summary.txt (overall, then each host), trace.pftrace (both hosts on one clock: open it in"
say "  https://ui.perfetto.dev), and each host's own files in its HOST:PORT folder."
