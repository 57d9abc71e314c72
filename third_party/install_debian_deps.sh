#!/usr/bin/env bash
# Installs the Debian packages nrtprof builds, runs and tests with, when any is missing.
# Safe to run twice: with everything present it only says so. Needs root or sudo to install.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3, builds offline with third_party/'s stand-ins
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libunwind-dev
  libssl-dev               # the shim backend initializes gRPC's OpenSSL itself (shim/backend.cc)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3                  # a few end-to-end tests drive programs through ctypes and parse JSON
  python3-dev              # CPython's headers, for the Python extension module example
  clang libclang-rt-14-dev # the libFuzzer targets (tests/fuzz): clang 14, libFuzzer, ASan, UBSan
  openssl                  # the TCP/TLS tests make their CA, certificates and tokens with it
  systemd                  # systemd-analyze verify checks packaging/nrtprofd.service
  libcpp-httplib-dev       # nrtprofd's /metrics endpoint (--metrics_listen)
  liblz4-dev libzstd-dev   # the flight recorder compresses the batches it keeps
  zlib1g-dev               # model files' CRC-32 (sim/), reading the Perfetto trace's bundles
  libdeflate-dev           # ... and deflating them when nrtprofd writes trace.pftrace
  prometheus               # the metrics test scrapes nrtprofd with a real Prometheus server
  curl                     # ... and asks it over its HTTP API
  libcurl4-openssl-dev     # the fleet store: inserts and queries over ClickHouse's HTTP interface
  clickhouse-server        # the fleet store test runs a real ClickHouse server (18.16) on loopback
  clickhouse-client
  time                     # GNU time: examples_test checks the examples' peak memory
  chromium fonts-dejavu-core  # report_browser_test opens `nrtprof report`'s page headless
  tmux                     # top_test runs `nrtprof top` in a terminal and reads its screen
  libfaketime              # capture_hosts_test runs a daemon whose clocks are 250 ms ahead
  golang-go                # Go 1.19's `go tool pprof` reads nrtprof export's profiles in pprof_export_test
  python3-torch libtorch-dev  # PyTorch 1.13: the shim's PyTorch lane (shim/torch/) builds against it; torch_lane_test runs it
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "nrtprof: all ${#PACKAGES[@]} Debian packages it needs are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "nrtprof: missing Debian packages (${missing[*]}) and not root; install them as root" >&2
    exit 1
  fi
  SUDO=sudo
fi
echo "nrtprof: installing missing Debian packages: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "nrtprof: Debian packages installed"
