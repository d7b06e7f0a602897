// `ulysses plot`: end to end from a metrics file to a PNG that the independent
// test decoder reads back; the picture's size, colours and geometry (a falling
// loss is drawn falling, --log-y straightens an exponential decay), the short
// options, and a clear one-line error for every kind of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli/plot_image.h"
#include "expect_error.h"
#include "core/error.h"
#include "png_decode.h"
#include "test_util.h"

namespace ulysses {
int run_plot(int argc, char** argv);  // src/cli/plot.cpp

namespace {

using plot_colors::kEvalLoss;
using plot_colors::kTrainLoss;


class PlotTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("plot_test"); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // loss(step) for steps first..last, one JSON line each, plus eval lines every `eval_every`.
  template <class F>
  std::string metrics(const std::string& name, int first, int last, F loss, int eval_every = 0) {
    std::string text;
    for (int s = first; s <= last; ++s) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "{\"step\": %d, \"loss\": %.6f, \"lr\": 0.0003, \"grad_norm\": 1.2, \"tokens_per_s\": 1234.5}\n", s,
                    loss(s));
      text += line;
      if (eval_every > 0 && s % eval_every == 0) {
        std::snprintf(line, sizeof line, "{\"step\": %d, \"eval_loss\": %.6f}\n", s, loss(s) + 0.1);
        text += line;
      }
    }
    return write(name, text);
  }
  // Runs `ulysses plot ARGS...` and returns the exit code.
  int plot(std::vector<std::string> args) {
    args.insert(args.begin(), {"ulysses", "plot"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return run_plot(int(argv.size()), argv.data());
  }
  std::string out(const std::string& name) { return dir_ + "/" + name; }

  std::string dir_;
};

// Pixels of exactly colour c (interior of strokes and markers; AA edges are blends).
std::vector<std::pair<int, int>> pixels_of(const test::DecodedPng& img, Rgb c) {
  std::vector<std::pair<int, int>> px;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const uint8_t* p = img.at(x, y);
      if (p[0] == c.r && p[1] == c.g && p[2] == c.b) px.push_back({x, y});
    }
  return px;
}

// Median row of the colour's pixels whose column lies in [f0, f1) of the width; -1 if none.
double median_row(const test::DecodedPng& img, Rgb c, double f0, double f1) {
  std::vector<int> ys;
  for (auto [x, y] : pixels_of(img, c))
    if (x >= f0 * img.width && x < f1 * img.width) ys.push_back(y);
  if (ys.empty()) return -1;
  std::nth_element(ys.begin(), ys.begin() + ys.size() / 2, ys.end());
  return ys[ys.size() / 2];
}

TEST_F(PlotTest, WritesAPngOfTheRequestedSizeWithTheLossLine) {
  const auto m = metrics("m.jsonl", 1, 200, [](int s) { return 2.0 + 8.0 * std::exp(-s / 40.0); });
  ASSERT_EQ(plot({m, "-o", out("a.png"), "--width", "640", "--height", "360"}), 0);
  const auto img = test::decode_png_file(out("a.png"));
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 360);
  EXPECT_GT(pixels_of(img, kTrainLoss).size(), 500u);  // a 3-pixel line across ~550 columns
  EXPECT_EQ(pixels_of(img, kEvalLoss).size(), 0u);      // no eval lines, no eval ink
  // Default size, and --out=FILE spelled the long way.
  ASSERT_EQ(plot({m, "--out=" + out("b.png")}), 0);
  const auto def = test::decode_png_file(out("b.png"));
  EXPECT_EQ(def.width, 900);
  EXPECT_EQ(def.height, 500);
  // Most of the picture is background; text is dark.
  EXPECT_GT(pixels_of(def, plot_colors::kBackground).size(), size_t(900 * 500 / 2));
  EXPECT_GT(pixels_of(def, plot_colors::kText).size(), 200u);
}

TEST_F(PlotTest, FallingLossIsDrawnHigherOnTheLeft) {
  const auto fall = metrics("fall.jsonl", 0, 300, [](int s) { return 10.0 - s * 0.025; });
  ASSERT_EQ(plot({fall, "-o", out("fall.png")}), 0);
  const auto f = test::decode_png_file(out("fall.png"));
  const double left = median_row(f, kTrainLoss, 0.10, 0.30), right = median_row(f, kTrainLoss, 0.55, 0.70);
  ASSERT_GE(left, 0);
  ASSERT_GE(right, 0);
  EXPECT_LT(left + 50, right) << "falling loss should be drawn higher (smaller row) on the left";
  // And the mirror image: the check is not satisfied by any picture.
  const auto rise = metrics("rise.jsonl", 0, 300, [](int s) { return 2.5 + s * 0.025; });
  ASSERT_EQ(plot({rise, "-o", out("rise.png")}), 0);
  const auto r = test::decode_png_file(out("rise.png"));
  EXPECT_GT(median_row(r, kTrainLoss, 0.10, 0.30), median_row(r, kTrainLoss, 0.55, 0.70) + 50);
}

