// A tiny RGB8 canvas for `ulysses plot`: filled rectangles, anti-aliased thick
// polylines and discs, and a built-in 5x7 bitmap font (ASCII 32..126) drawn at
// an integer scale, horizontally or rotated for a vertical axis title.
// Coordinates are pixels, origin top-left, y down; everything is clipped to the
// canvas and to an optional clip rectangle.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct PointF {
  double x = 0, y = 0;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  Rgb pixel(int x, int y) const;
  const std::vector<uint8_t>& rgb() const { return rgb_; }  // [height, width, 3]

  // Drawing is limited to [x0, x1) x [y0, y1) (and the canvas) until reset_clip().
  void set_clip(int x0, int y0, int x1, int y1);
  void reset_clip();

  void set(int x, int y, Rgb c);
  void blend(int x, int y, Rgb c, double alpha);  // alpha in [0, 1]
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // [x0, x1) x [y0, y1)
  void stroke_rect(int x0, int y0, int x1, int y1, Rgb c);  // 1-pixel outline of the same box

  // A connected line of `width` pixels through the points (pixel centres at +0.5).
  // Each pixel takes the largest coverage of any segment, so joints do not darken.
  void draw_polyline(const std::vector<PointF>& points, Rgb c, double width, bool antialias = true);
  void fill_disc(double cx, double cy, double radius, Rgb c, bool antialias = true);

  // Text with its top-left corner at (x, y); characters outside 32..126 print as '?'.
  void draw_text(int x, int y, const std::string& text, Rgb c, int scale = 1);
  // Text rotated 90 degrees counter-clockwise (reads bottom to top); (x, y) is the
  // top-left of its box, which is text_height(scale) wide and text_width() tall.
  void draw_text_up(int x, int y, const std::string& text, Rgb c, int scale = 1);

  static int text_width(const std::string& text, int scale = 1);
  static int text_height(int scale = 1);  // cap height, 7 * scale (descenders hang 2 * scale below)

 private:
  bool inside(int x, int y) const { return x >= cx0_ && x < cx1_ && y >= cy0_ && y < cy1_; }
  void apply_coverage(int x0, int y0, int x1, int y1, const std::vector<float>& cov, Rgb c);

  int width_, height_;
  int cx0_, cy0_, cx1_, cy1_;
  std::vector<uint8_t> rgb_;
};

// The colours of `ulysses plot` (matplotlib's first two), shared with its tests.
namespace plot_colors {
constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kTrainLoss{31, 119, 180};
constexpr Rgb kEvalLoss{255, 127, 14};
constexpr Rgb kGrid{228, 228, 228};
constexpr Rgb kAxis{60, 60, 60};
constexpr Rgb kText{20, 20, 20};
}  // namespace plot_colors

// The glyph of `ch`: kGlyphRows rows top to bottom, bit 4 the leftmost column. Letters
// are 5x7 above the baseline; descenders take two more rows, which hang into the
// space below a line of text rather than counting in text_height().
const uint8_t* font_glyph(char ch);
constexpr int kGlyphW = 5, kGlyphH = 7, kGlyphRows = 9, kCellW = 6;  // a cell: glyph + 1 column of space

}  // namespace ulysses
