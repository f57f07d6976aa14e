// The sweep plotter: ticks, drawing, and a PNG that zlib and a PNG reader accept.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "plot.h"

namespace loom::bench {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint8_t(s[at + 3]);
}

TEST(Plot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const auto t = nice_ticks(0, 0.9);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_NEAR(t[3], 0.6, 1e-12);
  EXPECT_NEAR(t.back(), 1.0, 1e-12);
  EXPECT_EQ(nice_ticks(0, 730).back(), 800);
}

TEST(Plot, PngIsWellFormedAndDecodesToThePixels) {
  Image img(37, 11, 0x102030);
  img.set(3, 4, 0xff0080);
  const std::string png = encode_png(img);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::string idat;
  std::vector<std::string> types;
  while (at < png.size()) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, len);
    const uint32_t crc = be32(png, at + 8 + len);
    const std::string td = type + data;
    EXPECT_EQ(crc, crc32(0, reinterpret_cast<const Bytef*>(td.data()), td.size())) << type;
    if (type == "IHDR") {
      EXPECT_EQ(be32(data, 0), 37u);
      EXPECT_EQ(be32(data, 4), 11u);
      EXPECT_EQ(data[8], 8);  // bit depth
      EXPECT_EQ(data[9], 2);  // RGB
    }
    if (type == "IDAT") idat += data;
    types.push_back(type);
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size());
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::string raw(11 * (37 * 3 + 1), '\0');
  uLongf n = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &n,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
            Z_OK);
  ASSERT_EQ(n, raw.size());
  const size_t row = 4 * (37 * 3 + 1);
  EXPECT_EQ(raw[row], 0);  // filter byte
  EXPECT_EQ(uint8_t(raw[row + 1 + 3 * 3]), 0xff);
  EXPECT_EQ(uint8_t(raw[row + 1 + 3 * 3 + 2]), 0x80);
  EXPECT_EQ(uint8_t(raw[1]), 0x10);
}

TEST(Plot, ChartDrawsSeriesAxesAndText) {
  Image img(400, 300);
  Chart c{"LATENCY", "rate", "ms", {{"TTFT p99", {1, 2, 4}, {10, 20, 80}, 0xff0000}}};
  draw_chart(img, 0, 0, 400, 300, c);
  int red = 0, ink = 0;
  for (int y = 0; y < 300; ++y)
    for (int x = 0; x < 400; ++x) {
      red += img.pixel(x, y) == 0xff0000;
      ink += img.pixel(x, y) == 0x202020;
    }
  EXPECT_GT(red, 100);  // line, markers and legend swatch
  EXPECT_GT(ink, 300);  // axes and labels
  EXPECT_EQ(Image::text_width("ab1", 2), 34);
}

}  // namespace
}  // namespace loom::bench
