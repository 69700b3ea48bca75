// Command-line parsing for the tool's subcommands: `--name value` or `--name=value`, numbers
// range-checked, and every mistake reported as one line on stderr ("streamattn run: --heads-q:
// 'x' is not a whole number in [1, 1024]") with exit status 2, as command-line tools do.
#ifndef STREAMATTN_BENCH_CLI_ARGS_H_
#define STREAMATTN_BENCH_CLI_ARGS_H_

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace streamattn {
namespace bench {

// Thrown by the parser; main() prints it as one line and exits with status 2.
struct UsageError {
  std::string message;
};

class ArgReader {
 public:
  // `command` prefixes messages ("streamattn run"); args are what follows the subcommand.
  ArgReader(std::string command, int argc, char** argv)
      : command_(std::move(command)), argc_(argc), argv_(argv) {}

  bool Done() const { return i_ >= argc_; }

  // The next argument; a "--name=value" form is split, the value kept for Value().
  std::string Next() {
    std::string arg = argv_[i_++];
    pending_.clear();
    has_pending_ = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      pending_ = arg.substr(eq + 1);
      has_pending_ = true;
      arg.resize(eq);
    }
    current_ = arg;
    return arg;
  }

  std::string Value() {
    if (has_pending_) {
      has_pending_ = false;
      return pending_;
    }
    if (i_ >= argc_) Fail(current_ + " needs a value");
    return argv_[i_++];
  }

  int64_t Int(int64_t lo, int64_t hi) {
    const std::string text = Value();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
      Fail(current_ + ": '" + text + "' is not a whole number in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    }
    return v;
  }

  double Real(double lo, double hi) {
    const std::string text = Value();
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
      char range[64];
      std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
      Fail(current_ + ": '" + text + "' is not a number in " + range);
    }
    return v;
  }

  // A flag takes no value: "--quick=1" is a mistake.
  void NoValue() {
    if (has_pending_) Fail(current_ + " takes no value");
  }

  [[noreturn]] void Unknown() {
    Fail("unknown argument '" + current_ + "' (see " + command_ + " --help)");
  }
  [[noreturn]] void Fail(const std::string& message) {
    throw UsageError{command_ + ": " + message};
  }

 private:
  std::string command_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string current_, pending_;
  bool has_pending_ = false;
};

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_CLI_ARGS_H_
