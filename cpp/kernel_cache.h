// The on-disk cache of compiled kernels (shared objects, PTX/cubin blobs) that every run-time compiler uses:
// a directory only the user can write, artifacts built in private mkdtemp directories, published by atomic
// rename with a trailer (key + SHA-256) that is verified before anything is loaded. See docs/design/kernel-cache.md.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ember::kcache {

// One cache, e.g. Cache("msl-emu", "EMBER_METAL_CACHE", "metal"). The directory is $<env_var>, else
// $XDG_CACHE_HOME/ember/<kind>, else $HOME/.cache/ember/<kind>, else $TMPDIR (or /tmp)/ember-<kind>-<uid>;
// if that one is unsafe (see dir()), a private mkdtemp directory for this process. `tag` starts messages
// ("[tag] ..."). Objects are meant to live for the whole process (loaded code may still run at exit).
class Cache {
 public:
  Cache(std::string kind, std::string env_var, std::string tag);
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // The directory in use, resolved at first use: created by ember with mode 0700, or an existing one owned
  // by the user, not group/world-writable, reached without symbolic links that another user owns (the
  // directory itself never a link). Otherwise a private mkdtemp directory, removed at exit, with one warning
  // on stderr that says why. Throws Error "[tag] ..." when not even that can be made.
  const std::string& dir();
  bool is_private_fallback();  // dir() is the per-process fallback
  std::string fallback_reason();  // why the configured directory was refused ("" when it was not)

  // Builds an artifact. `build_dir` is a fresh private directory (mkdtemp, removed afterwards); the
  // callback must leave its result at `out_path` (inside build_dir) or throw (the exception propagates).
  using BuildFn = std::function<void(const std::string& build_dir, const std::string& out_path)>;

  struct Loaded {
    void* handle = nullptr;  // from dlopen(RTLD_NOW | RTLD_LOCAL); never closed
    enum Source { Memory, Disk, Built } source = Built;
  };
  // The shared object stored under `key` (any string: the file name is a hash of kind and key), loaded.
  // A cached file is verified (its trailer names this key; its SHA-256 matches; it is a regular file the
  // user owns) and then loaded from the very file that was checked; a missing, truncated, corrupt or
  // foreign file is rebuilt, never loaded. One build per key at a time in the process: other threads
  // asking for that key wait for it, threads asking for other keys do not; no lock is held while `build`
  // runs, and a fork() in the meantime leaves the child able to build for itself.
  Loaded load_so(const std::string& key, const BuildFn& build);

  // The same for opaque bytes (PTX, cubin): returns the verified payload; `source` as for load_so.
  std::string load_blob(const std::string& key, const BuildFn& build, Loaded::Source* source = nullptr);
  bool find_blob(const std::string& key, std::string* payload);  // a verified cached blob, if any
  void store_blob(const std::string& key, const std::string& payload);

 private:
  struct State;
  State* s_;  // leaked with the Cache: in-flight builds may be abandoned by fork()
};

// Runs argv (searched in PATH), stdin from /dev/null, stdout and stderr captured together through a pipe
// (no log file to plant a link at). Returns the exit status, or -1 when it did not start or was killed.
int run_command(const std::vector<std::string>& argv, std::string* output);

// `<cxx> --version`'s text with the compiler's name, cached per name: part of every cache key of code that
// `cxx` compiles. Throws Error "[tag] ... needs a C++ compiler ..." (with `hint`) when it does not run.
std::string compiler_identity(const std::string& cxx, const std::string& tag, const std::string& hint);

// Writes a new file: O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, never through an existing file or link.
void write_new_file(const std::string& path, const std::string& data, const std::string& tag);
// Reads a regular file without following a link at `path`. Returns false when it cannot.
bool read_file_nofollow(const std::string& path, std::string* data);

// Names the copy of the core this extension carries ("" for _C, "testing" for _C_testing), set once at import
// before any load. Part of every stored module's name: dlopen of one path returns one handle per process,
// and a module's init binds it to the runtime of the copy that loaded it first, so two copies must never
// share a module file.
void set_loader_tag(const std::string& tag);

// Checks `path` as a cache directory, creating missing components with mode 0700 when `create`. Returns
// "" when it is safe, else the reason. Exposed for tests and for callers with directories of their own.
std::string verify_private_dir(const std::string& path, bool create);

}  // namespace ember::kcache
