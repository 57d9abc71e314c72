# Sourced by the fleet store's test and benchmark: a private ClickHouse server (Debian's
# clickhouse-server) as a plain process on loopback, its config, data and log in a folder of the
# caller's, its ports in 22000-22999.
#
# The caller sets PORTS_FILE (a file in its own temporary folder) before sourcing it.
#
#   free_port                         a free port in 22000-22999 not handed out before (the
#                                     ports handed out are kept in PORTS_FILE: $(free_port)
#                                     runs in a subshell)
#   clickhouse_local_start DIR        writes DIR/config.xml once (ports chosen then), starts the
#                                     server from DIR, waits until it answers; sets
#                                     CLICKHOUSE_URL and clickhouse_pid. Fails (1) if it
#                                     cannot start; again with the same DIR: the same data.

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
  for _ in $(seq 150); do
    [[ "$(curl -s --max-time 1 "${CLICKHOUSE_URL}/?query=SELECT%201")" == 1 ]] && return 0
    kill -0 "${clickhouse_pid}" 2>/dev/null || break
    sleep 0.2
  done
  return 1
}
