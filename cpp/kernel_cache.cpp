// The kernel cache: a verified private directory, mkdtemp build directories, O_EXCL|O_NOFOLLOW files
// published by rename, a key + SHA-256 trailer checked before dlopen, per-key in-flight builds.
#include "kernel_cache.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "error.h"
#include "sha256.h"

extern char** environ;

namespace ember::kcache {
namespace {

// The trailer after each artifact's bytes: hash(kind, key) (64 hex) + SHA-256 of the payload (64 hex) +
// the payload's length (16 hex) + a magic. ELF loaders ignore bytes past the section headers.
constexpr const char* kMagic = "EMBERKC1";
constexpr size_t kTrailer = 64 + 64 + 16 + 8;

std::string trailer(const std::string& name, const std::string& payload) {
  char len[17];
  std::snprintf(len, sizeof len, "%016llx", (unsigned long long)payload.size());
  return name + sha256_hex(payload) + len + kMagic;
}

// The payload of `data` if its trailer is intact and names `name`; false otherwise.
bool verify(const std::string& data, const std::string& name, std::string* payload) {
  if (data.size() < kTrailer) return false;
  const size_t n = data.size() - kTrailer;
  if (data.compare(data.size() - 8, 8, kMagic) != 0 || data.compare(n, 64, name) != 0) return false;
  char len[17];
  std::snprintf(len, sizeof len, "%016llx", (unsigned long long)n);
  if (data.compare(n + 128, 16, len) != 0) return false;
  if (data.compare(n + 64, 64, sha256_hex(data.data(), n)) != 0) return false;
  if (payload) payload->assign(data, 0, n);
  return true;
}

bool read_fd(int fd, std::string* out) {
  out->clear();
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) return true;
    out->append(buf, (size_t)r);
  }
}

bool write_all(int fd, const char* p, size_t n) {
  while (n) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= (size_t)w;
  }
  return true;
}

std::string errstr() { return std::strerror(errno); }
std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", (unsigned)(m & 07777));
  return b;
}

// Removes a directory tree without following links (entries are unlinked, never traversed through).
void rm_tree_at(int parent, const char* name) {
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ::unlinkat(parent, name, 0);
    return;
  }
  if (DIR* d = ::fdopendir(fd)) {
    while (dirent* e = ::readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
      struct stat st;
      if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        rm_tree_at(fd, e->d_name);
      else
        ::unlinkat(fd, e->d_name, 0);
    }
    ::closedir(d);  // closes fd
  } else {
    ::close(fd);
  }
  ::unlinkat(parent, name, AT_REMOVEDIR);
}
void rm_tree(const std::string& path) { rm_tree_at(AT_FDCWD, path.c_str()); }

std::vector<std::string> split(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < p.size()) {
    const size_t j = p.find('/', i);
    const size_t e = j == std::string::npos ? p.size() : j;
    if (e > i) out.push_back(p.substr(i, e - i));
    i = e + 1;
  }
  return out;
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char buf[4096];
  if (!::getcwd(buf, sizeof buf)) return "/" + p;
  return std::string(buf) + "/" + p;
}

std::string tmp_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t == '/' ? std::string(t) : std::string("/tmp");
}

// One mutex guards every cache's bookkeeping (never held while a compiler runs). It is taken across
// fork(), so the child never inherits it locked; the child forgets builds its parent's threads had in
// flight (their condition variables are leaked, never touched: waking them could block).
std::mutex g_mu;
std::string g_loader_tag;  // set_loader_tag
struct InFlight {
  std::condition_variable cv;
  bool done = false;
};
using InFlightMap = std::map<std::string, std::shared_ptr<InFlight>>;
std::vector<InFlightMap*>& registry() {
  static auto* r = new std::vector<InFlightMap*>();
  return *r;
}
std::map<std::string, std::string>& compiler_ids() {
  static auto* m = new std::map<std::string, std::string>();
  return *m;
}
void fork_prepare() { g_mu.lock(); }
void fork_parent() { g_mu.unlock(); }
void fork_child() {
  for (InFlightMap* m : registry()) (new InFlightMap())->swap(*m);  // leaked on purpose, see above
  g_mu.unlock();
}
const int g_atfork = pthread_atfork(fork_prepare, fork_parent, fork_child);

