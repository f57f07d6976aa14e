#include "plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace loom::bench {

namespace {

// 5x7 glyphs, row by row, '#' = ink.
struct Glyph {
  char c;
  const char* rows;  // 35 chars
};
constexpr Glyph kFont[] = {
    {'0', ".###.#...##..###.#.###..##...#.###."}, {'1', "..#...##....#....#....#....#...###."},
    {'2', ".###.#...#....#...#...#...#...#####"}, {'3', "####.....#....#.###.....#....#####."},
    {'4', "...#...##..#.#.#..#.#####...#....#."}, {'5', "######....####.....#....##...#.###."},
    {'6', "..##..#...#....####.#...##...#.###."}, {'7', "#####....#...#...#...#....#....#..."},
    {'8', ".###.#...##...#.###.#...##...#.###."}, {'9', ".###.#...##...#.####....#...#..##.."},
    {'A', ".###.#...##...#######...##...##...#"}, {'B', "####.#...##...#####.#...##...#####."},
    {'C', ".###.#...##....#....#....#...#.###."}, {'D', "###..#..#.#...##...##...##..#.###.."},
    {'E', "######....#....####.#....#....#####"}, {'F', "######....#....####.#....#....#...."},
    {'G', ".###.#...##....#.####...##...#.####"}, {'H', "#...##...##...#######...##...##...#"},
    {'I', ".###...#....#....#....#....#...###."}, {'J', "..###...#....#....#.#..#.#..#..##.."},
    {'K', "#...##..#.#.#..##...#.#..#..#.#...#"}, {'L', "#....#....#....#....#....#....#####"},
    {'M', "#...###.###.#.##...##...##...##...#"}, {'N', "#...##...###..##.#.##..###...##...#"},
    {'O', ".###.#...##...##...##...##...#.###."}, {'P', "####.#...##...#####.#....#....#...."},
    {'Q', ".###.#...##...##...##.#.##..#..##.#"}, {'R', "####.#...##...#####.#.#..#..#.#...#"},
    {'S', ".#####....#.....###.....#....#####."}, {'T', "#####..#....#....#....#....#....#.."},
    {'U', "#...##...##...##...##...##...#.###."}, {'V', "#...##...##...##...##...#.#.#...#.."},
    {'W', "#...##...##...##.#.##.#.##.#.#.#.#."}, {'X', "#...##...#.#.#...#...#.#.#...##...#"},
    {'Y', "#...##...#.#.#...#....#....#....#.."}, {'Z', "#####....#...#...#...#...#....#####"},
    {' ', "..................................."}, {'.', "..............................##..."},
    {',', ".........................##...#..#."}, {'-', "...............###................."},
    {'/', "....#....#...#...#...#...#....#...."}, {'(', "...#...#...#....#....#.....#.....#."},
    {')', ".#.....#.....#....#....#...#...#..."}, {'%', "##...##..#...#...#...#...#..##...##"},
    {':', "......##...##.........##...##......"}, {'_', "..............................#####"},
    {'=', "..........#####.....#####.........."}, {'+', ".......#....#..#####..#....#......."},
    {'<', "...#...#...#...#.....#.....#.....#."}, {'>', ".#.....#.....#.....#...#...#...#..."},
    {'?', ".###.#...#....#...#...#.........#.."},
};

const char* glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const auto& g : kFont)
    if (g.c == c) return g.rows;
  return glyph('?');
}

void be32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
}

void chunk(std::string& out, const char* type, const std::string& data) {
  be32(out, static_cast<uint32_t>(data.size()));
  std::string td(type, 4);
  td += data;
  out += td;
  be32(out, static_cast<uint32_t>(
                crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))));
}

std::string fmt_tick(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3))
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Image::Image(int width, int height, uint32_t background) : w_(width), h_(height) {
  LOOM_CHECK(width > 0 && height > 0 && width <= 16384 && height <= 16384, "image size {}x{}",
             width, height);
  rgb_.resize(static_cast<size_t>(w_) * h_ * 3);
  fill_rect(0, 0, w_ - 1, h_ - 1, background);
}

uint32_t Image::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return 0;
  const size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  return (uint32_t(rgb_[i]) << 16) | (uint32_t(rgb_[i + 1]) << 8) | rgb_[i + 2];
}

void Image::set(int x, int y, uint32_t c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  const size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  rgb_[i] = static_cast<uint8_t>(c >> 16);
  rgb_[i + 1] = static_cast<uint8_t>(c >> 8);
  rgb_[i + 2] = static_cast<uint8_t>(c);
}

void Image::fill_rect(int x0, int y0, int x1, int y1, uint32_t c) {
  for (int y = std::max(0, std::min(y0, y1)); y <= std::min(h_ - 1, std::max(y0, y1)); ++y)
    for (int x = std::max(0, std::min(x0, x1)); x <= std::min(w_ - 1, std::max(x0, x1)); ++x)
      set(x, y, c);
}