TEST_F(PlotTest, EvalLossIsDrawnWithMarkersInItsOwnColour) {
  const auto m = metrics("m.jsonl", 1, 400, [](int s) { return 2.0 + 8.0 * std::exp(-s / 80.0); }, 50);
  ASSERT_EQ(plot({m, "-o", out("e.png")}), 0);
  const auto img = test::decode_png_file(out("e.png"));
  const auto eval = pixels_of(img, kEvalLoss);
  ASSERT_GT(eval.size(), 200u);
  // A marker is a solid disc: some eval pixel has a full 5x5 block of eval colour around it.
  bool disc = false;
  for (auto [x, y] : eval) {
    bool all = x >= 2 && y >= 2 && x + 2 < img.width && y + 2 < img.height;
    for (int dy = -2; all && dy <= 2; ++dy)
      for (int dx = -2; all && dx <= 2; ++dx) {
        const uint8_t* p = img.at(x + dx, y + dy);
        all = p[0] == kEvalLoss.r && p[1] == kEvalLoss.g && p[2] == kEvalLoss.b;
      }
    disc = disc || all;
  }
  EXPECT_TRUE(disc) << "no solid eval marker found";
}

TEST_F(PlotTest, LogYStraightensAnExponentialDecay) {
  // loss = 100 * 10^(-3 s / 400): a straight line on a log axis, a sharp elbow on a linear one.
  const auto m = metrics("exp.jsonl", 0, 400, [](int s) { return 100.0 * std::pow(10.0, -3.0 * s / 400); });
  ASSERT_EQ(plot({m, "-o", out("lin.png")}), 0);
  ASSERT_EQ(plot({m, "-o", out("log.png"), "--log-y"}), 0);
  const auto lin = test::decode_png_file(out("lin.png")), lg = test::decode_png_file(out("log.png"));
  auto drops = [](const test::DecodedPng& img) {
    const double a = median_row(img, kTrainLoss, 0.14, 0.16), b = median_row(img, kTrainLoss, 0.34, 0.36),
                 c = median_row(img, kTrainLoss, 0.54, 0.56);
    EXPECT_TRUE(a >= 0 && b >= 0 && c >= 0) << a << " " << b << " " << c;
    return std::pair{b - a, c - b};  // how far the line falls over two equal spans of steps
  };
  const auto [lin1, lin2] = drops(lin);
  const auto [log1, log2] = drops(lg);
  EXPECT_GT(lin1, 3 * lin2) << "linear axis: the first span should fall much further";
  EXPECT_GT(log1, 20);
  EXPECT_NEAR(log1 / log2, 1.0, 0.15) << "log axis: equal spans should fall equally";
}

TEST_F(PlotTest, ResumedStepsKeepTheLaterLineAndNullsAreSkipped) {
  std::string text = "{\"run\": \"header line without a loss\"}\n\n";
  for (int s = 1; s <= 10; ++s) text += "{\"step\": " + std::to_string(s) + ", \"loss\": 5.0}\n";
  for (int s = 6; s <= 10; ++s) text += "{\"step\": " + std::to_string(s) + ", \"loss\": 3.0}\n";
  text += "{\"step\": 11, \"loss\": null}\n";
  const auto m = write("resumed.jsonl", text);
  ::testing::internal::CaptureStdout();
  const int code = plot({m, "-o", out("r.png"), "--title", "resumed"});
  const std::string said = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(code, 0);
  EXPECT_NE(said.find("10 training points"), std::string::npos) << said;
  EXPECT_NE(said.find("5 -> 3"), std::string::npos) << said;
  EXPECT_NE(said.find("1 null"), std::string::npos) << said;
}

