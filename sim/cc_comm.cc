// A rank's communicator: joining the group through NEURON_RT_ROOT_COMM_ID (the root's listener,
// the handshake and its checks), and running one collective over either transport — one
// shared-memory segment for ranks of one host, TCP through the root otherwise — with the
// reductions. One file of about 850 lines on purpose: the two transports share the group's
// wire format, its checks of everything a peer sends, and how a broken peer breaks the
// communicator; split, each half would need the other's internals.
#include "cc_comm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bf16.h"
#include "runtime.h"

namespace nrtsim {
namespace {

constexpr uint32_t kVersion = 2;  // 2: a fourth channel (models' collectives)
constexpr char kHelloMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'C', 'H'};
constexpr char kWelcomeMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'C', 'W'};
constexpr char kAckMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'C', 'A'};
constexpr char kDataMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'C', 'D'};
constexpr char kReplyMagic[8] = {'N', 'R', 'T', 'S', 'I', 'M', 'C', 'R'};
constexpr uint64_t kShmMagic = 0x4d48534343534e52ull;  // "RNSCCSHM"
constexpr uint64_t kMaxCcBytes = 1ull << 32;           // 4 GiB per rank and collective
constexpr uint64_t kHandshakeMs = 2000;                // a connection's handshake, at most

// What a rank says first on each connection to the root. Conn 0: control; 1..3: channel 0..2.
struct Hello {
  char magic[8];
  uint32_t version;
  uint32_t size;
  uint32_t rank;
  uint32_t conn;
  uint32_t uid;
  uint32_t force_tcp;
  char host[64];
};
struct Welcome {
  char magic[8];
  uint32_t version;
  uint32_t transport;  // 0 shared memory, 1 TCP
  uint32_t hosts;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t shm_bytes;
  char shm_name[64];
};
struct Ack {
  char magic[8];
  uint32_t ok;
  uint32_t reserved;
};
struct DataHeader {
  char magic[8];
  uint64_t seq;
  uint32_t cc_op, reduce, dtype, rank;
  uint64_t in_bytes, out_bytes, ready_ns;
};
struct Reply {
  char magic[8];
  uint64_t seq;
  uint64_t start_ns;
  uint64_t out_bytes;
};

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