// The per-process fallback directories, removed at exit by the process that made them (not a fork child).
std::vector<std::pair<pid_t, std::string>>& private_dirs() {
  static auto* v = new std::vector<std::pair<pid_t, std::string>>();
  return *v;
}
void remove_private_dirs() {
  for (const auto& [pid, path] : private_dirs())
    if (pid == ::getpid()) rm_tree(path);
}

// A private build directory inside the cache directory (mkdtemp: mode 0700, a fresh name), removed on exit.
struct BuildDir {
  std::string path;
  BuildDir(const std::string& parent, const std::string& tag) {
    std::string t = parent + "/build-XXXXXX";
    EMBER_CHECK(::mkdtemp(t.data()) != nullptr, Value, "[", tag, "] cannot make a build directory in ", parent,
                ": ", errstr());
    path = t;
  }
  ~BuildDir() { rm_tree(path); }
};

}  // namespace

std::string verify_private_dir(const std::string& path_in, bool create) {
  const std::string path = absolute(path_in);
  const uid_t uid = ::geteuid();
  std::vector<std::string> todo = split(path);
  std::vector<std::string> comps(todo.rbegin(), todo.rend());  // a stack: back() is the next component
  std::vector<int> fds;  // the verified directories from the root down
  auto close_all = [&] {
    for (int f : fds) ::close(f);
  };
  const int root = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return "cannot open /";
  fds.push_back(root);
  std::string walked;  // for messages
  int links = 0;
  while (!comps.empty()) {
    const std::string c = comps.back();
    comps.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      if (fds.size() > 1) {
        ::close(fds.back());
        fds.pop_back();
      }
      walked += "/..";
      continue;
    }
    const bool last = comps.empty();
    const int at = fds.back();
    walked += "/" + c;
    struct stat st;
    if (::fstatat(at, c.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !create) {
        const std::string r = walked + ": " + errstr();
        close_all();
        return r;
      }
      if (::mkdirat(at, c.c_str(), 0700) != 0 && errno != EEXIST) {
        const std::string r = "cannot create " + walked + ": " + errstr();
        close_all();
        return r;
      }
      if (::fstatat(at, c.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        const std::string r = walked + ": " + errstr();
        close_all();
        return r;
      }
    }
    if (S_ISLNK(st.st_mode)) {
      // A link the user or root owns, in a directory checked above, cannot be changed by anyone else
      // (macOS's /tmp -> private/tmp, a ~/.cache on another disk); the directory itself is never a link.
      std::string r;
      if (last) r = walked + " is a symbolic link";
      else if (st.st_uid != uid && st.st_uid != 0) r = walked + " is a symbolic link owned by another user";
      else if (++links > 40) r = "too many symbolic links in " + path;
      char buf[4096];
      ssize_t n = r.empty() ? ::readlinkat(at, c.c_str(), buf, sizeof buf - 1) : 0;
      if (r.empty() && n < 0) r = walked + ": " + errstr();
      if (!r.empty()) {
        close_all();
        return r;
      }
      const std::string target(buf, (size_t)n);
      if (!target.empty() && target[0] == '/') {
        while (fds.size() > 1) {
          ::close(fds.back());
          fds.pop_back();
        }
      }
      const auto parts = split(target);
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) comps.push_back(*it);
      continue;
    }
    const int fd = ::openat(at, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat fst;
    std::string r;
    if (fd < 0) r = walked + " is not a directory we can open: " + errstr();
    else if (::fstat(fd, &fst) != 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino)
      r = walked + " changed while it was checked";
    else if (last && fst.st_uid != uid)
      r = walked + " is owned by uid " + std::to_string(fst.st_uid) + ", not by this user (uid " +
          std::to_string(uid) + ")";
    else if (last && (fst.st_mode & 022))
      r = walked + " is writable by its group or by others (mode " + octal(fst.st_mode) + ")";
    else if (!last && fst.st_uid != uid && fst.st_uid != 0)
      r = walked + " is owned by another user (uid " + std::to_string(fst.st_uid) + ")";
    else if (!last && (fst.st_mode & 022) && !(fst.st_mode & S_ISVTX))
      r = walked + " is writable by its group or by others and not sticky";
    if (!r.empty()) {
      if (fd >= 0) ::close(fd);
      close_all();
      return r;
    }
    fds.push_back(fd);
  }
  close_all();
  return "";
}

