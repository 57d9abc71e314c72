// What nrtprofd does to the machine before it serves: the unix socket's path, folder and
// permissions, the output root, the user it runs as (--user, dropping root once its sockets are
// bound) and who else may connect (--socket_group). Flags are read by nrtprofd_main.cc and
// passed in: nothing here reads one.
//
// Thread-compatible: called once, from the daemon's main thread, before any server starts.
#ifndef NRTPROF_DAEMON_NRTPROFD_SETUP_H_
#define NRTPROF_DAEMON_NRTPROFD_SETUP_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace nrtprof::daemon {

// A path from the current folder, as the daemon will see it once it has moved on.
std::string Absolute(const std::string& path);
// The folder of `path` ("/" for a file at the root).
std::string Parent(const std::string& path);

// The socket's path from --socket (`flag`): PATH, unix:PATH or unix://PATH; relative paths
// from the current folder; empty: the user's default. False, with *error, for anything else.
bool SocketPath(uid_t uid, const std::string& flag, std::string* path, std::string* error);

// Who may reach the socket: its user only, or also the members of --socket_group (a shared
// service), with the folders' and the socket's modes for each.
struct Access {
  std::optional<gid_t> group;
  mode_t folder_mode() const { return group ? 0750 : 0700; }
  mode_t socket_mode() const { return group ? 0660 : 0600; }
  // Shims write their spool files here: with a group, each member its own, which the sticky
  // bit keeps the others from removing or renaming.
  mode_t spool_mode() const { return group ? 01770 : 0700; }
};


// Gives a folder or socket `reach`'s group and `mode`, whatever the umask.
absl::Status Restrict(const std::string& path, mode_t mode, const Access& reach);

// The socket's folder: made if missing, private to the daemon's user (or shared with
// --socket_group only to connect). The default one (`is_default`) must be ours.
absl::Status PrepareSocketFolder(const std::string& socket, bool is_default, const Access& reach);

// Refuses a socket another daemon listens on; removes a stale one (nobody listening).
absl::Status ClaimSocket(const std::string& path);

// The output root: made if missing, each folder checked on the way.
absl::Status PrepareOutputRoot(const std::string& root);

// The user --user names.
struct RunAs {
  std::string name;
  uid_t uid;
  gid_t gid;
};


// Checks --user (`name`) against who started the daemon: root must name one to listen on TCP,
// and only root can become another user. False with a flag error (exit 2).
bool ResolveUser(const std::string& name, bool listens_on_tcp, std::optional<RunAs>* run_as,
                 std::string* error);

// --socket_group (`name`): a group name or gid.
bool ResolveGroup(const std::string& name, Access* access, std::string* error);

// Becomes `user` (its groups, its group, then the user), and checks that root cannot be had
// back.
absl::Status DropPrivileges(const RunAs& user);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_NRTPROFD_SETUP_H_
