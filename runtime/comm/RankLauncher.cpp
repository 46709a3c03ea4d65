#include "runtime/comm/RankLauncher.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace kiln {
namespace {

std::vector<pid_t> children;

// Ranks share this stream's file: each line goes out in one write, so that
// lines of different processes do not interleave.
struct Line {
  std::ostream &out;
  std::ostringstream text;
  explicit Line(std::ostream &out) : out(out) {}
  ~Line() { out << text.str() << std::flush; }
  template <typename T> Line &operator<<(const T &value) {
    text << value;
    return *this;
  }
};

// KILN_COMM_TIMEOUT plus a margin: by then every rank has seen the failure.
double graceSeconds() {
  const char *timeout = std::getenv("KILN_COMM_TIMEOUT");
  const double seconds = timeout && *timeout ? std::atof(timeout) : 60;
  return (seconds > 0 ? seconds : 60) + 5;
}

void forward(int signal) {
  for (pid_t pid : children)
    ::kill(pid, signal);
}

// A path no other job uses: in /dev/shm where it exists (the CPU backend
// maps it), else the temporary directory.
std::string freshRendezvous() {
  struct stat info {};
  std::string dir = ::stat("/dev/shm", &info) == 0 && S_ISDIR(info.st_mode) ? "/dev/shm" : "";
  if (dir.empty()) {
    const char *tmp = std::getenv("TMPDIR");
    dir = tmp && *tmp ? tmp : "/tmp";
  }
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return dir + "/kiln-rendezvous-" + std::to_string(getpid()) + "-" + std::to_string(now);
}

} // namespace

int launchRanks(const std::string &program, const std::vector<std::string> &args, int ranks,
                std::ostream &err) {
  const std::string rendezvous = freshRendezvous();
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char *> cargv;
  for (std::string &arg : argv)
    cargv.push_back(arg.data());
  cargv.push_back(nullptr);

  err << std::flush;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      Line(err) << program << ": error: cannot start rank " << rank << ": " << std::strerror(errno)
                << "\n";
      forward(SIGTERM);
      for (pid_t child : children)
        ::waitpid(child, nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      ::setenv("KILN_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("KILN_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("KILN_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      ::setenv("KILN_LOCAL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      ::setenv("KILN_RENDEZVOUS", rendezvous.c_str(), 1);
      if (rank > 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0)
          ::dup2(null, STDOUT_FILENO);
      }
      ::execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "%s: error: rank %d: cannot run /proc/self/exe: %s\n", program.c_str(),
                   rank, std::strerror(errno));
      std::_Exit(127);
    }
    children.push_back(pid);
    Line(err) << program << ": rank " << rank << " of " << ranks << " is pid " << pid << "\n";
  }
  struct sigaction action {};
  action.sa_handler = forward;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  // Once a rank has failed, the others get a grace period to stop on their
  // own (their next collective fails); one still running then (stopped, or
  // stuck outside collectives) is killed, so the launcher never hangs.
  const double grace = graceSeconds();
  int result = 0;
  std::vector<bool> running(children.size(), true);
  std::chrono::steady_clock::time_point failedAt{};
  bool killed = false;
  for (size_t done = 0; done < children.size();) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR)
      break;
    if (pid <= 0) {
      if (result != 0 && !killed &&
          std::chrono::steady_clock::now() - failedAt > std::chrono::duration<double>(grace)) {
        for (size_t r = 0; r < children.size(); ++r)
          if (running[r]) {
            Line(err) << program << ": rank " << r << " (pid " << children[r]
                      << ") did not stop within " << grace << " s of the failure: killing it\n";
            ::kill(children[r], SIGKILL);
          }
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int rank = -1;
    for (size_t r = 0; r < children.size(); ++r)
      if (children[r] == pid)
        rank = static_cast<int>(r);
    if (rank < 0)
      continue;
    running[static_cast<size_t>(rank)] = false;
    ++done;
    int failure = 0;
    if (WIFSIGNALED(status)) {
      if (!killed)
        Line(err) << program << ": rank " << rank << " (pid " << pid << ") was killed by signal "
                  << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")\n";
      failure = 1;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      Line(err) << program << ": rank " << rank << " (pid " << pid << ") exited with status "
                << WEXITSTATUS(status) << "\n";
      failure = WEXITSTATUS(status);
    }
    if (failure && result == 0) {
      result = failure;
      failedAt = std::chrono::steady_clock::now();
    }
  }
  ::unlink(rendezvous.c_str()); // rank 0 removes it once joined; not if it died first
  children.clear();
  return result;
}

std::vector<std::string> withoutNproc(const std::vector<std::string> &args) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) != 0)
      kept.push_back(args[i]);
  }
  return kept;
}

} // namespace kiln