struct Cache::State {
  std::string kind, env, tag;
  bool resolved = false, fallback = false;
  std::string dir, reason;
  std::map<std::string, void*> loaded;
  InFlightMap inflight;
};

Cache::Cache(std::string kind, std::string env_var, std::string tag) : s_(new State) {
  (void)g_atfork;
  s_->kind = std::move(kind);
  s_->env = std::move(env_var);
  s_->tag = std::move(tag);
  std::lock_guard<std::mutex> lk(g_mu);
  registry().push_back(&s_->inflight);
}

const std::string& Cache::dir() {
  std::lock_guard<std::mutex> lk(g_mu);
  State& s = *s_;
  if (s.resolved) return s.dir;
  std::string d;
  if (const char* e = s.env.empty() ? nullptr : std::getenv(s.env.c_str()); e && *e) {
    d = e;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    d = std::string(x) + "/ember/" + s.kind;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    d = std::string(h) + "/.cache/ember/" + s.kind;
  } else {
    d = tmp_base() + "/ember-" + s.kind + "-" + std::to_string(::geteuid());
  }
  d = absolute(d);
  s.reason = verify_private_dir(d, true);
  if (s.reason.empty()) {
    s.dir = d;
  } else {
    std::string t;
    for (const std::string& base : {tmp_base(), std::string("/tmp")}) {
      t = base + "/ember-" + s.kind + "-XXXXXX";
      if (::mkdtemp(t.data()) && verify_private_dir(t, false).empty()) break;
      t.clear();
    }
    EMBER_CHECK(!t.empty(), Value, "[", s.tag, "] no safe directory for compiled kernels: ", s.reason,
                "; and no private directory could be made in $TMPDIR or /tmp");
    if (private_dirs().empty()) std::atexit(remove_private_dirs);
    private_dirs().emplace_back(::getpid(), t);
    s.dir = t;
    s.fallback = true;
    std::fprintf(stderr,
                 "ember: [%s] not using the kernel cache directory %s: %s. Compiled kernels go to the private "
                 "directory %s for this process only (make the directory yours and not writable by others, or "
                 "set %s).\n",
                 s.tag.c_str(), d.c_str(), s.reason.c_str(), t.c_str(), s.env.empty() ? "XDG_CACHE_HOME" : s.env.c_str());
  }
  s.resolved = true;
  return s.dir;
}

bool Cache::is_private_fallback() {
  dir();
  std::lock_guard<std::mutex> lk(g_mu);
  return s_->fallback;
}

std::string Cache::fallback_reason() {
  dir();
  std::lock_guard<std::mutex> lk(g_mu);
  return s_->fallback ? s_->reason : std::string();
}

namespace {

// Reads the cached file `path` if it is a regular file this user owns and its trailer is intact.
bool read_verified(const std::string& path, const std::string& name, std::string* payload) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  std::string data;
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                  st.st_size < (off_t)(1ll << 31) && read_fd(fd, &data) && verify(data, name, payload);
  ::close(fd);
  return ok;
}

// Publishes payload + trailer as dir/file: a fresh mkstemp file (O_EXCL, 0600), then an atomic rename.
bool publish(const std::string& dir, const std::string& file, const std::string& name, const std::string& payload) {
  std::string t = dir + "/.tmp-XXXXXX";
  const int fd = ::mkstemp(t.data());
  if (fd < 0) return false;
  const std::string tr = trailer(name, payload);
  const bool ok = write_all(fd, payload.data(), payload.size()) && write_all(fd, tr.data(), tr.size());
  const bool closed = ::close(fd) == 0;
  if (ok && closed && ::rename(t.c_str(), (dir + "/" + file).c_str()) == 0) return true;
  ::unlink(t.c_str());
  return false;
}

}  // namespace

