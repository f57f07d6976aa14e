// A small raster plotter for benchmark sweeps: line charts with axes, ticks,
// labels and a legend, drawn into an RGB image and written as PNG (zlib; no
// Python). Text uses a built-in 5x7 pixel font (upper case, digits and
// common punctuation; lower case is drawn as upper case).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::bench {

class Image {
 public:
  Image(int width, int height, uint32_t background = 0xffffff);
  int width() const { return w_; }
  int height() const { return h_; }
  uint32_t pixel(int x, int y) const;
  void set(int x, int y, uint32_t rgb);  // ignores points outside
  void fill_rect(int x0, int y0, int x1, int y1, uint32_t rgb);
  void line(int x0, int y0, int x1, int y1, uint32_t rgb, int thickness = 1);
  // Top-left at (x, y); each font pixel becomes scale x scale. Returns the width drawn.
  int text(int x, int y, const std::string& s, uint32_t rgb, int scale = 1);
  static int text_width(const std::string& s, int scale = 1);
  const std::vector<uint8_t>& rgb() const { return rgb_; }

 private:
  int w_, h_;
  std::vector<uint8_t> rgb_;
};

// PNG (8-bit RGB, no interlace) of `img`.
std::string encode_png(const Image& img);
void write_png(const Image& img, const std::string& path);  // throws loom::Error

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  uint32_t rgb = 0x1f77b4;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
};

// Draws `chart` into the rectangle (x, y, w, h) of `img`: axes from 0 (or the
// data minimum when it is negative) to a rounded maximum, 5-ish ticks.
void draw_chart(Image& img, int x, int y, int w, int h, const Chart& chart);

// Tick positions covering [lo, hi]: steps of 1, 2 or 5 x 10^k, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace loom::bench
