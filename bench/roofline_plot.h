// The roofline chart of `streamattn bench sweep`, drawn by gnuplot (Debian: gnuplot-nox) from a
// self-contained script written beside the data: achieved GFLOP/s against arithmetic
// intensity, one series per operation, under the roof min(FMA peak, read bandwidth x
// intensity) measured in the same run.
#ifndef STREAMATTN_BENCH_ROOFLINE_PLOT_H_
#define STREAMATTN_BENCH_ROOFLINE_PLOT_H_

#include <string>
#include <vector>

namespace streamattn {
namespace bench {

struct RooflinePoint {
  std::string series;  // "prefill", "decode": one colour each
  std::string label;   // a short tag drawn beside the point
  double intensity;    // flop per byte
  double gflops;
};

struct RooflineChart {
  std::string title;
  double peak_gflops;
  double bandwidth_gbps;
  std::vector<RooflinePoint> points;
};

// Writes `script_path` (gnuplot) that draws `chart_path`, PNG or SVG by its extension.
bool WriteRooflineScript(const RooflineChart& chart, const std::string& script_path,
                         const std::string& chart_path, std::string* error);

// Runs gnuplot on the script. False with *error set ("gnuplot not found ...") when it cannot.
bool RunGnuplot(const std::string& script_path, std::string* error);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_ROOFLINE_PLOT_H_