TEST_F(PlotTest, HelpAndShortOptions) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(plot({"-h"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("--log-y"), std::string::npos) << help;
  EXPECT_NE(help.find("-o FILE"), std::string::npos) << help;
}

TEST_F(PlotTest, BadInputGivesOneClearLine) {
  const auto good = metrics("good.jsonl", 1, 5, [](int s) { return 3.0 - 0.1 * s; });
  EXPECT_ERROR(plot({out("missing.jsonl"), "-o", out("x.png")}), "cannot open", "missing.jsonl");
  EXPECT_ERROR(plot({write("empty.jsonl", ""), "-o", out("x.png")}), "empty", "empty.jsonl");
  EXPECT_ERROR(plot({write("blank.jsonl", "\n  \n"), "-o", out("x.png")}), "empty");
  EXPECT_ERROR(plot({write("bad.jsonl", "{\"step\": 1, \"loss\": 2}\n\n{\"step\": 2, \"loss\": 2.5\n"), "-o",
                     out("x.png")}),
               "bad.jsonl:3", "not valid JSON");
  EXPECT_ERROR(plot({write("arr.jsonl", "[1, 2]\n"), "-o", out("x.png")}), "arr.jsonl:1", "not a JSON object");
  EXPECT_ERROR(plot({write("noloss.jsonl", "{\"step\": 1, \"lr\": 0.1}\n{\"step\": 2, \"eval_loss\": 2}\n"), "-o",
                     out("x.png")}),
               "no \"loss\" values", "noloss.jsonl");
  EXPECT_ERROR(plot({write("str.jsonl", "{\"step\": 1, \"loss\": \"high\"}\n"), "-o", out("x.png")}), "str.jsonl:1",
               "not a number");
  EXPECT_ERROR(plot({write("nostep.jsonl", "{\"loss\": 2.0}\n"), "-o", out("x.png")}), "nostep.jsonl:1", "step");
  EXPECT_ERROR(plot({write("zero.jsonl", "{\"step\": 1, \"loss\": 0}\n{\"step\": 2, \"loss\": 1}\n"), "-o",
                     out("x.png"), "--log-y"}),
               "--log-y", "positive");
  EXPECT_ERROR(plot({good}), "--out");
  EXPECT_ERROR(plot({"-o", out("x.png")}), "metrics file");
  // A second file is a word plot does not take (issue 28: stray words are refused as such).
  EXPECT_ERROR(plot({good, good, "-o", out("x.png")}), "unexpected argument", "good.jsonl");
  EXPECT_ERROR(plot({good, "-o", out("x.png"), "--width", "10"}), "--width must be in [200, 8000]", "got 10");
  EXPECT_ERROR(plot({good, "-o", out("x.png"), "--height", "tall"}), "--height", "integer");
  EXPECT_ERROR(plot({good, "-o", out("x.png"), "--logy"}), "unknown option --logy", "--log-y");
  EXPECT_ERROR(plot({good, "-o", dir_ + "/no/such/dir/x.png"}), "no/such/dir/x.png");
  // None of the failures above left a picture behind.
  EXPECT_FALSE(std::ifstream(out("x.png")).good());
}

TEST(PlotCanvas, TextAndLinesLandWhereAsked) {
  Canvas c(60, 30, plot_colors::kBackground);
  const Rgb ink{0, 0, 0};
  c.draw_text(2, 3, "H", ink, 2);  // H: both side columns set on every row
  EXPECT_EQ(Canvas::text_width("H", 2), 10);
  EXPECT_EQ(c.pixel(2, 3), ink);
  EXPECT_EQ(c.pixel(11, 16), ink);               // bottom-right block of the H
  EXPECT_EQ(c.pixel(6, 3), plot_colors::kBackground);  // the gap between the H's legs
  c.draw_polyline({{20, 10.5}, {50, 10.5}}, ink, 3, false);
  EXPECT_EQ(c.pixel(35, 10), ink);
  EXPECT_EQ(c.pixel(35, 9), ink);
  EXPECT_EQ(c.pixel(35, 13), plot_colors::kBackground);
  c.set_clip(0, 0, 30, 30);
  c.fill_rect(0, 20, 60, 22, ink);
  EXPECT_EQ(c.pixel(29, 21), ink);
  EXPECT_EQ(c.pixel(30, 21), plot_colors::kBackground);  // clipped
  // Upright text rotated: the first glyph's left column ends up along the bottom.
  Canvas v(20, 20, plot_colors::kBackground);
  v.draw_text_up(0, 0, "L", ink, 1);  // L: left column full, bottom row full
  for (int u = 0; u < kGlyphH; ++u) EXPECT_EQ(v.pixel(u, 4), ink) << u;  // the column of L, lying down
  EXPECT_EQ(v.pixel(6, 0), ink);                          // the foot of the L, standing up at the right
  EXPECT_EQ(v.pixel(5, 0), plot_colors::kBackground);
  // Descenders hang below the 7-row cap height, so 'p' and 'g' do not read as 'P' and '9'.
  Canvas d(20, 12, plot_colors::kBackground);
  d.draw_text(0, 0, "p", ink, 1);
  EXPECT_EQ(d.pixel(0, kGlyphH + 1), ink);
  EXPECT_EQ(d.pixel(0, 0), plot_colors::kBackground);
}

}  // namespace
}  // namespace ulysses
