// ulysses plot METRICS.jsonl -o loss.png [--title T] [--width W] [--height H] [--log-y]
// A loss-curve picture from the trainer's metrics file, drawn and encoded here
// (cli/plot_image, io/png): no Python or gnuplot needed on the cluster.
//
// Options: Args only knows --long options, so argv is pre-scanned and the short
// forms "-o FILE" and "-h" are rewritten to "--out FILE" and "--help".
// Input: one JSON object per line; {"step", "loss"} lines make the training
// curve, {"step", "eval_loss"} lines the eval curve, other keys are ignored.
// A null loss (the trainer writes NaN/inf as null) is skipped and counted. When
// a step appears twice (a resumed run), the later line wins.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/plot_image.h"
#include "core/json_depth.h"
#include "core/error.h"
#include "io/png.h"
#include "io/regular_file.h"

namespace ulysses {

namespace {

struct Series {
  std::vector<double> x, y;
};

struct Metrics {
  Series train, eval;
  int64_t lines = 0;
  int64_t skipped_null = 0;
};

// Reads one loss value of a line into `by_step`; false when the key is absent.
bool take_loss(const nlohmann::json& j, const char* key, const std::string& where, std::map<double, double>& by_step,
               int64_t& skipped_null) {
  auto it = j.find(key);
  if (it == j.end()) return false;
  if (it->is_null()) {
    ++skipped_null;
    return true;
  }
  ULY_CHECK(it->is_number(), "plot: " << where << ": \"" << key << "\" is " << it->dump() << ", not a number");
  auto st = j.find("step");
  ULY_CHECK(st != j.end() && st->is_number(),
            "plot: " << where << ": a line with \"" << key << "\" needs a numeric \"step\" too");
  const double v = it->get<double>(), step = st->get<double>();
  if (!std::isfinite(v)) {
    ++skipped_null;
    return true;
  }
  by_step[step] = v;  // a later line for the same step (resumed run) replaces the earlier one
  return true;
}

Metrics read_metrics(const std::string& path) {
  // A regular file only: /dev/zero or a FIFO would be read (or waited on) forever.
  require_regular_file(path, "metrics file");
  std::ifstream in(path);
  ULY_CHECK(in.good(), "plot: cannot open metrics file '" << path << "' (does it exist? the trainer writes "
                                                           << "metrics.jsonl into its --out folder)");
  std::map<double, double> train, eval;
  Metrics m;
  int64_t lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++m.lines;
    const std::string where = path + ":" + std::to_string(lineno);
    nlohmann::json j;
    check_json_depth(line, "plot: " + where);
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::string why = e.what();
      std::replace(why.begin(), why.end(), '\n', ' ');
      ULY_FAIL("plot: " << where << " is not valid JSON (" << why << "); every line must be one JSON object");
    }
    ULY_CHECK(j.is_object(), "plot: " << where << " is " << j.type_name() << ", not a JSON object");
    take_loss(j, "loss", where, train, m.skipped_null);
    take_loss(j, "eval_loss", where, eval, m.skipped_null);
  }
  ULY_CHECK(m.lines > 0, "plot: metrics file '" << path << "' is empty (has training logged a step yet?)");
  ULY_CHECK(!train.empty(), "plot: no \"loss\" values in '"
                                << path << "' (" << m.lines
                                << " lines read; expected lines like {\"step\": 1, \"loss\": 2.5})");
  for (auto [s, v] : train) m.train.x.push_back(s), m.train.y.push_back(v);
  for (auto [s, v] : eval) m.eval.x.push_back(s), m.eval.y.push_back(v);
  return m;
}

// ---- axes ------------------------------------------------------------------

struct Tick {
  double value;  // in data units (not log)
  std::string label;
};