int RemainingMs(uint64_t deadline_ms) {
  const uint64_t now = NowMs();
  return now >= deadline_ms ? 0 : static_cast<int>(std::min<uint64_t>(deadline_ms - now, INT_MAX));
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

// Moves all of `len` bytes, waiting at most until `deadline_ms`.
absl::Status SendAll(int fd, const void* data, size_t len, uint64_t deadline_ms) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    const int r = poll(&pfd, 1, RemainingMs(deadline_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("timed out sending");
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno("send");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t len, uint64_t deadline_ms) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int r = poll(&pfd, 1, RemainingMs(deadline_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("timed out waiting");
    const ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("the connection was closed");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno("recv");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SplitHostPort(const std::string& id, std::string* host, std::string* port) {
  const size_t colon = id.rfind(':');
  uint32_t p = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(id.substr(colon + 1), &p) || p == 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("NEURON_RT_ROOT_COMM_ID='", id, "' is not host:port"));
  }
  *host = id.substr(0, colon);
  if (host->size() > 2 && (*host)[0] == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = std::to_string(p);
  return absl::OkStatus();
}

std::string PeerName(int fd) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

// The uid owning the other end of a TCP connection from this machine's loopback (IPv4), from
// /proc/net/tcp; -1 when the peer is not on loopback or not found.
int64_t LoopbackPeerUid(int fd) {
  sockaddr_in addr;
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET || (ntohl(addr.sin_addr.s_addr) >> 24) != 127) {
    return -1;
  }
  char want[32];
  snprintf(want, sizeof(want), "%08X:%04X", addr.sin_addr.s_addr, ntohs(addr.sin_port));
  std::ifstream in("/proc/net/tcp");
  std::string line;
  while (std::getline(in, line)) {
    char local[64];
    unsigned uid = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid
    if (sscanf(line.c_str(), " %*s %63s %*s %*s %*s %*s %*s %u", local, &uid) == 2 &&
        strcmp(local, want) == 0) {
      return uid;
    }
  }
  return -1;
}

void CloseAll(std::vector<int>* fds) {
  for (int& fd : *fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

float Load(uint32_t dtype, const uint8_t* p) {
  if (dtype == 0x6) {
    uint16_t b;
    memcpy(&b, p, 2);
    return Bf16ToFloat(b);
  }
  float f;
  memcpy(&f, p, 4);
  return f;
}

void Store(uint32_t dtype, float f, uint8_t* p) {
  if (dtype == 0x6) {
    const uint16_t b = FloatToBf16(f);
    memcpy(p, &b, 2);
  } else {
    memcpy(p, &f, 4);
  }
}

float Combine(uint32_t reduce, float a, float b) {
  switch (reduce) {
    case 2:
      return std::max(a, b);
    case 3:
      return std::min(a, b);
    default:
      return a + b;
  }
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

const char* CcOpName(uint32_t cc_op) {
  switch (cc_op) {
    case 0:
      return "all_gather";
    case 1:
      return "all_reduce";
    case 2:
      return "reduce_scatter";
  }
  return "unknown";
}

const char* CcReduceName(uint32_t reduce) {
  return reduce == 0 ? "add" : reduce == 2 ? "max" : reduce == 3 ? "min" : "unknown";
}

const char* CcDtypeName(uint32_t dtype) {
  return dtype == 0xA ? "float32" : dtype == 0x6 ? "bfloat16" : "unknown";
}

void CcCompute(const CcOp& op, uint32_t n, const std::vector<const uint8_t*>& inputs,
               uint64_t offset, uint64_t len, uint32_t rank, uint8_t* out) {
  const uint64_t elem = op.dtype == 0x6 ? 2 : 4;
  if (op.cc_op == 0) {  // all-gather: rank j's input lands at j * in_bytes
    for (uint32_t j = 0; j < n; ++j) memcpy(out + j * op.in_bytes + offset, inputs[j], len);
    return;
  }
  // All-reduce: the whole input; reduce-scatter: this rank's share of it.
  uint64_t lo = offset, hi = offset + len, base = 0;
  if (op.cc_op == 2) {
    base = static_cast<uint64_t>(rank) * op.out_bytes;
    lo = std::max(lo, base);
    hi = std::min(hi, base + op.out_bytes);
  }
  for (uint64_t x = lo; x + elem <= hi; x += elem) {
    float acc = Load(op.dtype, inputs[0] + (x - offset));
    for (uint32_t j = 1; j < n; ++j) {
      acc = Combine(op.reduce, acc, Load(op.dtype, inputs[j] + (x - offset)));
    }
    Store(op.dtype, acc, out + (x - base));
  }
}

absl::Status CcOptionsFromEnvironment(CcJoinOptions* options) {
  if (const char* v = std::getenv("NEURON_RT_ROOT_COMM_ID"); v != nullptr) {
    options->root_comm_id = v;
  }
  if (const char* v = std::getenv("NRT_SIM_CC_TIMEOUT_MS"); v != nullptr) {
    uint64_t ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms < 1 || ms > 3600000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NRT_SIM_CC_TIMEOUT_MS='", v, "' is not a whole number from 1 to 3600000"));
    }
    options->timeout_ms = ms;
  }
  if (const char* v = std::getenv("NRT_SIM_CC_TRANSPORT"); v != nullptr) {
    const std::string t = v;
    if (t != "auto" && t != "tcp") {
      return absl::InvalidArgumentError(
          absl::StrCat("NRT_SIM_CC_TRANSPORT='", v, "' is neither auto nor tcp"));
    }
    options->force_tcp = t == "tcp";
  }
  if (const char* v = std::getenv("NRT_SIM_HOST_ID"); v != nullptr && v[0] != '\0') {
    options->host_id = v;
  } else {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    options->host_id = name;
  }
  if (options->host_id.size() >= sizeof(Hello::host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NRT_SIM_HOST_ID='", options->host_id, "' is longer than 63 bytes"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Shared memory

struct ShmHeader {
  uint64_t magic;
  uint32_t size;
  uint32_t version;
  uint64_t slot_bytes;
  std::atomic<uint32_t> bell[kCcChannels];  // bumped (and futex-woken) at each phase change
  std::atomic<uint32_t> left;               // 1 + the rank that failed or left; 0: none
};

struct alignas(64) ShmRank {
  std::atomic<uint64_t> phase;
  uint64_t seq;
  uint32_t cc_op, reduce, dtype, reserved;
  uint64_t in_bytes, out_bytes, ready_ns;
};

struct CcComm::Shm {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  uint64_t phase[kCcChannels] = {};
  ShmHeader* header() const { return reinterpret_cast<ShmHeader*>(base); }
  ShmRank* rank(uint32_t size, int channel, uint32_t r) const {
    return reinterpret_cast<ShmRank*>(base + 256) + channel * size + r;
  }
  uint8_t* slot(uint32_t size, int channel, uint32_t r) const {
    const size_t states = 256 + sizeof(ShmRank) * kCcChannels * size;
    return base + ((states + 4095) & ~size_t{4095}) +
           (static_cast<size_t>(channel) * size + r) * header()->slot_bytes;
  }
  static size_t Bytes(uint32_t size, uint64_t slot_bytes) {
    const size_t states = 256 + sizeof(ShmRank) * kCcChannels * size;
    return ((states + 4095) & ~size_t{4095}) + kCcChannels * size * slot_bytes;
  }
};

namespace {

uint64_t SlotBytes(uint32_t size) {
  // 64 MiB of slots at most in all (touched only as used), 64 KiB to 1 MiB per rank.
  uint64_t slot = (64ull << 20) / (kCcChannels * static_cast<uint64_t>(size));
  slot = std::clamp<uint64_t>(slot, 64 << 10, 1 << 20);
  return slot & ~uint64_t{4095};
}

absl::StatusOr<uint8_t*> MapShm(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Errno("mmap of the shared segment");
  return static_cast<uint8_t*>(p);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Joining

absl::StatusOr<std::unique_ptr<CcComm>> CcComm::Join(const CcJoinOptions& o) {
  std::unique_ptr<CcComm> comm(new CcComm());
  comm->rank_ = o.rank;
  comm->size_ = o.size;
  comm->timeout_ms_ = o.timeout_ms;
  comm->control_.assign(o.size, -1);
  for (auto& d : comm->data_) d.assign(o.size, -1);
  if (o.size == 1) return comm;
  std::string host, port;
  if (absl::Status s = SplitHostPort(o.root_comm_id, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("NEURON_RT_ROOT_COMM_ID='", o.root_comm_id,
                                                   "': cannot resolve ", host, ": ",
                                                   gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addrs(found, &freeaddrinfo);
  const uint64_t deadline = NowMs() + o.timeout_ms;
  const uint32_t uid = static_cast<uint32_t>(geteuid());

  if (o.rank != 0) {
    // Connect: control first, then one per channel; the root may not listen yet.
    for (int conn = 0; conn <= kCcChannels; ++conn) {
      int fd = -1;
      for (;;) {
        fd = socket(addrs->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return Errno("socket");
        if (connect(fd, addrs->ai_addr, addrs->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
        if (RemainingMs(deadline) == 0) {
          return absl::DeadlineExceededError(absl::StrCat(
              "rank 0 did not answer at ", o.root_comm_id, " within ", o.timeout_ms, " ms"));
        }
        usleep(20000);
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      (conn == 0 ? comm->control_[0] : comm->data_[conn - 1][0]) = fd;
      Hello h{};
      memcpy(h.magic, kHelloMagic, 8);
      h.version = kVersion;
      h.size = o.size;
      h.rank = o.rank;
      h.conn = static_cast<uint32_t>(conn);
      h.uid = uid;
      h.force_tcp = o.force_tcp ? 1 : 0;
      snprintf(h.host, sizeof(h.host), "%s", o.host_id.c_str());
      if (absl::Status s = SendAll(fd, &h, sizeof(h), deadline); !s.ok()) {
        return absl::UnavailableError(absl::StrCat("handshake with rank 0 at ", o.root_comm_id,
                                                   ": ", s.message()));
      }
    }
    Welcome w{};
    const int control = comm->control_[0];
    if (absl::Status s = RecvAll(control, &w, sizeof(w), deadline); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("waiting for rank 0 at ", o.root_comm_id,
                                                 " to admit this rank: ", s.message()));
    }
    w.shm_name[sizeof(w.shm_name) - 1] = '\0';
    if (memcmp(w.magic, kWelcomeMagic, 8) != 0 || w.version != kVersion || w.transport > 1 ||
        w.hosts < 1 || w.hosts > o.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the process at ", o.root_comm_id, " is not a simulated runtime's rank 0 (bad reply)"));
    }
    comm->hosts_ = w.hosts;
    if (w.transport == 0) {
      const std::string name = w.shm_name;
      if (name.rfind("/nrtsim-cc-", 0) != 0 || name.find('/', 1) != std::string::npos ||
          w.slot_bytes != SlotBytes(o.size) || w.shm_bytes != Shm::Bytes(o.size, w.slot_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank 0 at ", o.root_comm_id, " named a malformed shared segment"));
      }
      const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
      if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
      struct stat st;
      const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid &&
                      (st.st_mode & 077) == 0 &&
                      static_cast<uint64_t>(st.st_size) == w.shm_bytes;
      if (!ok) {
        close(fd);
        return absl::PermissionDeniedError(absl::StrCat(
            "shared segment ", name, " is not this user's own private segment: refused"));
      }
      absl::StatusOr<uint8_t*> base = MapShm(fd, w.shm_bytes);
      close(fd);
      if (!base.ok()) return base.status();
      comm->shm_ = new Shm();
      comm->shm_->base = *base;
      comm->shm_->bytes = w.shm_bytes;
      const ShmHeader* hd = comm->shm_->header();
      if (hd->magic != kShmMagic || hd->size != o.size || hd->slot_bytes != w.slot_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("shared segment ", name, " is malformed"));
      }
    }
    Ack a{};
    memcpy(a.magic, kAckMagic, 8);
    a.ok = 1;
    if (absl::Status s = SendAll(control, &a, sizeof(a), deadline); !s.ok()) return s;
    Ack go{};
    if (absl::Status s = RecvAll(control, &go, sizeof(go), deadline); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("waiting for the group to form: ", s.message()));
    }
    if (memcmp(go.magic, kAckMagic, 8) != 0 || go.ok != 1) {
      return absl::UnavailableError("rank 0 gave up forming the group");
    }
    return comm;
  }

  // Rank 0: listen, admit every other rank's connections, tell them how to exchange data.
  const int listener = socket(addrs->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return Errno("socket");
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listener, addrs->ai_addr, addrs->ai_addrlen) != 0 || listen(listener, 1024) != 0) {
    absl::Status s = Errno(absl::StrCat("listening at NEURON_RT_ROOT_COMM_ID=", o.root_comm_id));
    close(listener);
    return s;
  }
  std::vector<std::string> hosts(o.size);
  hosts[0] = o.host_id;
  bool force_tcp = o.force_tcp;
  uint32_t admitted = 0;
  const uint32_t needed = (o.size - 1) * (kCcChannels + 1);
  while (admitted < needed) {
    pollfd pfd{listener, POLLIN, 0};
    const int r = poll(&pfd, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      close(listener);
      std::vector<uint32_t> missing;
      for (uint32_t k = 1; k < o.size; ++k) {
        if (comm->control_[k] < 0 || comm->data_[kCcChannels - 1][k] < 0) missing.push_back(k);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "rank(s) ", absl::StrJoin(missing, ","), " did not join within ", o.timeout_ms,
          " ms"));
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string who = PeerName(fd);
    const auto refuse = [&](const std::string& why) {
      ReportError(absl::StrCat("nrt_cc_global_comm_init: refused a connection from ", who,
                               ": ", why));
      close(fd);
    };
    const int64_t peer_uid = LoopbackPeerUid(fd);
    if (peer_uid >= 0 && peer_uid != uid) {
      refuse(absl::StrCat("a process of another user (uid ", peer_uid, ")"));
      continue;
    }
    Hello h{};
    if (absl::Status s = RecvAll(fd, &h, sizeof(h),
                                 std::min(deadline, NowMs() + kHandshakeMs));
        !s.ok()) {
      refuse(absl::StrCat("no handshake (", s.message(), ")"));
      continue;
    }
    h.host[sizeof(h.host) - 1] = '\0';
    if (memcmp(h.magic, kHelloMagic, 8) != 0) {
      refuse("not a rank of the simulated runtime (bad handshake)");
      continue;
    }
    if (h.version != kVersion) {
      refuse(absl::StrCat("protocol version ", h.version, ", this runtime speaks ", kVersion));
      continue;
    }
    if (h.size != o.size) {
      refuse(absl::StrCat("a group of ", h.size, " ranks, this one has ", o.size));
      continue;
    }
    if (h.rank == 0 || h.rank >= o.size || h.conn > kCcChannels) {
      refuse(absl::StrCat("rank ", h.rank, " connection ", h.conn, " is out of range"));
      continue;
    }
    if (h.uid != uid) {
      refuse(absl::StrCat("a rank of another user (uid ", h.uid, ")"));
      continue;
    }
    int& slot = h.conn == 0 ? comm->control_[h.rank] : comm->data_[h.conn - 1][h.rank];
    if (slot >= 0) {
      refuse(absl::StrCat("rank ", h.rank, " has joined already"));
      continue;
    }
    slot = fd;
    if (h.conn == 0) hosts[h.rank] = h.host;
    if (h.force_tcp != 0) force_tcp = true;
    ++admitted;
  }
  close(listener);
  std::set<std::string> distinct(hosts.begin(), hosts.end());
  comm->hosts_ = static_cast<uint32_t>(distinct.size());
  Welcome w{};
  memcpy(w.magic, kWelcomeMagic, 8);
  w.version = kVersion;
  w.hosts = comm->hosts_;
  w.transport = force_tcp || comm->hosts_ > 1 ? 1 : 0;
  std::string shm_name;
  if (w.transport == 0) {
    uint8_t random[8] = {0};
    if (getrandom(random, sizeof(random), 0) != sizeof(random)) return Errno("getrandom");
    shm_name = absl::StrCat("/nrtsim-cc-", uid, "-", getpid(), "-");
    for (uint8_t b : random) absl::StrAppend(&shm_name, absl::Hex(b, absl::kZeroPad2));
    w.slot_bytes = SlotBytes(o.size);
    w.shm_bytes = Shm::Bytes(o.size, w.slot_bytes);
    const int fd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Errno(absl::StrCat("shm_open ", shm_name));
    absl::StatusOr<uint8_t*> base =
        ftruncate(fd, static_cast<off_t>(w.shm_bytes)) == 0 ? MapShm(fd, w.shm_bytes)
                                                             : Errno("ftruncate");
    close(fd);
    if (!base.ok()) {
      shm_unlink(shm_name.c_str());
      return base.status();
    }
    comm->shm_ = new Shm();
    comm->shm_->base = *base;
    comm->shm_->bytes = w.shm_bytes;
    ShmHeader* hd = comm->shm_->header();
    hd->size = o.size;
    hd->version = kVersion;
    hd->slot_bytes = w.slot_bytes;
    hd->magic = kShmMagic;
    snprintf(w.shm_name, sizeof(w.shm_name), "%s", shm_name.c_str());
  }
  absl::Status status;
  for (uint32_t k = 1; k < o.size && status.ok(); ++k) {
    status = SendAll(comm->control_[k], &w, sizeof(w), deadline);
  }
  for (uint32_t k = 1; k < o.size && status.ok(); ++k) {
    Ack a{};
    status = RecvAll(comm->control_[k], &a, sizeof(a), deadline);
    if (status.ok() && (memcmp(a.magic, kAckMagic, 8) != 0 || a.ok != 1)) {
      status = absl::UnavailableError(absl::StrCat("rank ", k, " could not join"));
    } else if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("rank ", k, ": ", status.message()));
    }
  }
  // Every rank holds the segment now (or never will): its name goes.
  if (!shm_name.empty()) shm_unlink(shm_name.c_str());
  if (!status.ok()) return status;
  Ack go{};
  memcpy(go.magic, kAckMagic, 8);
  go.ok = 1;
  for (uint32_t k = 1; k < o.size && status.ok(); ++k) {
    status = SendAll(comm->control_[k], &go, sizeof(go), deadline);
  }
  if (!status.ok()) return status;
  return comm;
}

CcComm::~CcComm() {
  Abort();
  CloseAll(&control_);
  for (auto& d : data_) CloseAll(&d);
  if (shm_ != nullptr) {
    munmap(shm_->base, shm_->bytes);
    delete shm_;
  }
}

void CcComm::Abort() {
  aborted_.store(true);
  broken_.store(true);
  if (shm_ != nullptr) {
    uint32_t none = 0;
    shm_->header()->left.compare_exchange_strong(none, rank_ + 1);
    for (int c = 0; c < kCcChannels; ++c) {
      shm_->header()->bell[c].fetch_add(1);
      Futex(&shm_->header()->bell[c], FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
  // Wakes whoever waits on a socket; they are closed by the destructor.
  for (int fd : control_) {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
  for (auto& d : data_) {
    for (int fd : d) {
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
  }
}

absl::Status CcComm::Broken(absl::Status status) {
  const bool aborted = aborted_.load();
  Abort();
  aborted_.store(aborted);
  return status;
}

absl::Status CcComm::Run(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                         uint64_t ready_ns, uint64_t* start_ns) {
  if (aborted_.load()) return absl::CancelledError("the runtime is closing");
  if (broken_.load()) {
    return absl::FailedPreconditionError("the communicator failed in an earlier collective");
  }
  if (size_ == 1) {
    std::vector<const uint8_t*> inputs{in};
    CcCompute(op, 1, inputs, 0, op.in_bytes, 0, out);
    *start_ns = ready_ns;
    return absl::OkStatus();
  }
  return shm_ != nullptr ? RunShm(channel, op, in, out, ready_ns, start_ns)
                         : RunTcp(channel, op, in, out, ready_ns, start_ns);
}

absl::Status CcComm::ShmWait(int channel, uint64_t phase, uint64_t deadline_ms) {
  ShmHeader* hd = shm_->header();
  for (;;) {
    if (aborted_.load()) return absl::CancelledError("the runtime is closing");
    const uint32_t bell = hd->bell[channel].load(std::memory_order_acquire);
    // Read before the phases: a rank leaves after it saw everyone reach its last phase, so
    // once its leaving is seen, so are those phases. Read after them, a rank seen behind could
    // have come, and the leaver finished and gone, in between: with 64 ranks on two cores a
    // rank descheduled there failed a collective every rank had completed.
    const uint32_t left = hd->left.load(std::memory_order_acquire);
    std::vector<uint32_t> behind;
    for (uint32_t r = 0; r < size_; ++r) {
      if (shm_->rank(size_, channel, r)->phase.load(std::memory_order_acquire) < phase) {
        behind.push_back(r);
      }
    }
    // Everyone got here: a rank that has left since (closing after its last collective) does
    // not fail this one.
    if (behind.empty()) return absl::OkStatus();
    if (left != 0) {
      return absl::UnavailableError(
          absl::StrCat("rank ", left - 1, " failed or left the group"));
    }
    const int remaining = RemainingMs(deadline_ms);
    if (remaining == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank(s) ", absl::StrJoin(behind, ","),
                       " did not reach the collective within ", timeout_ms_, " ms"));
    }
    const int slice = std::min(remaining, 50);
    timespec ts{slice / 1000, static_cast<long>(slice % 1000) * 1000000};
    Futex(&hd->bell[channel], FUTEX_WAIT, bell, &ts);
  }
}

absl::Status CcComm::RunShm(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                            uint64_t ready_ns, uint64_t* start_ns) {
  ShmHeader* hd = shm_->header();
  const uint64_t slot = hd->slot_bytes;
  const uint64_t seq = ++seq_[channel];
  ShmRank* me = shm_->rank(size_, channel, rank_);
  me->seq = seq;
  me->cc_op = op.cc_op;
  me->reduce = op.reduce;
  me->dtype = op.dtype;
  me->in_bytes = op.in_bytes;
  me->out_bytes = op.out_bytes;
  me->ready_ns = ready_ns;
  const uint64_t deadline = NowMs() + timeout_ms_;
  const uint64_t chunks = op.in_bytes == 0 ? 1 : (op.in_bytes + slot - 1) / slot;
  std::vector<const uint8_t*> inputs(size_);
  const auto advance = [&]() -> absl::Status {
    me->phase.store(++shm_->phase[channel], std::memory_order_release);
    hd->bell[channel].fetch_add(1, std::memory_order_acq_rel);
    Futex(&hd->bell[channel], FUTEX_WAKE, INT_MAX, nullptr);
    return ShmWait(channel, shm_->phase[channel], deadline);
  };
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t offset = k * slot;
    const uint64_t len = std::min(slot, op.in_bytes - offset);
    memcpy(shm_->slot(size_, channel, rank_), in + offset, len);
    if (absl::Status s = advance(); !s.ok()) return Broken(s);
    if (k == 0) {
      uint64_t start = ready_ns;
      for (uint32_t r = 0; r < size_; ++r) {
        const ShmRank* p = shm_->rank(size_, channel, r);
        if (p->seq != seq || p->cc_op != op.cc_op || p->reduce != op.reduce ||
            p->dtype != op.dtype || p->in_bytes != op.in_bytes || p->out_bytes != op.out_bytes) {
          return Broken(absl::InvalidArgumentError(absl::StrCat(
              "rank ", r, " scheduled another collective as its number ", p->seq,
              " on this queue (", CcOpName(p->cc_op), " ", CcReduceName(p->reduce), " ",
              CcDtypeName(p->dtype), ", ", p->in_bytes, " bytes in) than rank ", rank_,
              "'s number ", seq, " (", CcOpName(op.cc_op), " ", CcReduceName(op.reduce), " ",
              CcDtypeName(op.dtype), ", ", op.in_bytes, " bytes in)")));
        }
        start = std::max(start, p->ready_ns);
      }
      *start_ns = start;
    }
    for (uint32_t r = 0; r < size_; ++r) inputs[r] = shm_->slot(size_, channel, r);
    CcCompute(op, size_, inputs, offset, len, rank_, out);
    // Nobody writes its slot again before everybody has read this part.
    if (absl::Status s = advance(); !s.ok()) return Broken(s);
  }
  return absl::OkStatus();
}

absl::Status CcComm::RunTcp(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                            uint64_t ready_ns, uint64_t* start_ns) {
  const uint64_t seq = ++seq_[channel];
  const uint64_t deadline = NowMs() + timeout_ms_;
  std::vector<int>& fds = data_[channel];
  const auto failed = [&](uint32_t r, const absl::Status& s) {
    const std::string who = rank_ == 0 ? absl::StrCat("rank ", r) : std::string("rank 0");
    if (absl::IsDeadlineExceeded(s)) {
      return Broken(absl::DeadlineExceededError(absl::StrCat(
          who, " did not reach the collective within ", timeout_ms_, " ms")));
    }
    return Broken(absl::Status(s.code(), absl::StrCat(who, ": ", s.message())));
  };
  if (rank_ != 0) {
    DataHeader h{};
    memcpy(h.magic, kDataMagic, 8);
    h.seq = seq;
    h.cc_op = op.cc_op;
    h.reduce = op.reduce;
    h.dtype = op.dtype;
    h.rank = rank_;
    h.in_bytes = op.in_bytes;
    h.out_bytes = op.out_bytes;
    h.ready_ns = ready_ns;
    absl::Status s = SendAll(fds[0], &h, sizeof(h), deadline);
    if (s.ok()) s = SendAll(fds[0], in, op.in_bytes, deadline);
    Reply reply{};
    if (s.ok()) s = RecvAll(fds[0], &reply, sizeof(reply), deadline);
    if (!s.ok()) return failed(0, s);
    if (memcmp(reply.magic, kReplyMagic, 8) != 0 || reply.seq != seq ||
        reply.out_bytes != op.out_bytes) {
      return Broken(absl::InvalidArgumentError("rank 0 sent a malformed reply"));
    }
    if (absl::Status r = RecvAll(fds[0], out, op.out_bytes, deadline); !r.ok()) {
      return failed(0, r);
    }
    *start_ns = reply.start_ns;
    return absl::OkStatus();
  }
  // Rank 0: every rank's input, in rank order; then each rank's output.
  std::vector<std::vector<uint8_t>> received(size_);
  std::vector<const uint8_t*> inputs(size_);
  inputs[0] = in;
  uint64_t start = ready_ns;
  for (uint32_t r = 1; r < size_; ++r) {
    DataHeader h{};
    if (absl::Status s = RecvAll(fds[r], &h, sizeof(h), deadline); !s.ok()) return failed(r, s);
    if (memcmp(h.magic, kDataMagic, 8) != 0 || h.rank != r) {
      return Broken(absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " sent a malformed collective")));
    }
    if (h.seq != seq || h.cc_op != op.cc_op || h.reduce != op.reduce || h.dtype != op.dtype ||
        h.in_bytes != op.in_bytes || h.out_bytes != op.out_bytes || h.in_bytes > kMaxCcBytes) {
      return Broken(absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " scheduled another collective as its number ", h.seq,
          " on this queue (", CcOpName(h.cc_op), " ", CcReduceName(h.reduce), " ",
          CcDtypeName(h.dtype), ", ", h.in_bytes, " bytes in) than rank 0's number ", seq, " (",
          CcOpName(op.cc_op), " ", CcReduceName(op.reduce), " ", CcDtypeName(op.dtype), ", ",
          op.in_bytes, " bytes in)")));
    }
    received[r].resize(h.in_bytes);
    if (absl::Status s = RecvAll(fds[r], received[r].data(), h.in_bytes, deadline); !s.ok()) {
      return failed(r, s);
    }
    inputs[r] = received[r].data();
    start = std::max(start, h.ready_ns);
  }
  std::vector<uint8_t> result(op.out_bytes);
  for (uint32_t r = 1; r < size_; ++r) {
    // All-gather and all-reduce give every rank the same output: computed once.
    if (r == 1 || op.cc_op == 2) CcCompute(op, size_, inputs, 0, op.in_bytes, r, result.data());
    Reply reply{};
    memcpy(reply.magic, kReplyMagic, 8);
    reply.seq = seq;
    reply.start_ns = start;
    reply.out_bytes = op.out_bytes;
    absl::Status s = SendAll(fds[r], &reply, sizeof(reply), deadline);
    if (s.ok()) s = SendAll(fds[r], result.data(), result.size(), deadline);
    if (!s.ok()) return failed(r, s);
  }
  CcCompute(op, size_, inputs, 0, op.in_bytes, 0, out);
  *start_ns = start;
  return absl::OkStatus();
}

}  // namespace nrtsim
