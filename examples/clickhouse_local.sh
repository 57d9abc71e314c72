# A private ClickHouse for trying the fleet store: Debian's clickhouse-server (18.16 is enough)
# run as a plain process of the caller's, not as the system service, listening on 127.0.0.1
# only, with its config, data and log in a folder the caller names. Nothing is installed or
# changed outside that folder; stopping the process and removing the folder undoes it all.
#
# Sourced (bash) by examples/fleet_on_one_machine.sh, and, through tests/fleet/clickhouse_local.sh
# (a link to this file), by the fleet store's test and benchmark. Before sourcing it, set
# PORTS_FILE to a file in a temporary folder of your own.
#
#   free_port                  prints a port in 22000-22999 that nothing on 127.0.0.1 holds
#                              and that no earlier call handed out (those are kept in
#                              PORTS_FILE, since $(free_port) runs in a subshell)
#   clickhouse_local_start DIR the first time, writes DIR/config.xml and DIR/users.xml (three
#                              ports chosen then: HTTP, native, interserver); starts
#                              clickhouse-server from DIR in the background (its log:
#                              DIR/server.log) and waits, at most 30 s, until it answers
#                              `SELECT 1` over HTTP. Sets CLICKHOUSE_URL (http://127.0.0.1:PORT)
#                              and clickhouse_pid (for the caller to stop). Returns 1 if the
#                              server did not answer in time or exited. Called again with the
#                              same DIR (after the server was stopped or killed): the same
#                              ports and the same data.
#
# The user `default` has no password and may connect from 127.0.0.1 only, which is why the
# server listens on loopback alone.

free_port() {
  touch "${PORTS_FILE}"
  python3 - "${PORTS_FILE}" <<'PY'
import random, socket, sys
used = set(open(sys.argv[1]).read().split())
for _ in range(500):
    p = random.randint(22000, 22999)
    if str(p) in used:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    open(sys.argv[1], "a").write(f"{p}\n")
    print(p)
    break
PY
}

clickhouse_local_start() {
  local dir=$1
  if [[ ! -f "${dir}/config.xml" ]]; then
    mkdir -p "${dir}/data" "${dir}/tmp" "${dir}/user_files" "${dir}/format_schemas"
    # <yandex>: the root element ClickHouse read before 21.x (18.16's is still that).
    cat >"${dir}/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>$(free_port)</http_port>
  <tcp_port>$(free_port)</tcp_port>
  <interserver_http_port>$(free_port)</interserver_http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>${dir}/data/</path>
  <tmp_path>${dir}/tmp/</tmp_path>
  <user_files_path>${dir}/user_files/</user_files_path>
  <format_schema_path>${dir}/format_schemas/</format_schema_path>
  <users_config>${dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <mlock_executable>false</mlock_executable>
</yandex>
XML
    cat >"${dir}/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default></default></quotas>
</yandex>
XML
  fi
  CLICKHOUSE_URL="http://127.0.0.1:$(sed -n 's:.*<http_port>\(.*\)</http_port>.*:\1:p' "${dir}/config.xml")"
  clickhouse-server --config-file="${dir}/config.xml" >>"${dir}/server.log" 2>&1 &
  clickhouse_pid=$!
  # Until it answers, it exits, or 30 s have passed (each try waits 1 s at most for an answer).
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    [[ "$(curl -s --max-time 1 "${CLICKHOUSE_URL}/?query=SELECT%201")" == 1 ]] && return 0
    # Gone, or exited and not yet waited for (a zombie, which kill -0 would still find).
    [[ "$(sed 's/.*) //' "/proc/${clickhouse_pid}/stat" 2>/dev/null | cut -d' ' -f1)" == [^Z] ]] ||
      break
    sleep 0.2
  done
  return 1
}