Cache::Loaded Cache::load_so(const std::string& key, const BuildFn& build) {
  const std::string name = sha256_hex(s_->kind + '\0' + (g_loader_tag.empty() ? "" : g_loader_tag + '\0') + key);
  std::unique_lock<std::mutex> lk(g_mu);
  for (;;) {
    if (auto it = s_->loaded.find(name); it != s_->loaded.end()) return {it->second, Loaded::Memory};
    auto f = s_->inflight.find(name);
    if (f == s_->inflight.end()) break;
    std::shared_ptr<InFlight> other = f->second;
    other->cv.wait(lk, [&] { return other->done; });  // then look again: it may have failed
  }
  auto mine = std::make_shared<InFlight>();
  s_->inflight[name] = mine;
  lk.unlock();
  auto finish = [&](void* handle) {
    lk.lock();
    if (handle) s_->loaded[name] = handle;
    mine->done = true;
    if (auto f = s_->inflight.find(name); f != s_->inflight.end() && f->second == mine) s_->inflight.erase(f);
    mine->cv.notify_all();
  };
  Loaded r;
  try {
    const std::string& d = dir();
    const std::string path = d + "/" + name + ".so";
    std::string bytes;
    if (read_verified(path, name, nullptr)) {
      // The directory is the user's alone, so the file checked is the file loaded.
      if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        r = {h, Loaded::Disk};
        finish(h);
        return r;
      }
    }
    BuildDir bd(d, s_->tag);
    const std::string out = bd.path + "/artifact";
    build(bd.path, out);
    EMBER_CHECK(read_file_nofollow(out, &bytes), Value, "[", s_->tag, "] the build produced no ", out);
    void* h = nullptr;
    if (publish(d, name + ".so", name, bytes) && read_verified(path, name, nullptr))
      h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) h = ::dlopen(out.c_str(), RTLD_NOW | RTLD_LOCAL);  // not stored (a full disk, say): load it anyway
    EMBER_CHECK(h != nullptr, Value, "[", s_->tag, "] cannot load the compiled kernel: ", ::dlerror());
    r = {h, Loaded::Built};
  } catch (...) {
    finish(nullptr);
    throw;
  }
  finish(r.handle);
  return r;
}

bool Cache::find_blob(const std::string& key, std::string* payload) {
  const std::string name = sha256_hex(s_->kind + '\0' + key);
  return read_verified(dir() + "/" + name + ".bin", name, payload);
}

void Cache::store_blob(const std::string& key, const std::string& payload) {
  const std::string name = sha256_hex(s_->kind + '\0' + key);
  EMBER_CHECK(publish(dir(), name + ".bin", name, payload), Value, "[", s_->tag, "] cannot store a compiled kernel in ",
              dir(), ": ", errstr());
}

std::string Cache::load_blob(const std::string& key, const BuildFn& build, Loaded::Source* source) {
  std::string payload;
  if (find_blob(key, &payload)) {
    if (source) *source = Loaded::Disk;
    return payload;
  }
  BuildDir bd(dir(), s_->tag);
  const std::string out = bd.path + "/artifact";
  build(bd.path, out);
  EMBER_CHECK(read_file_nofollow(out, &payload), Value, "[", s_->tag, "] the build produced no ", out);
  const std::string name = sha256_hex(s_->kind + '\0' + key);
  publish(dir(), name + ".bin", name, payload);  // best effort: the caller has its bytes either way
  if (source) *source = Loaded::Built;
  return payload;
}

int run_command(const std::vector<std::string>& argv, std::string* output) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  ::fcntl(p[0], F_SETFD, FD_CLOEXEC);
  ::fcntl(p[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  std::string text;
  if (rc == 0) read_fd(p[0], &text);
  ::close(p[0]);
  if (output) *output = std::move(text);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void set_loader_tag(const std::string& tag) { g_loader_tag = tag; }

std::string compiler_identity(const std::string& cxx, const std::string& tag, const std::string& hint) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (auto it = compiler_ids().find(cxx); it != compiler_ids().end()) return it->second;
  }
  std::string text;
  const int rc = run_command({cxx, "--version"}, &text);
  EMBER_CHECK(rc == 0, Value, "[", tag, "] this needs a C++ compiler: '", cxx, " --version' failed (", hint, ")");
  const std::string id = cxx + "\n" + text;
  std::lock_guard<std::mutex> lk(g_mu);
  compiler_ids()[cxx] = id;
  return id;
}

void write_new_file(const std::string& path, const std::string& data, const std::string& tag) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  EMBER_CHECK(fd >= 0, Value, "[", tag, "] cannot create ", path, ": ", errstr());
  const bool ok = write_all(fd, data.data(), data.size());
  const bool closed = ::close(fd) == 0;
  EMBER_CHECK(ok && closed, Value, "[", tag, "] cannot write ", path, ": ", errstr());
}

bool read_file_nofollow(const std::string& path, std::string* data) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read_fd(fd, data);
  ::close(fd);
  return ok;
}

}  // namespace ember::kcache
