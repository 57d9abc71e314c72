#!/bin/bash
# The always-on service as packaging/ ships it:
#   - packaging/install.sh stages the binaries, the settings file and the unit (DESTDIR);
#   - systemd-analyze verify accepts the unit as installed (its ExecStart pointed at the staged
#     daemon, the rest verbatim); skipped with a line only where systemd-analyze cannot run;
#   - the shipped settings file starts the daemon (its socket, group and folder overridden on
#     the command line, which wins), with the flight recorder it sets.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly WORK="$(mktemp -d /tmp/nrtprof-pkg.XXXXXX)"
trap 'kill "${daemon_pid:-0}" 2>/dev/null; rm -rf "${WORK}"' EXIT

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

stage="${WORK}/root"
if ! DESTDIR="${stage}" "${RUNFILES}/packaging/install.sh" --bin "${RUNFILES}" >"${WORK}/install.out" 2>&1; then
  fail "install.sh: $(cat "${WORK}/install.out")"
fi
for f in usr/local/lib/nrtprof/nrtprof usr/local/lib/nrtprof/nrtprofd \
  usr/local/lib/nrtprof/libnrtprof_shim.so usr/local/lib/nrtprof/libnrtprof_shim_backend.so \
  etc/nrtprof/nrtprofd.conf etc/systemd/system/nrtprofd.service; do
  [[ -f "${stage}/${f}" ]] || fail "install.sh did not stage ${f}"
done
[[ "$(readlink "${stage}/usr/local/bin/nrtprof")" == /usr/local/lib/nrtprof/nrtprof ]] ||
  fail "usr/local/bin/nrtprof does not point at the installed binary"

unit="${stage}/etc/systemd/system/nrtprofd.service"
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed here: the unit is not verified"
else
  sed "s|ExecStart=/usr/local/bin/nrtprofd|ExecStart=${stage}/usr/local/lib/nrtprof/nrtprofd|" \
    "${unit}" >"${WORK}/nrtprofd.service"
  if systemd-analyze verify "${WORK}/nrtprofd.service" >"${WORK}/verify.out" 2>&1; then
    [[ -s "${WORK}/verify.out" ]] && fail "systemd-analyze verify warned: $(cat "${WORK}/verify.out")"
  elif grep -q "System has not been booted with systemd\|Failed to connect to bus\|Failed to initialize manager" "${WORK}/verify.out"; then
    echo "SKIP: systemd-analyze cannot run here: $(head -1 "${WORK}/verify.out")"
  else
    fail "systemd-analyze verify: $(cat "${WORK}/verify.out")"
  fi
  # A broken unit is refused: the check can fail.
  sed 's|^ExecStart=.*|ExecStart=/nonexistent/nrtprofd|' "${unit}" >"${WORK}/broken.service"
  systemd-analyze verify "${WORK}/broken.service" >/dev/null 2>&1 &&
    fail "systemd-analyze verify accepted a unit whose daemon does not exist"
fi

# The shipped settings start a daemon.
exec 3>"${WORK}/ready"
"${stage}/usr/local/lib/nrtprof/nrtprofd" --config "${stage}/etc/nrtprof/nrtprofd.conf" \
  --socket "${WORK}/s/d.sock" --socket_group "$(id -g)" --output_root "${WORK}/caps" \
  --ready_fd 3 2>"${WORK}/daemon.err" &
daemon_pid=$!
exec 3>&-
for _ in $(seq 100); do [[ -s "${WORK}/ready" ]] && break; sleep 0.1; done
if [[ ! -s "${WORK}/ready" ]]; then
  fail "the daemon with the shipped settings did not start: $(cat "${WORK}/daemon.err")"
else
  status=$(NRTPROF_ADDR= "${stage}/usr/local/lib/nrtprof/nrtprof" status --addr "unix:${WORK}/s/d.sock" 2>&1)
  grep -q "(bounds 30 s, 256 MiB)" <<<"${status}" || fail "status: ${status}"
  grep -q "daemon:              unix:${WORK}/s/d.sock" <<<"${status}" || fail "status: ${status}"
fi

finish "" "packaging: all checks passed"
