# Sourced by the fleet store's shell tests (beside common/testing/checks.sh) with FLEET_TEST set
# to the test's short name: the daemon and CLI from the runfiles (NRTPROFD, NRTPROF); a private
# folder under /tmp (WORK: the daemons' socket paths must fit in a sockaddr_un), removed at exit
# with every process the test put in `pids` and the ClickHouse in `clickhouse_pid` stopped;
# PORTS_FILE and clickhouse_local.sh's functions (free_port, clickhouse_local_start). Where
# clickhouse-server is not installed the test ends here with one SKIP line.
readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROFD="${RUNFILES}/daemon/nrtprofd"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly WORK="$(mktemp -d "/tmp/nrtprof-${FLEET_TEST}.XXXXXX")"
pids=()
clickhouse_pid=""
cleanup() {
  for p in "${pids[@]}" ${clickhouse_pid}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "${WORK}"
}
trap cleanup EXIT

readonly PORTS_FILE="${WORK}/ports"
source "${RUNFILES}/tests/fleet/clickhouse_local.sh"
if ! command -v clickhouse-server >/dev/null; then
  echo "SKIP: clickhouse-server is not installed (third_party/install_debian_deps.sh installs it)"
  exit 0
fi