// The 1-2-5 x 10^k step nearest to giving `target` intervals over `range`.
double nice_step(double range, int target) {
  const double raw = range / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::vector<Tick> linear_ticks(double lo, double hi, int target) {
  const double step = nice_step(hi - lo, target);
  double maxabs = 0;
  const int64_t k0 = int64_t(std::ceil(lo / step - 1e-9)), k1 = int64_t(std::floor(hi / step + 1e-9));
  for (int64_t k = k0; k <= k1; ++k) maxabs = std::max(maxabs, std::abs(double(k) * step));
  // Large step counts read better as 20k / 1.5M than as 20000 / 1500000.
  double unit = 1;
  const char* suffix = "";
  if (step >= 1e6 && maxabs >= 1e7) unit = 1e6, suffix = "M";
  else if (step >= 1e3 && maxabs >= 1e4) unit = 1e3, suffix = "k";
  const int decimals = std::max(0, int(-std::floor(std::log10(step / unit) + 1e-9)));
  std::vector<Tick> ticks;
  for (int64_t k = k0; k <= k1; ++k) {
    double v = double(k) * step;
    if (k == 0) v = 0;  // never "-0"
    ticks.push_back({v, k == 0 ? std::string("0") : format_fixed(v / unit, decimals) + suffix});
  }
  return ticks;
}

std::string format_general(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Ticks for a log axis over [10^lo, 10^hi]: decades, then 1-2-5, then 1..9 per
// decade, whichever gives a readable number of ticks; linear ticks if none does.
std::vector<Tick> log_ticks(double lo, double hi, int target) {
  auto at = [&](std::initializer_list<int> mantissas) {
    std::vector<Tick> t;
    for (int e = int(std::floor(lo)); e <= int(std::ceil(hi)); ++e)
      for (int m : mantissas) {
        const double v = m * std::pow(10.0, e), l = std::log10(v);
        if (l >= lo - 1e-9 && l <= hi + 1e-9) t.push_back({v, format_general(v)});
      }
    return t;
  };
  const int most = std::max(3, target + 2);
  std::vector<Tick> t = at({1, 2, 5});
  if (int(t.size()) > most) {
    t = at({1});
    const size_t every = (t.size() + most - 1) / most;
    std::vector<Tick> thin;
    for (size_t i = 0; i < t.size(); i += every) thin.push_back(t[i]);
    return thin;
  }
  if (t.size() >= 3) return t;
  t = at({1, 2, 3, 4, 5, 6, 7, 8, 9});
  if (t.size() >= 3 && int(t.size()) <= most) return t;
  std::vector<Tick> lin = linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi), target);
  lin.erase(std::remove_if(lin.begin(), lin.end(), [](const Tick& k) { return !(k.value > 0); }), lin.end());
  return lin;
}

struct Axis {
  double lo = 0, hi = 1;  // in axis units (log10 of the value on a log axis)
  bool log = false;
  double to_axis(double v) const { return log ? std::log10(v) : v; }
};

// [min, max] of the values widened by `pad` of the range (or by a little when flat).
void padded_range(const std::vector<double>& v, double pad, double* lo, double* hi) {
  *lo = *std::min_element(v.begin(), v.end());
  *hi = *std::max_element(v.begin(), v.end());
  const double r = *hi - *lo;
  const double margin = r > 0 ? r * pad : std::max(std::abs(*lo) * 0.05, 0.05);
  *lo -= margin, *hi += margin;
}

// ---- the picture -----------------------------------------------------------

struct PlotStyle {
  std::string title = "training loss";
  int width = 900, height = 500;
  bool log_y = false;
};

