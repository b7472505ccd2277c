// A progress line on stderr for long loops: step i/n, seconds per step, ETA. Redrawn in place
// on a terminal, one line per update otherwise (so logs stay readable).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace h3rt::cli {

class Progress {
 public:
  Progress(std::string label, int total, std::string unit = "step")
      : label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total),
        tty_(isatty(fileno(stderr))),
        start_(std::chrono::steady_clock::now()) {}

  void update(int done) {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (first_ < 0) first_ = done;  // a resumed run starts past 0
    double per = done > first_ ? elapsed / (done - first_) : 0.0;
    double eta = per * (total_ - done);
    int width = 24, filled = total_ > 0 ? width * done / total_ : width;
    std::string bar(filled, '#');
    bar.append(width - filled, '.');
    std::fprintf(stderr, "%s%s [%s] %d/%d  %.2f s/%s  ETA %.1f s%s", tty_ ? "\r" : "",
                 label_.c_str(), bar.c_str(), done, total_, per, unit_.c_str(), eta,
                 tty_ ? "" : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_, unit_;
  int total_;
  int first_ = -1;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace h3rt::cli