void Image::line(int x0, int y0, int x1, int y1, uint32_t c, int thickness) {
  // Bresenham; thickness as a square pen.
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int guard = 0; guard < 100000; ++guard) {
    fill_rect(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

int Image::text_width(const std::string& s, int scale) {
  return s.empty() ? 0 : static_cast<int>(s.size()) * 6 * scale - scale;
}

int Image::text(int x, int y, const std::string& s, uint32_t c, int scale) {
  int cx = x;
  for (char ch : s) {
    const char* rows = glyph(ch);
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (rows[r * 5 + col] == '#')
          fill_rect(cx + col * scale, y + r * scale, cx + col * scale + scale - 1,
                    y + r * scale + scale - 1, c);
    cx += 6 * scale;
  }
  return cx - x;
}

std::string encode_png(const Image& img) {
  const int w = img.width(), h = img.height();
  std::string raw;
  raw.reserve(static_cast<size_t>(h) * (w * 3 + 1));
  const auto& px = img.rgb();
  for (int y = 0; y < h; ++y) {
    raw += '\0';  // filter: none
    raw.append(reinterpret_cast<const char*>(px.data()) + static_cast<size_t>(y) * w * 3,
               static_cast<size_t>(w) * 3);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  const int rc =
      compress2(reinterpret_cast<Bytef*>(z.data()), &zlen,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 9);
  LOOM_CHECK(rc == Z_OK, "zlib compress2 failed: {}", rc);
  z.resize(zlen);
  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  be32(ihdr, static_cast<uint32_t>(w));
  be32(ihdr, static_cast<uint32_t>(h));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, filter 0, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

void write_png(const Image& img, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  if (!f) LOOM_THROW("cannot write {}", path);
  const std::string png = encode_png(img);
  f.write(png.data(), static_cast<std::streamsize>(png.size()));
  if (!f) LOOM_THROW("cannot write {}", path);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Integer multiples of the step from below lo to at or above hi.
  std::vector<double> t;
  const auto first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const auto last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  for (int64_t k = first; k <= last && t.size() < 100; ++k)
    t.push_back(static_cast<double>(k) * step);
  return t;
}

void draw_chart(Image& img, int x, int y, int w, int h, const Chart& chart) {
  constexpr uint32_t kInk = 0x202020, kGrid = 0xdddddd;
  const int left = x + 70, right = x + w - 20, top = y + 30, bottom = y + h - 50;
  double xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  bool any = false;
  for (const auto& s : chart.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if (!any) xmin = xmax = s.x[i];
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymax = std::max(ymax, s.y[i]);
      ymin = std::min(ymin, s.y[i]);
      any = true;
    }
  xmin = std::min(0.0, xmin);
  if (!(xmax > xmin)) xmax = xmin + 1;
  if (!(ymax > ymin)) ymax = ymin + 1;
  const auto xt = nice_ticks(xmin, xmax), yt = nice_ticks(ymin, ymax);
  xmax = std::max(xmax, xt.back());
  ymax = std::max(ymax, yt.back());
  auto px = [&](double v) {
    return left + static_cast<int>(std::lround((v - xmin) / (xmax - xmin) * (right - left)));
  };
  auto py = [&](double v) {
    return bottom - static_cast<int>(std::lround((v - ymin) / (ymax - ymin) * (bottom - top)));
  };

  img.text(x + (w - Image::text_width(chart.title, 2)) / 2, y + 6, chart.title, kInk, 2);
  for (double v : yt) {
    img.line(left, py(v), right, py(v), kGrid);
    const std::string s = fmt_tick(v);
    img.text(left - 6 - Image::text_width(s), py(v) - 3, s, kInk);
  }
  for (double v : xt) {
    img.line(px(v), top, px(v), bottom, kGrid);
    const std::string s = fmt_tick(v);
    img.text(px(v) - Image::text_width(s) / 2, bottom + 6, s, kInk);
  }
  img.line(left, bottom, right, bottom, kInk);
  img.line(left, top, left, bottom, kInk);
  img.text(left + (right - left - Image::text_width(chart.x_label)) / 2, bottom + 22, chart.x_label,
           kInk);
  img.text(x + 4, top - 14, chart.y_label, kInk);

  int legend_y = top + 6;
  for (const auto& s : chart.series) {
    std::vector<std::pair<int, int>> pts;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) pts.emplace_back(px(s.x[i]), py(s.y[i]));
    std::sort(pts.begin(), pts.end());
    for (size_t i = 1; i < pts.size(); ++i)
      img.line(pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second, s.rgb, 2);
    for (const auto& [a, b] : pts) img.fill_rect(a - 3, b - 3, a + 3, b + 3, s.rgb);
    img.fill_rect(left + 10, legend_y + 1, left + 24, legend_y + 5, s.rgb);
    img.text(left + 30, legend_y, s.label, kInk);
    legend_y += 12;
  }
}

}  // namespace loom::bench