Canvas render(const Metrics& m, const PlotStyle& st) {
  using namespace plot_colors;
  Canvas cv(st.width, st.height, kBackground);
  const int s = (st.width >= 600 && st.height >= 350) ? 2 : 1;  // text scale
  const int th = Canvas::text_height(s), pad = 6 * s, tick_len = 3 * s;

  // Data ranges: x exactly spans the steps, y gets 5% headroom.
  std::vector<double> xs = m.train.x, ys;
  xs.insert(xs.end(), m.eval.x.begin(), m.eval.x.end());
  Axis ax, ay;
  ay.log = st.log_y;
  for (const Series* se : {&m.train, &m.eval})
    for (double v : se->y) {
      ULY_CHECK(!ay.log || v > 0, "plot: --log-y needs positive losses, got " << v << "; drop --log-y");
      ys.push_back(ay.to_axis(v));
    }
  ax.lo = *std::min_element(xs.begin(), xs.end());
  ax.hi = *std::max_element(xs.begin(), xs.end());
  if (ax.hi == ax.lo) ax.lo -= 1, ax.hi += 1;  // a single step: centre it
  padded_range(ys, 0.05, &ay.lo, &ay.hi);
  // Losses of opposite sign near the largest double (a diverged run) give a range that is not a
  // double: every pixel position would be NaN, so refuse before drawing.
  ULY_CHECK(std::isfinite(ay.hi - ay.lo), "plot: the losses span " << *std::min_element(ys.begin(), ys.end()) << " to "
                                              << *std::max_element(ys.begin(), ys.end())
                                              << ", a range too wide to draw; leave out the diverged steps");

  // Layout: y tick labels decide the left margin, so ticks come first.
  const int top = pad + (st.title.empty() ? 0 : th + pad * 2);
  const int bottom = st.height - (pad + th + pad + th + tick_len + pad);
  const int plot_h = bottom - top;
  const int y_target = std::clamp(plot_h / (th * 4), 2, 10);
  std::vector<Tick> yt = ay.log ? log_ticks(ay.lo, ay.hi, y_target) : linear_ticks(ay.lo, ay.hi, y_target);
  int ylab_w = 0;
  for (const auto& t : yt) ylab_w = std::max(ylab_w, Canvas::text_width(t.label, s));
  const int left = pad + th + pad * 2 + ylab_w + tick_len;
  std::vector<Tick> xt;
  int xlab_w = 0;
  for (int target = 10; target >= 2; --target) {  // as many x ticks as fit without labels touching
    xt = linear_ticks(ax.lo, ax.hi, target);
    xlab_w = 0;
    for (const auto& t : xt) xlab_w = std::max(xlab_w, Canvas::text_width(t.label, s));
    const double spacing = double(st.width - left - pad * 2) * nice_step(ax.hi - ax.lo, target) / (ax.hi - ax.lo);
    if (spacing >= xlab_w + 8 * s) break;
  }
  const int right = st.width - std::max(pad * 2, xlab_w / 2 + pad);
  ULY_CHECK(right - left >= 40 && plot_h >= 40,
            "plot: " << st.width << "x" << st.height << " leaves no room for the plot; use a larger --width/--height");

  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * (right - left - 1) + 0.5; };
  auto py = [&](double v) { return bottom - 1 - (ay.to_axis(v) - ay.lo) / (ay.hi - ay.lo) * (bottom - top - 1) + 0.5; };

  // Grid, frame, ticks and labels.
  for (const auto& t : yt) {
    const int y = int(std::floor(py(t.value)));
    cv.fill_rect(left, y, right, y + 1, kGrid);
    cv.fill_rect(left - tick_len, y, left, y + 1, kAxis);
    cv.draw_text(left - tick_len - 2 * s - Canvas::text_width(t.label, s), y - th / 2, t.label, kText, s);
  }
  for (const auto& t : xt) {
    const int x = int(std::floor(px(t.value)));
    cv.fill_rect(x, top, x + 1, bottom, kGrid);
    cv.fill_rect(x, bottom, x + 1, bottom + tick_len, kAxis);
    cv.draw_text(x - Canvas::text_width(t.label, s) / 2, bottom + tick_len + 2 * s, t.label, kText, s);
  }
  cv.stroke_rect(left - 1, top - 1, right + 1, bottom + 1, kAxis);
  const std::string xtitle = "step", ytitle = st.log_y ? "loss (log scale)" : "loss";
  cv.draw_text((left + right - Canvas::text_width(xtitle, s)) / 2, st.height - pad - th, xtitle, kText, s);
  cv.draw_text_up(pad, (top + bottom - Canvas::text_width(ytitle, s)) / 2, ytitle, kText, s);
  if (!st.title.empty()) {
    const int tx = std::max(pad, (left + right - Canvas::text_width(st.title, s)) / 2);
    cv.draw_text(tx, pad, st.title, kText, s);
    cv.draw_text(tx + 1, pad, st.title, kText, s);  // one pixel over: a bold title
  }

  // The curves, clipped to the plot area.
  auto to_px = [&](const Series& se) {
    std::vector<PointF> p;
    for (size_t i = 0; i < se.x.size(); ++i) p.push_back({px(se.x[i]), py(se.y[i])});
    return p;
  };
  const std::vector<PointF> train = to_px(m.train), eval = to_px(m.eval);
  cv.set_clip(left, top, right, bottom);
  cv.draw_polyline(train, kTrainLoss, 1.5 * s);
  if (!eval.empty()) {
    cv.draw_polyline(eval, kEvalLoss, 1.0 * s);
    for (const auto& p : eval) cv.fill_disc(p.x, p.y, 3.0 * s, kEvalLoss);
  }

  // Legend in the corner of the plot area that covers the fewest data points.
  struct Entry {
    std::string label;
    Rgb color;
    bool marker;
  };
  std::vector<Entry> entries = {{"train loss", kTrainLoss, false}};
  if (!eval.empty()) entries.push_back({"eval loss", kEvalLoss, true});
  const int sample = 12 * s, row_h = th + 4 * s;
  int lw = 0;
  for (const auto& e : entries) lw = std::max(lw, Canvas::text_width(e.label, s));
  lw += sample + 3 * pad;
  const int lh = row_h * int(entries.size()) + pad;
  const int inset = pad;
  int best = -1, best_x = 0, best_y = 0;
  const int corners[4][2] = {{right - inset - lw, top + inset},
                             {right - inset - lw, bottom - inset - lh},
                             {left + inset, bottom - inset - lh},
                             {left + inset, top + inset}};
  for (const auto& c : corners) {
    int covered = 0;
    for (const auto* pts : {&train, &eval})
      for (const auto& p : *pts) covered += p.x >= c[0] && p.x < c[0] + lw && p.y >= c[1] && p.y < c[1] + lh;
    if (best < 0 || covered < best) best = covered, best_x = c[0], best_y = c[1];
  }
  cv.fill_rect(best_x, best_y, best_x + lw, best_y + lh, kBackground);
  cv.stroke_rect(best_x, best_y, best_x + lw, best_y + lh, kGrid);
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cy = best_y + pad / 2 + row_h * double(i) + row_h / 2.0;
    const double x0 = best_x + pad, x1 = x0 + sample;
    cv.draw_polyline({{x0, cy}, {x1, cy}}, entries[i].color, entries[i].marker ? 1.0 * s : 1.5 * s);
    if (entries[i].marker) cv.fill_disc((x0 + x1) / 2, cy, 3.0 * s, entries[i].color);
    cv.draw_text(int(x1) + pad, int(cy) - th / 2, entries[i].label, kText, s);
  }
  cv.reset_clip();
  return cv;
}

