// The benchmark report: one row per case, printed as a JSON array (--json) or a table. Field
// names are fixed across subcommands (op, shape fields, dtypes, threads, median_ms, the
// figure, peak_fraction or bandwidth_fraction, baseline, baseline_median_ms, ratio).
#ifndef STREAMATTN_BENCH_JSON_WRITER_H_
#define STREAMATTN_BENCH_JSON_WRITER_H_

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace streamattn {
namespace bench {

class Row {
 public:
  Row& Set(const std::string& key, const std::string& value) {
    return Add(key, "\"" + Escape(value) + "\"");
  }
  Row& Set(const std::string& key, const char* value) { return Set(key, std::string(value)); }
  Row& Set(const std::string& key, bool value) { return Add(key, value ? "true" : "false"); }
  Row& Set(const std::string& key, int value) { return Add(key, std::to_string(value)); }
  Row& Set(const std::string& key, int64_t value) { return Add(key, std::to_string(value)); }
  Row& Set(const std::string& key, double value) {
    if (!std::isfinite(value)) return Add(key, "null");
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.6g", value);
    return Add(key, buffer);
  }

  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  // A field's JSON text ("" when absent).
  std::string Get(const std::string& key) const {
    for (const auto& field : fields_) {
      if (field.first == key) return field.second;
    }
    return "";
  }

 private:
  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out;
  }
  Row& Add(const std::string& key, std::string json) {
    for (auto& field : fields_) {
      if (field.first == key) {
        field.second = std::move(json);
        return *this;
      }
    }
    fields_.emplace_back(key, std::move(json));
    return *this;
  }
  std::vector<std::pair<std::string, std::string>> fields_;
};

inline void PrintJson(const std::vector<Row>& rows, FILE* out = stdout) {
  std::fprintf(out, "[\n");
  for (size_t r = 0; r < rows.size(); ++r) {
    std::fprintf(out, "  {");
    const auto& fields = rows[r].fields();
    for (size_t f = 0; f < fields.size(); ++f) {
      std::fprintf(out, "%s\"%s\": %s", f ? ", " : "", fields[f].first.c_str(),
                   fields[f].second.c_str());
    }
    std::fprintf(out, "}%s\n", r + 1 < rows.size() ? "," : "");
  }
  std::fprintf(out, "]\n");
}

// One line per row, "key=value" pairs: for people reading a terminal.
inline void PrintText(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    for (size_t f = 0; f < row.fields().size(); ++f) {
      const auto& field = row.fields()[f];
      std::string value = field.second;
      if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
      std::printf("%s%s=%s", f ? "  " : "", field.first.c_str(), value.c_str());
    }
    std::printf("\n");
  }
}

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_JSON_WRITER_H_
