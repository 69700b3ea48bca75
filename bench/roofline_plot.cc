#include "roofline_plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace streamattn {
namespace bench {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// gnuplot string literal: double quotes, with quotes and backslashes escaped.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string FindInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

bool WriteRooflineScript(const RooflineChart& chart, const std::string& script_path,
                         const std::string& chart_path, std::string* error) {
  std::ofstream gp(script_path);
  if (!gp) {
    *error = "cannot write " + script_path;
    return false;
  }
  // Whole decades around the points and the ridge (where the two roofs meet).
  double x_min = 1e30, x_max = 0, y_min = 1e30;
  for (const RooflinePoint& p : chart.points) {
    x_min = std::min(x_min, p.intensity);
    x_max = std::max(x_max, p.intensity);
    y_min = std::min(y_min, p.gflops);
  }
  const double ridge = chart.peak_gflops / chart.bandwidth_gbps;
  x_min = std::pow(10.0, std::floor(std::log10(std::min(x_min, ridge) / 2)));
  x_max = std::pow(10.0, std::ceil(std::log10(std::max(x_max, ridge) * 2)));
  y_min = std::pow(
      10.0, std::floor(std::log10(std::max(1e-3, std::min(y_min, chart.bandwidth_gbps * x_min)))));
  const double y_max = chart.peak_gflops * 3;
  // The bandwidth line's angle on the page: the two log axes give a decade different lengths
  // (about 990 x 610 pixels of plot area in a 1100 x 720 image).
  const double slope_degrees =
      std::atan((610.0 / std::log10(y_max / y_min)) / (990.0 / std::log10(x_max / x_min))) * 180.0 /
      M_PI;

  gp << "# Written by `streamattn bench sweep`; `gnuplot " << script_path
     << "` redraws the chart.\n";
  if (EndsWith(chart_path, ".svg")) {
    gp << "set terminal svg size 1100,720 dynamic enhanced font 'sans,12' background '#ffffff'\n";
  } else {  // pngcairo when gnuplot has it (gnuplot-nox does), libgd's png otherwise
    gp << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo size 1100,720 enhanced font 'sans,11'\n"
          "} else {\n"
          "  set terminal png size 1100,720\n"
          "}\n";
  }
  gp << "set output " << Quote(chart_path) << "\n"
     << "set title " << Quote(chart.title) << " noenhanced\n"
     << "set logscale xy 10\n"
     << "set format x '10^{%L}'\nset format y '10^{%L}'\n"
     << "set xrange [" << x_min << ":" << x_max << "]\n"
     << "set yrange [" << y_min << ":" << y_max << "]\n"
     << "set xlabel 'arithmetic intensity (flop per byte of q, k, v and out moved)'\n"
     << "set ylabel 'achieved GFLOP/s'\n"
     << "set grid xtics ytics mxtics mytics lc rgb '#dddddd'\n"
     << "set key right bottom box opaque\n"
     << "peak = " << chart.peak_gflops << "\nbw = " << chart.bandwidth_gbps << "\n"
     << "roof(x) = (bw * x < peak) ? bw * x : peak\n"
     << "set label 1 sprintf('FMA peak %.0f GFLOP/s', peak) at " << ridge * 1.3
     << ", peak * 1.35 left textcolor rgb '#444444'\n"
     << "set label 2 sprintf('read bandwidth %.1f GB/s', bw) at " << x_min * 1.5 << ", bw * "
     << x_min * 1.5 << " * 1.5 left rotate by " << slope_degrees << " textcolor rgb '#444444'\n"
     << "set samples 1000\n";
  // One inline data block per series: the script carries its data and redraws alone.
  std::vector<std::string> series;
  for (const RooflinePoint& p : chart.points) {
    if (std::find(series.begin(), series.end(), p.series) == series.end()) {
      series.push_back(p.series);
    }
  }
  for (size_t s = 0; s < series.size(); ++s) {
    gp << "$series" << s << " << EOD\n";
    for (const RooflinePoint& p : chart.points) {
      if (p.series == series[s]) {
        gp << p.intensity << " " << p.gflops << " " << Quote(p.label) << "\n";
      }
    }
    gp << "EOD\n";
  }
  static const char* kStyles[] = {"pt 7 ps 1.4 lc rgb '#1f77b4'",  "pt 5 ps 1.3 lc rgb '#17becf'",
                                  "pt 9 ps 1.6 lc rgb '#d62728'",  "pt 11 ps 1.6 lc rgb '#ff7f0e'",
                                  "pt 13 ps 1.6 lc rgb '#9467bd'", "pt 15 ps 1.6 lc rgb '#2ca02c'",
                                  "pt 7 ps 1.4 lc rgb '#8c564b'",  "pt 5 ps 1.3 lc rgb '#7f7f7f'"};
  constexpr size_t kNumStyles = sizeof(kStyles) / sizeof(kStyles[0]);
  gp << "plot roof(x) with lines lw 2.5 lc rgb '#333333' title 'roofline: min(FMA peak, bandwidth "
        "x intensity)'";
  int labelled_series = 0;
  for (size_t s = 0; s < series.size(); ++s) {
    gp << ", \\\n  $series" << s << " using 1:2 with points " << kStyles[s % kNumStyles]
       << " title " << Quote(series[s]) << " noenhanced";
    // Points that share an x (decode at every cache length) go unlabelled: labels would pile up.
    bool labelled = false;
    for (const RooflinePoint& p : chart.points) {
      labelled = labelled || (p.series == series[s] && !p.label.empty());
    }
    if (labelled) {  // alternate series put their labels above and below their points
      gp << ", \\\n  $series" << s << " using 1:2:3 with labels offset char 0,"
         << (labelled_series++ % 2 ? "-1.1" : "1.1") << " font ',8' noenhanced notitle";
    }
  }
  gp << "\n";
  if (!gp) {
    *error = "cannot write " + script_path;
    return false;
  }
  return true;
}

bool RunGnuplot(const std::string& script_path, std::string* error) {
  const std::string gnuplot = FindInPath("gnuplot");
  if (gnuplot.empty()) {
    *error = "gnuplot not found on PATH (Debian: apt-get install gnuplot-nox)";
    return false;
  }
  const std::string command = ShellQuote(gnuplot) + " " + ShellQuote(script_path) + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    *error = "cannot start gnuplot";
    return false;
  }
  std::string output;
  char buffer[256];
  while (std::fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int status = pclose(pipe);
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!output.empty() && output.back() == '\n') output.pop_back();
    *error = "gnuplot failed: " +
             output.substr(output.rfind('\n') == std::string::npos ? 0 : output.rfind('\n') + 1);
    return false;
  }
  return true;
}

}  // namespace bench
}  // namespace streamattn
