#!/usr/bin/env bash
# Installs nrtprof as an always-on service on this host (README, "Always on"): the binaries
# under PREFIX (default /usr/local), the settings in /etc/nrtprof/nrtprofd.conf (an existing one
# is kept), the systemd unit, a system user `nrtprof` for the daemon and a group
# `nrtprof-users` for the people who may profile with it; then starts the service if systemd
# runs. Run as root from a checkout, after `bazel build --config=opt //client:nrtprof
# //daemon:nrtprofd //shim:libnrtprof_shim.so`.
#
#   sudo packaging/install.sh [--bin DIR]     # DIR: the built binaries (default: bazel-bin)
#   DESTDIR=/tmp/stage packaging/install.sh   # files only, under /tmp/stage (no users, no start)
set -euo pipefail

cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
bin=bazel-bin
if [[ "${1:-}" == "--bin" && -n "${2:-}" ]]; then bin=$2; elif [[ $# -ne 0 ]]; then
  echo "usage: packaging/install.sh [--bin DIR]" >&2
  exit 2
fi
for f in client/nrtprof daemon/nrtprofd shim/libnrtprof_shim.so shim/libnrtprof_shim_backend.so; do
  if [[ ! -f "$bin/$f" ]]; then
    echo "install: $bin/$f is missing: build first (bazel build --config=opt //client:nrtprof //daemon:nrtprofd //shim:libnrtprof_shim.so)" >&2
    exit 1
  fi
done
if [[ -z "$DESTDIR" && $(id -u) -ne 0 ]]; then
  echo "install: run as root (or with DESTDIR= to stage the files)" >&2
  exit 1
fi

lib=$DESTDIR$PREFIX/lib/nrtprof
# Side by side: nrtprof finds nrtprofd and the shim beside itself.
install -d -m 0755 "$lib" "$DESTDIR$PREFIX/bin" "$DESTDIR/etc/nrtprof" \
  "$DESTDIR/etc/systemd/system" "$DESTDIR$PREFIX/share/doc/nrtprof"
install -m 0755 "$bin/client/nrtprof" "$bin/daemon/nrtprofd" "$lib/"
install -m 0644 "$bin/shim/libnrtprof_shim.so" "$bin/shim/libnrtprof_shim_backend.so" "$lib/"
ln -sf "$PREFIX/lib/nrtprof/nrtprof" "$DESTDIR$PREFIX/bin/nrtprof"
ln -sf "$PREFIX/lib/nrtprof/nrtprofd" "$DESTDIR$PREFIX/bin/nrtprofd"
sed "s|/usr/local/|$PREFIX/|g" packaging/nrtprofd.service >"$DESTDIR/etc/systemd/system/nrtprofd.service"
chmod 0644 "$DESTDIR/etc/systemd/system/nrtprofd.service"
if [[ ! -e "$DESTDIR/etc/nrtprof/nrtprofd.conf" ]]; then
  install -m 0644 packaging/nrtprofd.conf "$DESTDIR/etc/nrtprof/nrtprofd.conf"
else
  echo "install: keeping the existing /etc/nrtprof/nrtprofd.conf"
fi
install -m 0644 README.md "$DESTDIR$PREFIX/share/doc/nrtprof/README.md"

if [[ -n "$DESTDIR" ]]; then
  echo "install: files staged under $DESTDIR"
  exit 0
fi
getent group nrtprof-users >/dev/null || groupadd --system nrtprof-users
getent passwd nrtprof >/dev/null ||
  useradd --system --no-create-home --home-dir /var/lib/nrtprof --shell /usr/sbin/nologin nrtprof
# The daemon's user must be in the socket's group to give it the socket.
usermod -a -G nrtprof-users nrtprof
if [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
  systemctl enable --now nrtprofd.service
  echo "install: nrtprofd is running (systemctl status nrtprofd)"
else
  echo "install: systemd is not running here; start the daemon with:"
  echo "  $PREFIX/bin/nrtprofd --config /etc/nrtprof/nrtprofd.conf --user nrtprof"
fi
echo "install: add users with: usermod -a -G nrtprof-users NAME (they log in again), and give them"
echo "  export NRTPROF_ADDR=unix:/run/nrtprof/nrtprofd.sock NRTPROF_SERVICE_USER=nrtprof"