// Args parses only --long options; accept the documented short forms too.
std::vector<std::string> expand_short_options(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    out.push_back(a == "-o" ? "--out" : a == "-h" ? "--help" : a);
  }
  return out;
}

}  // namespace

int run_plot(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"out", true, false, "the PNG to write (also -o FILE); required"},
      {"title", true, false, "title above the plot (default 'training loss'; '' for none)", /*empty_ok=*/true},
      {"width", true, false, "image width in pixels (default 900)"},
      {"height", true, false, "image height in pixels (default 500)"},
      {"log-y", false, false, "logarithmic loss axis"},
      {"help", false, false, "show this help (also -h)"},
  };
  std::vector<std::string> words = expand_short_options(argc, argv);
  std::vector<char*> ptrs;
  for (auto& w : words) ptrs.push_back(w.data());
  Args args("plot", specs, int(ptrs.size()), ptrs.data(), 2, 1);
  if (args.has("help")) {
    std::cout << "usage: ulysses plot METRICS.jsonl -o loss.png [options]\n\n"
              << "Draws training loss (and eval loss, when logged) against step as a PNG.\n\n"
              << Args::usage("plot", specs).substr(Args::usage("plot", specs).find("options:"));
    return 0;
  }
  ULY_CHECK(args.positional().size() == 1,
            "plot: give exactly one metrics file (got " << args.positional().size()
                                                        << "); usage: ulysses plot METRICS.jsonl -o loss.png");
  const std::string out = args.require("out");
  PlotStyle st;
  st.title = args.get("title", st.title);
  // Checked as the 64-bit values given: an int cast first would wrap 4294967496 to 200.
  st.width = int(args.get_int("width", st.width, limits::kPlotWidth));
  st.height = int(args.get_int("height", st.height, limits::kPlotHeight));
  st.log_y = args.has("log-y");
  const std::string path = args.positional()[0];
  const Metrics m = read_metrics(path);
  const Canvas cv = render(m, st);
  write_png_rgb8(out, cv.rgb().data(), cv.width(), cv.height());
  std::cout << "plot: wrote " << out << " (" << st.width << "x" << st.height << "): " << m.train.x.size()
            << " training points, steps " << m.train.x.front() << ".." << m.train.x.back() << ", loss "
            << m.train.y.front() << " -> " << m.train.y.back();
  if (!m.eval.x.empty()) std::cout << "; " << m.eval.x.size() << " eval points, last " << m.eval.y.back();
  if (m.skipped_null > 0) std::cout << "; " << m.skipped_null << " null/non-finite values skipped";
  std::cout << "\n";
  return 0;
}

}  // namespace ulysses
