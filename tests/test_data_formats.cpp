// Tests of the CIFAR, NPY, CSV, image-folder and synthetic sources and of the
// seeded eval split, on small fixtures written here; errors included.
// labels: cpu
// links: trainer_data
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "data/class_names.h"
#include "data/image_decode.h"
#include "data/registry.h"
#include "data/sources.h"
#include "data/split.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using namespace trainer;
using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;

namespace {

std::vector<float> sample_of(const Dataset& d, std::int64_t i, std::int64_t* label) {
  std::vector<float> s(static_cast<std::size_t>(numel(d.sample_shape())));
  d.read(i, s.data(), label);
  return s;
}

}  // namespace

TEST_CASE("CIFAR-10 and CIFAR-100 binary batches") {
  TempDir dir;
  std::vector<std::uint8_t> b10, b100;
  for (int r = 0; r < 3; ++r) {
    b10.push_back(static_cast<std::uint8_t>(r + 4));
    b100.push_back(static_cast<std::uint8_t>(r));       // coarse
    b100.push_back(static_cast<std::uint8_t>(50 + r));  // fine
    for (int k = 0; k < 3072; ++k) {
      b10.push_back(static_cast<std::uint8_t>((k + r) % 251));
      b100.push_back(static_cast<std::uint8_t>((k * 3 + r) % 256));
    }
  }
  write_bytes(dir.file("a.bin"), b10);
  write_bytes(dir.file("b.bin"), b10);
  write_bytes(dir.file("c100.bin"), b100);

  auto d = open_cifar({dir.file("a.bin"), dir.file("b.bin")}, CifarVariant::cifar10);
  REQUIRE(d->size() == 6);
  CHECK(d->sample_shape() == Shape{3, 32, 32});
  CHECK(d->num_classes() == 10);
  std::int64_t label = -1;
  auto s = sample_of(*d, 4, &label);  // second file, record 1
  CHECK(label == 5);
  CHECK(s[0] == 1.0f);
  CHECK(s[1024] == float((1024 + 1) % 251));  // first green pixel

  auto fine = open_cifar({dir.file("c100.bin")}, CifarVariant::cifar100, true);
  auto coarse = open_cifar({dir.file("c100.bin")}, CifarVariant::cifar100, false);
  CHECK(fine->num_classes() == 100);
  CHECK(coarse->num_classes() == 20);
  s = sample_of(*fine, 2, &label);
  CHECK(label == 52);
  CHECK(s[5] == float((5 * 3 + 2) % 256));
  sample_of(*coarse, 2, &label);
  CHECK(label == 2);

  Attrs a;
  a.set("files", std::vector<std::string>{dir.file("c100.bin")});
  a.set("variant", std::string("cifar100"));
  a.set("label", std::string("coarse"));
  CHECK(open_source("cifar", a)->num_classes() == 20);
  // CIFAR-10 records have one label: no coarse one to pick (an error at
  // `label`).
  const auto field_of_error = [](const auto& open) {
    try {
      open();
    } catch (const SourceFieldError& e) {
      return e.field() + ": " + e.what();
    }
    return std::string("(no SourceFieldError)");
  };
  CHECK_THAT(field_of_error([&] { open_cifar({dir.file("a.bin")}, CifarVariant::cifar10, false); }),
             Contains("label: CIFAR-10 has no coarse labels"));

  auto truncated = b10;
  truncated.resize(3073 * 2 + 100);
  write_bytes(dir.file("short.bin"), truncated);
  CHECK_THROWS_WITH(open_cifar({dir.file("short.bin")}, CifarVariant::cifar10),
                    Contains(dir.file("short.bin")) && Contains("byte offset 6146"));
  // A CIFAR-100 file read as CIFAR-10 has the wrong record size.
  CHECK_THROWS_WITH(open_cifar({dir.file("c100.bin")}, CifarVariant::cifar10),
                    Contains("not a multiple of the 3073-byte record"));
  CHECK_THROWS_WITH(open_cifar({dir.file("missing.bin")}, CifarVariant::cifar10),
                    Contains(dir.file("missing.bin")));
}

TEST_CASE("NPY pairs: uint8, float32 and int64 samples, labels and targets") {
  TempDir dir;
  const std::uint8_t x8[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const float xf[] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
  const std::int64_t x64[] = {-3, 7, 9, 11};
  const std::int64_t y64[] = {2, 0, 1};
  const float yf[] = {0.25f, -1.0f, 8.0f};
  write_bytes(dir.file("x8.npy"), npy_bytes("|u1", "(3, 2, 2)", x8, sizeof x8));
  write_bytes(dir.file("xf.npy"), npy_bytes("<f4", "(3, 2)", xf, sizeof xf));
  write_bytes(dir.file("x64.npy"), npy_bytes("<i8", "(2, 2)", x64, sizeof x64));
  write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(3,)", y64, sizeof y64));
  write_bytes(dir.file("y2.npy"), npy_bytes("<i8", "(2,)", y64, 16));
  write_bytes(dir.file("yf.npy"), npy_bytes("<f4", "(3,)", yf, sizeof yf));

  auto d = open_npy(dir.file("x8.npy"), dir.file("y.npy"));
  CHECK(d->size() == 3);
  CHECK(d->sample_shape() == Shape{2, 2});
  CHECK(d->num_classes() == 3);
  std::int64_t label = -1;
  CHECK(sample_of(*d, 1, &label) == std::vector<float>{5, 6, 7, 8});
  CHECK(label == 0);

  auto f = open_npy(dir.file("xf.npy"), dir.file("yf.npy"));
  CHECK(f->target_shape() == Shape{1});
  CHECK(f->num_classes() == 0);
  std::vector<float> s(2), target(1);
  f->read(2, s.data(), &label, target.data());
  CHECK(s == std::vector<float>{4.5f, 5.5f});
  CHECK(target[0] == 8.0f);

  auto i = open_npy(dir.file("x64.npy"), dir.file("y2.npy"));
  CHECK(sample_of(*i, 0, &label) == std::vector<float>{-3, 7});

  SECTION("errors") {
    CHECK_THROWS_WITH(open_npy(dir.file("x8.npy"), dir.file("y2.npy")),
                      Contains("hold 3 and 2 samples"));
    write_bytes(dir.file("fortran.npy"), npy_bytes("<f4", "(3, 2)", xf, sizeof xf, "True"));
    CHECK_THROWS_WITH(open_npy(dir.file("fortran.npy"), dir.file("y.npy")),
                      Contains(dir.file("fortran.npy")) &&
                          Contains("fortran_order True is not supported for shape [3, 2]"));
    // A column-major array whose layout is the C one (one extent over 1):
    // [3, 1] features, and labels of shape (3,).
    write_bytes(dir.file("fortran_column.npy"), npy_bytes("<f4", "(3, 1)", xf, 12, "True"));
    const std::int64_t y3[3] = {1, 0, 1};
    write_bytes(dir.file("fortran_y.npy"), npy_bytes("<i8", "(3,)", y3, sizeof y3, "True"));
    auto column = open_npy(dir.file("fortran_column.npy"), dir.file("fortran_y.npy"));
    CHECK(sample_of(*column, 2, &label) == std::vector<float>{xf[2]});
    CHECK(label == 1);
    write_bytes(dir.file("c16.npy"), npy_bytes("<c16", "(3,)", xf, 24));
    CHECK_THROWS_WITH(open_npy(dir.file("c16.npy"), dir.file("y.npy")),
                      Contains("dtype '<c16' is not supported"));
    auto truncated = npy_bytes("<f4", "(3, 2)", xf, sizeof xf);
    truncated.resize(truncated.size() - 4);
    write_bytes(dir.file("short.npy"), truncated);
    CHECK_THROWS_WITH(open_npy(dir.file("short.npy"), dir.file("y.npy")),
                      Contains("truncated at byte offset " + std::to_string(truncated.size())));
    write_text(dir.file("text.npy"), "x,y\n1,2\n");
    CHECK_THROWS_WITH(open_npy(dir.file("text.npy"), dir.file("y.npy")),
                      Contains(dir.file("text.npy")) && Contains("not a .npy file"));
    // An .npz (a zip of .npy files) is named for what it is.
    write_text(dir.file("pair.npz"), std::string("PK\x03\x04") + std::string(40, '\0'));
    CHECK_THROWS_WITH(
        open_npy(dir.file("pair.npz"), dir.file("y.npy")),
        Contains("a zip archive (numpy.savez's .npz?), not a .npy file") && Contains("numpy.save"));
    CHECK_THROWS_WITH(open_npy(dir.file("x8.npy"), dir.file("y.npy"), 2),
                      Contains("label 2 of element 0 of NPY file '" + dir.file("y.npy") +
                               "' (byte offset 128) is outside [0, 2)"));
  }
}

TEST_CASE("CSV: header, column selection by name, no header, regression, errors") {
  TempDir dir;
  write_text(dir.file("a.csv"), "w,h,kind,z\n1.5,2,1,9\n3,4.25,0,8\n\n5,6,2,7\n");
  CsvOptions o;
  o.path = dir.file("a.csv");
  o.label = "kind";
  auto d = open_csv(o);
  REQUIRE(d->size() == 3);
  CHECK(d->sample_shape() == Shape{3});
  CHECK(d->num_classes() == 3);
  std::int64_t label = -1;
  CHECK(sample_of(*d, 1, &label) == std::vector<float>{3, 4.25f, 8});
  CHECK(label == 0);

  o.features = {"z", "w"};
  CHECK(sample_of(*open_csv(o), 0, &label) == std::vector<float>{9, 1.5f});

  write_text(dir.file("plain.csv"), "1,2,0\n3,4,1\n");
  CsvOptions plain;
  plain.path = dir.file("plain.csv");
  plain.header = false;
  auto p = open_csv(plain);
  CHECK(p->size() == 2);
  CHECK(sample_of(*p, 1, &label) == std::vector<float>{3, 4});
  CHECK(label == 1);

  CsvOptions reg;
  reg.path = dir.file("a.csv");
  reg.label = "h";
  reg.regression = true;
  auto r = open_csv(reg);
  std::vector<float> s(3), target(1);
  r->read(1, s.data(), &label, target.data());
  CHECK(target[0] == 4.25f);

  Attrs attrs;
  attrs.set("path", dir.file("a.csv"));
  attrs.set("label", std::string("kind"));
  attrs.set("features", std::vector<std::string>{"h"});
  CHECK(open_source("csv", attrs)->sample_shape() == Shape{1});

  SECTION("errors name the file and the line") {
    write_text(dir.file("ragged.csv"), "a,b,c\n1,2,0\n1,2\n");
    CsvOptions bad;
    bad.path = dir.file("ragged.csv");
    CHECK_THROWS_WITH(open_csv(bad), Contains(dir.file("ragged.csv")) && Contains("line 3") &&
                                         Contains("has 2 fields, expected 3"));
    write_text(dir.file("word.csv"), "a,b,c\n1,2,0\n1,x,0\n");
    bad.path = dir.file("word.csv");
    CHECK_THROWS_WITH(open_csv(bad),
                      Contains("line 3, column 'b': 'x' is not a number") && !Contains("header"));
    // A header read as data, and a line ending in a delimiter: what to change.
    bad.header = false;
    CHECK_THROWS_WITH(open_csv(bad), Contains("line 1, column '0': 'a' is not a number; if the "
                                              "first line names the columns, set header: true"));
    write_text(dir.file("blank-first.csv"), "\n\na,b,c\n1,2,0\n");  // blank lines first
    bad.path = dir.file("blank-first.csv");
    CHECK_THROWS_WITH(open_csv(bad), Contains("line 3, column '0': 'a' is not a number; if the "
                                              "first line names the columns, set header: true"));
    bad.header = true;
    write_text(dir.file("trailing.csv"), "a,b,c,d\n1,2,0,\n");
    bad.path = dir.file("trailing.csv");
    CHECK_THROWS_WITH(open_csv(bad), Contains("line 2, column 'd': '' is not a number; the line "
                                              "ends with a delimiter"));
    // A long cell is quoted by its start and its length, not whole.
    const std::string cell(1'000'000, 'x');
    write_text(dir.file("long.csv"), "a,b,c\n1,2,0\n1," + cell + ",0\n");
    bad.path = dir.file("long.csv");
    try {
      open_csv(bad);
      FAIL("a cell of 1000000 bytes that is not a number was read");
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      CHECK(message.size() < 300);
      CHECK_THAT(message, Contains("line 3, column 'b': '" + std::string(60, 'x') +
                                   "...' (1000000 bytes) is not a number"));
    }
    write_text(dir.file("long.csv"), "a," + cell + "," + cell + "\n1,2,0\n");
    CHECK_THROWS_WITH(open_csv(bad), Contains("names column '" + std::string(60, 'x') +
                                              "...' (1000000 bytes) twice (columns 2 and 3)"));
    write_text(dir.file("label.csv"), "a,c\n1,0.5\n");
    bad.path = dir.file("label.csv");
    CHECK_THROWS_WITH(open_csv(bad), Contains("line 2: label '0.5' is not a whole number"));
    o.label = "colour";
    CHECK_THROWS_WITH(open_csv(o), Contains("no column 'colour'") && Contains("w, h, kind, z"));
    bad.path = dir.file("none.csv");
    CHECK_THROWS_WITH(open_csv(bad), Contains(dir.file("none.csv")));
  }

  SECTION(
      "quoted fields, a leading plus and numbers below float64's range read as Python reads them") {
    write_text(
        dir.file("q.csv"),
        "\"w,h\", \"say \"\"hi\"\"\" ,label\n\"1,5\" ,+2.5,1\n\" 3\",-1e-400,0\n4,1e-400,2\n");
    CsvOptions q;
    q.path = dir.file("q.csv");
    q.features = {"say \"hi\""};
    const auto d = open_csv(q);
    REQUIRE(d->size() == 3);
    CHECK(sample_of(*d, 0, &label) == std::vector<float>{2.5f});
    CHECK(label == 1);
    const std::vector<float> tiny = sample_of(*d, 1, &label);
    CHECK((tiny[0] == 0.0f && std::signbit(tiny[0])));
    CHECK(sample_of(*d, 2, &label) == std::vector<float>{0.0f});
    // The quoted "1,5" is one field, and not a number.
    q.features = {"w,h"};
    CHECK_THROWS_WITH(open_csv(q), Contains("line 2, column 'w,h': '1,5' is not a number"));
    write_text(dir.file("open.csv"), "a,b,label\n1,\"2,0\n");
    q.path = dir.file("open.csv");
    q.features = {};
    CHECK_THROWS_WITH(open_csv(q), Contains("line 2: the quote at column 3 is not closed on its "
                                            "line"));
    write_text(dir.file("after.csv"), "a,b,label\n1,\"2\"x,0\n");
    q.path = dir.file("after.csv");
    CHECK_THROWS_WITH(open_csv(q), Contains("line 2: text after the quoted field that ends at "
                                            "column 5"));
    // Spaces inside quotes around a number, as Python's float(" 1 ") reads them.
    write_text(dir.file("spaced.csv"), "a,b,label\n\" 1 \",\"\t2\",\" 0 \"\n");
    q.path = dir.file("spaced.csv");
    CHECK(sample_of(*open_csv(q), 0, &label) == std::vector<float>{1, 2});
    CHECK(label == 0);
    write_text(dir.file("huge.csv"), "a,b,label\n1,1e999,0\n");
    q.path = dir.file("huge.csv");
    CHECK_THROWS_WITH(open_csv(q), Contains("'1e999' is outside the float32 range"));
    // UTF-16 (Excel's "Unicode text"): named, not read as names with NULs.
    write_text(dir.file("utf16.csv"), std::string("\xFF\xFE"
                                                  "a\0,\0l\0\n\0"
                                                  "1\0,\0"
                                                  "0\0\n\0",
                                                  18));
    q.path = dir.file("utf16.csv");
    CHECK_THROWS_WITH(open_csv(q), Contains("is UTF-16 or UTF-32 text (its byte order mark, bytes "
                                            "0-1, is FF FE): save it as UTF-8"));
    write_text(dir.file("edge.csv"), "a,b,label\n3.4028235e38,-3.4028235e38,0\n");
    q.path = dir.file("edge.csv");
    CHECK(
        sample_of(*open_csv(q), 0, &label) ==
        std::vector<float>{std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()});
    write_text(dir.file("over.csv"), "a,b,label\n3.5e38,1,0\n");
    q.path = dir.file("over.csv");
    CHECK_THROWS_WITH(open_csv(q), Contains("'3.5e38' is outside the float32 range"));
  }

  SECTION("a header of numbers with fractions is a data row: an error about `header`") {
    write_text(dir.file("rows.csv"), "0.5,-1e-3,1\n2,3,0\n");
    CsvOptions rows;
    rows.path = dir.file("rows.csv");
    try {
      open_csv(rows);
      FAIL("a first row of numbers was read as the header");
    } catch (const SourceFieldError& e) {
      CHECK(e.field() == "header");
      CHECK_THAT(e.what(), Contains("line 1, read as the header (header: true), holds only "
                                    "numbers (0.5, -1e-3, 1): a data row? set header: false"));
    }
    rows.header = false;
    CHECK(open_csv(rows)->size() == 2);
    // A data row that repeats a value is still a data row, not two columns
    // of one name.
    write_text(dir.file("zeros.csv"), "0.0,0.0,0.0,0\n0.1,0.2,0.3,1\n");
    rows.path = dir.file("zeros.csv");
    rows.header = true;
    CHECK_THROWS_AS(open_csv(rows), SourceFieldError);
    CHECK_THROWS_WITH(open_csv(rows), Contains("a data row? set header: false"));
    write_text(dir.file("ints.csv"), "0,0,1\n2,3,0\n");
    rows.path = dir.file("ints.csv");
    CHECK_THROWS_WITH(open_csv(rows), Contains("names column '0' twice") &&
                                          Contains("if that line is a data row, set header: "
                                                   "false"));
    // Integer names are names: pandas writes a frame's default columns so.
    write_text(dir.file("pandas.csv"), "0,1,2\n0.5,1.5,1\n");
    CsvOptions pandas;
    pandas.path = dir.file("pandas.csv");
    CHECK(open_csv(pandas)->size() == 1);
  }

  SECTION(
      "a byte order mark, old Mac line ends and gzip are read; a folder is "
      "named") {
    write_text(dir.file("bom.csv"),
               "\xEF\xBB\xBF"
               "a,b,label\n1,2,0\n3,4,1\n");
    CsvOptions bom;
    bom.path = dir.file("bom.csv");
    bom.features = {"a", "b"};
    CHECK(sample_of(*open_csv(bom), 1, &label) == std::vector<float>{3, 4});
    write_text(dir.file("cr.csv"), "a,b,label\r1,2,0\r3,4,1\r");
    bom.path = dir.file("cr.csv");
    auto cr = open_csv(bom);
    CHECK(cr->size() == 2);
    CHECK(sample_of(*cr, 1, &label) == std::vector<float>{3, 4});
    CHECK(label == 1);
    const std::string text = "a,b,label\n1,2,0\n5,6,1\n";
    write_gzip(dir.file("z.csv.gz"), std::vector<std::uint8_t>(text.begin(), text.end()));
    bom.path = dir.file("z.csv.gz");
    CHECK(sample_of(*open_csv(bom), 1, &label) == std::vector<float>{5, 6});
    std::filesystem::create_directories(dir.file("folder.csv"));
    bom.path = dir.file("folder.csv");
    CHECK_THROWS_WITH(open_csv(bom), Contains("is a directory"));
  }

  SECTION("a column the file lacks is an error about the setting that names it") {
    auto field_of = [](const CsvOptions& options) {
      try {
        open_csv(options);
      } catch (const SourceFieldError& e) {
        return e.field();
      }
      return std::string("(no SourceFieldError)");
    };
    CsvOptions named;
    named.path = dir.file("a.csv");
    named.label = "colour";
    CHECK(field_of(named) == "label");
    named.label = "kind";
    named.features = {"w", "depth"};
    CHECK(field_of(named) == "features");
    named.features = {"w", "kind"};
    CHECK(field_of(named) == "features");
    // Regression targets have no classes to count.
    named.features.clear();
    named.regression = true;
    named.classes = 5;
    CHECK(field_of(named) == "classes");
  }

  SECTION(
      "a file read at the wrong delimiter is said to be one column, with "
      "the one to set") {
    write_text(dir.file("semi.csv"), "a;b;label\n1;2;0\n");
    CsvOptions semi;
    semi.path = dir.file("semi.csv");
    semi.label = "label";
    CHECK_THROWS_WITH(open_csv(semi), Contains("has no column 'label'; columns: a;b;label") &&
                                          Contains("set delimiter: ';'"));
    semi.label.clear();
    CHECK_THROWS_WITH(open_csv(semi),
                      Contains("has no feature columns") && Contains("set delimiter: ';'"));
    write_text(dir.file("tab.csv"), "a\tb\tlabel\n1\t2\t0\n");
    semi.path = dir.file("tab.csv");
    semi.label = "label";
    CHECK_THROWS_WITH(open_csv(semi), Contains("set delimiter: \"\\t\""));
    // Several columns: no guess.
    o.label = "colour";
    CHECK_THROWS_WITH(open_csv(o), !Contains("delimiter"));
  }
}

TEST_CASE(
    "image folders: PNG and JPEG, classes by folder, resize, unreadable "
    "image") {
  TempDir dir;
  // A 4x2 grey PNG gradient in class "cat", a uniform RGB JPEG in class "dog".
  std::filesystem::create_directories(dir.file("img/cat"));
  std::filesystem::create_directories(dir.file("img/dog"));
  write_bytes(dir.file("img/cat/a.png"), png_bytes(4, 2, 1, {0, 40, 80, 120, 160, 200, 240, 255}));
  write_bytes(dir.file("img/cat/b.png"), png_bytes(2, 2, 3, std::vector<std::uint8_t>(12, 90)));
  write_bytes(dir.file("img/dog/c.jpg"),
              jpeg_bytes(8, 8, std::vector<std::uint8_t>(8 * 8 * 3, 200), 100));
  write_text(dir.file("img/dog/notes.txt"), "not an image");

  auto grey = open_image_folder(dir.file("img"), 2, 4, 1);
  REQUIRE(grey->size() == 3);
  CHECK(grey->num_classes() == 2);
  std::int64_t label = -1;
  CHECK(sample_of(*grey, 0, &label) == std::vector<float>{0, 40, 80, 120, 160, 200, 240, 255});
  CHECK(label == 0);

  auto rgb = open_image_folder(dir.file("img"), 4, 4, 3);
  CHECK(rgb->sample_shape() == Shape{3, 4, 4});
  auto s = sample_of(*rgb, 1, &label);  // 2x2 uniform 90 upsampled
  for (float v : s) REQUIRE(v == 90.0f);
  s = sample_of(*rgb, 2, &label);  // uniform JPEG, 8x8 down to 4x4
  CHECK(label == 1);
  for (float v : s) REQUIRE(std::abs(v - 200.0f) <= 2.0f);

  // A colour JPEG read as grey is its decoded RGB by the 601 weights, as
  // PIL's convert("L") gives it, not the stored luma plane (which strongly
  // coloured stripes put up to 23 levels away).
  std::vector<std::uint8_t> stripes(16 * 16 * 3);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) {
      const std::uint8_t yellow[3] = {255, 255, 0}, blue[3] = {0, 0, 255},
                         magenta[3] = {255, 0, 255};
      const std::uint8_t* c = x % 3 == 0 ? magenta : y % 2 == 0 ? yellow : blue;
      std::copy(c, c + 3, stripes.begin() + (y * 16 + x) * 3);
    }
  std::filesystem::create_directories(dir.file("stripes/a"));
  write_bytes(dir.file("stripes/a/x.jpg"), jpeg_bytes(16, 16, stripes, 90));
  const auto colour = sample_of(*open_image_folder(dir.file("stripes"), 16, 16, 3), 0, &label);
  const auto luma = sample_of(*open_image_folder(dir.file("stripes"), 16, 16, 1), 0, &label);
  for (std::size_t i = 0; i < luma.size(); ++i) {
    const auto r = static_cast<std::uint32_t>(colour[i]);
    const auto g = static_cast<std::uint32_t>(colour[256 + i]);
    const auto b = static_cast<std::uint32_t>(colour[512 + i]);
    REQUIRE(luma[i] == static_cast<float>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16));
  }

  // Halving takes in every pixel (antialiased): output x 0 weighs input
  // columns 0, 1, 2 by 0.75, 0.75, 0.25 (centre 1, support 2), normalised;
  // the two rows count equally. PIL gives 108.5714 and 166.0714.
  auto half = open_image_folder(dir.file("img"), 1, 2, 1);
  s = sample_of(*half, 0, &label);
  CHECK(s[0] == Approx(((0 + 160) * 0.75 + (40 + 200) * 0.75 + (80 + 240) * 0.25) / 3.5));
  CHECK(s[1] == Approx(((40 + 200) * 0.25 + (80 + 240) * 0.75 + (120 + 255) * 0.75) / 3.5));

  write_text(dir.file("img/dog/d.png"), "garbage that is not a png");
  auto broken = open_image_folder(dir.file("img"), 4, 4, 3);
  CHECK_THROWS_WITH(sample_of(*broken, 3, &label),
                    Contains(dir.file("img/dog/d.png")) &&
                        Contains("a text file, not an image: copy or download it again"));
  // What the file holds instead, told by its first bytes.
  const auto decode_error = [&](const std::vector<std::uint8_t>& content) {
    write_bytes(dir.file("img/dog/d.png"), content);
    try {
      sample_of(*open_image_folder(dir.file("img"), 4, 4, 3), 3, &label);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto text_bytes = [](std::string_view text) {
    return std::vector<std::uint8_t>(text.begin(), text.end());
  };
  CHECK_THAT(decode_error({}),
             Contains("'" + dir.file("img/dog/d.png") + "': the file is empty (0 bytes)"));
  CHECK_THAT(decode_error(text_bytes("GIF89a\x01\x00")),
             Contains("a GIF image, not a PNG or JPEG one: only PNG and JPEG images are read; "
                      "convert it to PNG"));
  CHECK_THAT(decode_error(text_bytes("\n  <!DOCTYPE html><html><body>Not Found")),
             Contains("an HTML or XML text (a web page saved in the image's place?)"));
  CHECK_THAT(
      decode_error(text_bytes("\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<svg width=\"8\">")),
      Contains("an SVG (vector) image, not a PNG or JPEG one") && Contains("convert it to PNG"));
  CHECK_THAT(decode_error(text_bytes("caf\xC3\xA9 au lait, not an image\n")),
             Contains("a text file, not an image"));
  CHECK_THAT(decode_error(text_bytes(std::string("\0\0\0\x18"
                                                 "ftypmp42\0\0\0\0",
                                                 16))),
             Contains("an MP4, MOV or other ISO media file (a video?), not an image"));
  CHECK_THAT(decode_error(text_bytes(std::string("\0\0\0\x18"
                                                 "ftypheic\0\0\0\0",
                                                 16))),
             Contains("an HEIF or AVIF image, not a PNG or JPEG one"));
  CHECK_THAT(decode_error({0x00, 0x01, 0xFE, 0xFF, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60}),
             Contains("neither a PNG nor a JPEG file (its first bytes are 00 01 FE FF 10 20 30 "
                      "40)"));
  auto bytes = std::vector<std::uint8_t>{0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F'};
  write_bytes(dir.file("img/dog/d.png"), bytes);
  CHECK_THROWS_WITH(sample_of(*open_image_folder(dir.file("img"), 4, 4, 3), 3, &label),
                    Contains("cannot decode JPEG image '" + dir.file("img/dog/d.png")));
  CHECK_THROWS_WITH(open_image_folder(dir.file("nothing"), 4, 4, 3), Contains("does not exist"));
  std::filesystem::create_directory_symlink(dir.file("loop-b"), dir.file("loop-a"));
  std::filesystem::create_directory_symlink(dir.file("loop-a"), dir.file("loop-b"));
  CHECK_THROWS_WITH(open_image_folder(dir.file("loop-a"), 4, 4, 3),
                    Contains("image folder '" + dir.file("loop-a") +
                             "': Too many levels of symbolic links: a symbolic link on that path "
                             "leads back to itself"));
  std::filesystem::create_directories(dir.file("img/empty"));
  CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 4, 4, 3),
                    Contains("holds no .png, .jpg or .jpeg images"));
}

TEST_CASE(
    "image folders: images at any depth in torchvision's order, other "
    "formats refused") {
  TempDir dir;
  const auto grey_png = [](std::uint8_t value) { return png_bytes(1, 1, 1, {value}); };
  // Folders in path order ("cat/a-b" before "cat/a/deeper", as Python sorts
  // os.walk's roots), files by name within each.
  write_bytes(dir.file("img/cat/b.png"), grey_png(10));
  write_bytes(dir.file("img/cat/a/z.png"), grey_png(20));
  write_bytes(dir.file("img/cat/a/deeper/y.PNG"), grey_png(30));
  write_bytes(dir.file("img/cat/a-b/x.jpg"),
              jpeg_bytes(8, 8, std::vector<std::uint8_t>(192, 40), 100));
  write_text(dir.file("img/cat/a/notes.txt"), "ignored");
  write_bytes(dir.file("img/dog/only/here/n.png"),
              grey_png(50));  // nothing at the top
  std::filesystem::create_directory_symlink("..", dir.file("img/cat/a/deeper/up"));  // a cycle
  auto d = open_image_folder(dir.file("img"), 1, 1, 1);
  REQUIRE(d->size() == 5);
  std::vector<float> values;
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < d->size(); ++i) {
    std::int64_t label = -1;
    const auto s = sample_of(*d, i, &label);
    values.push_back(std::round(s[0]));
    labels.push_back(label);
  }
  CHECK(values == std::vector<float>{10, 20, 40, 30, 50});
  CHECK(labels == std::vector<std::int64_t>{0, 0, 0, 0, 1});

  // An image the decoder cannot read is an error naming it, not skipped.
  write_bytes(dir.file("img/dog/only/photo.BMP"), {'B', 'M', 0, 0});
  write_bytes(dir.file("img/dog/z.webp"), {'R', 'I', 'F', 'F'});
  CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 1, 1, 1),
                    Contains("image folder class '" + dir.file("img/dog") +
                             "' holds 2 image file(s) in a format this reader cannot decode, "
                             "the first '" +
                             dir.file("img/dog/only/photo.BMP") + "' (BMP)") &&
                        Contains("only PNG (.png) and JPEG (.jpg, .jpeg) images are read") &&
                        Contains("convert them to PNG or JPEG, or move them out"));
}

TEST_CASE(
    "image folders: a broken link to an image is an error, not a smaller "
    "dataset") {
  TempDir dir;
  write_bytes(dir.file("img/cat/a.png"), png_bytes(1, 1, 1, {10}));
  std::filesystem::create_symlink("/nonexistent/b.png", dir.file("img/cat/b.png"));
  CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 1, 1, 1),
                    Contains("image '" + dir.file("img/cat/b.png") +
                             "' is a broken symbolic link to '/nonexistent/b.png'"));
  // A broken link by another name is ignored, as other files are.
  std::filesystem::remove(dir.file("img/cat/b.png"));
  std::filesystem::create_symlink("/nonexistent/notes", dir.file("img/cat/notes.txt"));
  CHECK(open_image_folder(dir.file("img"), 1, 1, 1)->size() == 1);
}

TEST_CASE(
    "image folders: a folder link out of its class folder is an error, one to a folder "
    "elsewhere is followed") {
  TempDir dir;
  write_bytes(dir.file("img/cat/a.png"), png_bytes(1, 1, 1, {10}));
  write_bytes(dir.file("img/dog/b.png"), png_bytes(1, 1, 1, {20}));
  write_bytes(dir.file("shared/c.png"), png_bytes(1, 1, 1, {30}));
  std::filesystem::create_directory_symlink(dir.file("shared"), dir.file("img/dog/more"));
  CHECK(open_image_folder(dir.file("img"), 1, 1, 1)->size() == 3);
  // Up to the image folder: every class's images again, as "cat".
  std::filesystem::create_directory_symlink("..", dir.file("img/cat/up"));
  CHECK_THROWS_WITH(open_image_folder(dir.file("img"), 1, 1, 1),
                    Contains("folder link '" + dir.file("img/cat/up") + "' leads to '" +
                             dir.file("img") + "', which holds its class folder 'cat'") &&
                        Contains("would be labelled 'cat'; remove the link"));
  std::filesystem::remove(dir.file("img/cat/up"));
  // Across to another class: the dog's images as cats.
  std::filesystem::create_directory_symlink("../dog", dir.file("img/cat/dogs"));
  CHECK_THROWS_WITH(
      open_image_folder(dir.file("img"), 1, 1, 1),
      Contains("folder link '" + dir.file("img/cat/dogs") + "' leads to '" + dir.file("img/dog") +
               "', inside the image folder but outside its class folder 'cat'"));
}

TEST_CASE(
    "image folders: a class folder named in another encoding keeps its bytes escaped; a "
    "gzip-compressed file is no image") {
  TempDir dir;
  write_bytes(dir.file("img/caf\xE9/a.png"), png_bytes(1, 1, 1, {10}));     // Latin-1
  write_bytes(dir.file("img/th\xC3\xA9/b.png"), png_bytes(1, 1, 1, {20}));  // UTF-8
  const auto d = open_image_folder(dir.file("img"), 1, 1, 1);
  CHECK(d->class_names() == std::vector<std::string>{"caf\\xE9", "th\xC3\xA9"});
  // A folder named as the escaped name reads, would be the same class: refused.
  write_bytes(dir.file("img2/caf\xE9/a.png"), png_bytes(1, 1, 1, {10}));
  write_bytes(dir.file("img2/caf\\xE9/b.png"), png_bytes(1, 1, 1, {20}));
  CHECK_THROWS_WITH(open_image_folder(dir.file("img2"), 1, 1, 1),
                    Contains("give one class name, 'caf\\xE9', once bytes that are not UTF-8 "
                             "are written as \\xNN: rename one"));
  // A PNG inside gzip is refused as PIL refuses it, not decompressed.
  write_gzip(dir.file("img/th\xC3\xA9/c.png"), png_bytes(1, 1, 1, {30}));
  std::int64_t label = -1;
  CHECK_THROWS_WITH(sample_of(*open_image_folder(dir.file("img"), 1, 1, 1), 2, &label),
                    Contains("a gzip-compressed file, not a PNG or JPEG one: decompress it"));
}

TEST_CASE(
    "the resize is PIL's bilinear: every pixel counts when shrinking, "
    "plain when enlarging") {
  // A 16x16 grey image, pixel (y, x) = (37 x + 11 y + 5 x y) % 256.
  Image image;
  image.height = image.width = 16;
  image.channels = 1;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      image.pixels.push_back(static_cast<std::uint8_t>((x * 37 + y * 11 + x * y * 5) % 256));
  const auto resized = [&](std::int64_t height, std::int64_t width) {
    std::vector<float> out(static_cast<std::size_t>(height * width));
    resize_to_chw(image, height, width, out.data());
    return out;
  };
  const auto check_close = [](const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output pixel " << i);
      CHECK(got[i] == Approx(want[i]).margin(1e-3));
    }
  };
  // The expected values are PIL 9.4's, from the same image in mode "F"
  // (float32, so nothing is rounded to bytes): Image.new("F", (16, 16)),
  // putdata(the values above, row by row), resize((width, height),
  // Image.BILINEAR), getdata(), printed to 4 decimals.
  check_close(resized(4, 4), {99.6288f, 118.6607f, 129.0893f, 120.7742f,   //
                              124.5893f, 131.7500f, 131.5000f, 137.0536f,  //
                              128.1607f, 137.2500f, 131.0000f, 135.1964f,  //
                              131.8967f, 133.8393f, 128.2679f, 122.2513f});
  // Shrinking one axis (by 3.2) while enlarging the other (by 1.5): rows 0
  // and 4.
  const auto mixed = resized(5, 24);
  check_close(
      std::vector<float>(mixed.begin(), mixed.begin() + 24),
      {15.4725f,  37.4890f,  66.8443f, 96.1996f,  125.5549f, 153.5037f, 177.2326f, 154.5440f,
       118.7271f, 89.9432f,  75.2253f, 75.0421f,  104.3974f, 129.5330f, 148.5733f, 153.5476f,
       144.4560f, 126.9249f, 98.1410f, 108.7418f, 124.0311f, 114.0018f, 115.2253f, 118.9560f});
  check_close(
      std::vector<float>(mixed.end() - 24, mixed.end()),
      {149.5275f, 128.8681f, 107.4176f, 104.2527f, 155.9451f, 184.6630f, 89.6007f,  114.0989f,
       155.4762f, 127.9304f, 122.8901f, 130.9780f, 155.9451f, 138.7143f, 115.3883f, 115.9744f,
       125.0000f, 134.4945f, 136.9560f, 112.6923f, 94.5238f,  121.3663f, 132.7363f, 137.3956f});

  // The same 4x4 from the definition: output (i, j) weighs input row and
  // column k by max(0, 1 - |k + 0.5 - (4 i + 2)| / 4), normalised; rows and
  // columns separable, so each output is a weighted mean over 7 x 7 inputs.
  std::vector<float> by_definition;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      double sum = 0, total = 0;
      for (int y = 0; y < 16; ++y) {
        for (int x = 0; x < 16; ++x) {
          const double wy = std::max(0.0, 1 - std::abs(y + 0.5 - (4 * i + 2)) / 4);
          const double wx = std::max(0.0, 1 - std::abs(x + 0.5 - (4 * j + 2)) / 4);
          sum += wy * wx * image.pixels[static_cast<std::size_t>(y * 16 + x)];
          total += wy * wx;
        }
      }
      by_definition.push_back(static_cast<float>(sum / total));
    }
  }
  check_close(resized(4, 4), by_definition);

  // Enlarging stays plain bilinear: 16 -> 32 puts output 1 (centre 0.75) at
  // 3/4 of input 0 and 1/4 of input 1, and output 0 at the clamped edge.
  const auto wide = resized(16, 32);
  CHECK(wide[0] == Approx(image.pixels[0]));
  CHECK(wide[1] == Approx(0.75 * image.pixels[0] + 0.25 * image.pixels[1]));
  CHECK(wide[2] == Approx(0.25 * image.pixels[0] + 0.75 * image.pixels[1]));
}

TEST_CASE(
    "PNG samples are read as stored: 16 bits, gamma, alpha and grey as "
    "PIL reads them") {
  TempDir dir;
  auto first_pixel = [&](const std::vector<std::uint8_t>& png, std::int64_t channels) {
    std::filesystem::remove_all(dir.file("img"));
    std::filesystem::create_directories(dir.file("img/c"));
    write_bytes(dir.file("img/c/a.png"), png);
    std::int64_t label = -1;
    auto s = sample_of(*open_image_folder(dir.file("img"), 2, 2, channels), 0, &label);
    return channels == 1 ? std::vector<float>{s[0]} : std::vector<float>{s[0], s[4], s[8]};
  };
  auto repeat = [](std::vector<std::uint8_t> pixel, int count) {
    std::vector<std::uint8_t> rows;
    for (int i = 0; i < count; ++i) rows.insert(rows.end(), pixel.begin(), pixel.end());
    return rows;
  };
  // 16-bit RGB 200, 100, 50 (x 257): the high bytes, not a linear-light
  // conversion.
  const auto rgb16 =
      png_stored_bytes(2, 2, PNG_COLOR_TYPE_RGB, 16, repeat({200, 200, 100, 100, 50, 50}, 4));
  CHECK(first_pixel(rgb16, 3) == std::vector<float>{200, 100, 50});
  // A gAMA chunk (here: linear) changes nothing.
  const auto grey_gamma = png_stored_bytes(2, 2, PNG_COLOR_TYPE_GRAY, 8, repeat({100}, 4), 1.0);
  CHECK(first_pixel(grey_gamma, 1) == std::vector<float>{100});
  CHECK(first_pixel(grey_gamma, 3) == std::vector<float>{100, 100, 100});
  // Alpha is dropped, not composited onto black.
  const auto rgba =
      png_stored_bytes(2, 2, PNG_COLOR_TYPE_RGB_ALPHA, 8, repeat({200, 100, 50, 0}, 4));
  CHECK(first_pixel(rgba, 3) == std::vector<float>{200, 100, 50});
  const auto grey_alpha =
      png_stored_bytes(2, 2, PNG_COLOR_TYPE_GRAY_ALPHA, 8, repeat({100, 128}, 4));
  CHECK(first_pixel(grey_alpha, 1) == std::vector<float>{100});
  // Colour to grey: ITU-R 601 weights on the stored values (PIL's convert("L"):
  // 0.299 R + 0.587 G + 0.114 B = 124.2, rounded to 124), the same as a JPEG of
  // that colour read as grey.
  const auto rgb8 = png_stored_bytes(2, 2, PNG_COLOR_TYPE_RGB, 8, repeat({200, 100, 50}, 4));
  CHECK(first_pixel(rgb8, 1) == std::vector<float>{124});
  const auto jpeg = first_pixel(jpeg_bytes(8, 8, repeat({200, 100, 50}, 64), 100), 1);
  CHECK(std::abs(jpeg[0] - 124.0f) <= 1.0f);

  // Interlaced (Adam7) and plain give the same samples.
  std::vector<std::uint8_t> gradient(7 * 5 * 3);
  for (std::size_t i = 0; i < gradient.size(); ++i) gradient[i] = static_cast<std::uint8_t>(i * 2);
  auto whole = [&](const std::vector<std::uint8_t>& png) {
    write_bytes(dir.file("img/c/a.png"), png);
    std::int64_t label = -1;
    return sample_of(*open_image_folder(dir.file("img"), 5, 7, 3), 0, &label);
  };
  const auto plain = whole(png_stored_bytes(7, 5, PNG_COLOR_TYPE_RGB, 8, gradient));
  CHECK(plain[1] == 6.0f);  // the second pixel's red sample
  CHECK(whole(png_stored_bytes(7, 5, PNG_COLOR_TYPE_RGB, 8, gradient, 0, true)) == plain);
}

TEST_CASE(
    "an evaluation image folder's labels follow the training folder's "
    "class names") {
  TempDir dir;
  for (const char* path : {"train/ant", "train/bee", "train/cat", "eval/ant", "eval/cat"}) {
    std::filesystem::create_directories(dir.file(path));
    write_bytes(dir.file(std::string(path) + "/x.png"), png_bytes(1, 1, 1, {7}));
  }
  const auto train = open_image_folder(dir.file("train"), 1, 1, 1);
  const auto eval = open_image_folder(dir.file("eval"), 1, 1, 1);
  CHECK(train->class_names() == std::vector<std::string>{"ant", "bee", "cat"});
  std::int64_t label = -1;
  sample_of(*eval, 1, &label);
  CHECK(label == 1);  // 'cat' is the eval folder's second class
  const auto matched = relabel_by_class_names(eval, train->class_names());
  CHECK(matched->num_classes() == 3);
  CHECK(matched->max_label() == 2);
  CHECK(sample_of(*matched, 1, &label) == std::vector<float>{7});
  CHECK(label == 2);  // and the training folder's third
  sample_of(*matched, 0, &label);
  CHECK(label == 0);

  std::filesystem::create_directories(dir.file("eval/dog"));
  write_bytes(dir.file("eval/dog/x.png"), png_bytes(1, 1, 1, {7}));
  CHECK_THROWS_WITH(
      relabel_by_class_names(open_image_folder(dir.file("eval"), 1, 1, 1), train->class_names()),
      Contains("class(es) 'dog' that the training set does not have") &&
          Contains("'ant', 'bee', 'cat'"));
}

TEST_CASE(
    "CSV labels written as class names are numbered in sorted order, named, and matched by "
    "name in an evaluation file") {
  TempDir dir;
  write_text(dir.file("train.csv"), "a,b,y\n1,2,dog\n3,4,cat\n5,6, dog\n7,8,\"emu\"\n");
  CsvOptions o;
  o.path = dir.file("train.csv");
  const auto train = open_csv(o);
  CHECK(train->class_names() == std::vector<std::string>{"cat", "dog", "emu"});
  CHECK(train->class_names_key() == "label");
  CHECK(train->num_classes() == 3);
  CHECK_FALSE(train->classes_inferred());
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    std::int64_t label = -1;
    sample_of(*train, i, &label);
    labels.push_back(label);
  }
  CHECK(labels == std::vector<std::int64_t>{1, 0, 1, 2});
  CHECK(train->max_label_origin() == "line 5 of CSV file '" + dir.file("train.csv") + "'");

  // An evaluation file naming fewer classes: its labels follow the training
  // file's names.
  write_text(dir.file("eval.csv"), "a,b,y\n1,2,emu\n3,4,dog\n");
  CsvOptions e = o;
  e.path = dir.file("eval.csv");
  const auto eval = open_csv(e);
  CHECK(eval->class_names() == std::vector<std::string>{"dog", "emu"});
  const auto matched = relabel_by_class_names(eval, train->class_names());
  std::int64_t label = -1;
  sample_of(*matched, 0, &label);
  CHECK(label == 2);
  sample_of(*matched, 1, &label);
  CHECK(label == 1);
  write_text(dir.file("eval.csv"), "a,b,y\n1,2,cow\n");
  try {
    relabel_by_class_names(open_csv(e), train->class_names());
    FAIL("an evaluation class the training file lacks was accepted");
  } catch (const SourceFieldError& error) {
    CHECK(error.field() == "label");
    CHECK_THAT(error.what(), Contains("class(es) 'cow' that the training set does not have") &&
                                 Contains("'cat', 'dog', 'emu'"));
  }

  // A renamed class is other data (a resume tells), though the numbers are the same.
  write_text(dir.file("renamed.csv"), "a,b,y\n1,2,dug\n3,4,cat\n5,6, dug\n7,8,\"emu\"\n");
  CsvOptions renamed = o;
  renamed.path = dir.file("renamed.csv");
  CHECK(open_csv(renamed)->content_digest() != train->content_digest());

  SECTION("labels are all numbers or all names") {
    write_text(dir.file("mixed.csv"), "a,y\n1,dog\n2,cat\n3,1\n");
    o.path = dir.file("mixed.csv");
    CHECK_THROWS_WITH(open_csv(o), Contains("line 4: label '1' is a number, but line 2's label "
                                            "'dog' is a name: write the labels all as class "
                                            "numbers (0, 1, ...) or all as class names"));
    write_text(dir.file("mixed.csv"), "a,y\n1,0\n2,cat\n");
    CHECK_THROWS_WITH(open_csv(o), Contains("line 3: label 'cat' is a name, but line 2's label "
                                            "'0' is a number"));
    write_text(dir.file("mixed.csv"), "a,y\n1,dog\n2,\n");
    CHECK_THROWS_WITH(open_csv(o), Contains("line 3: the label is empty"));
    // Among numbers, pandas' word for a missing value is that; among names,
    // it may be a class ("None" of a finding).
    for (const char* rows : {"1,0\n2,None\n", "1,NA\n2,1\n"}) {
      INFO(rows);
      write_text(dir.file("mixed.csv"), std::string("a,y\n") + rows);
      CHECK_THROWS_WITH(open_csv(o), Contains("marks a missing value (as pandas reads it): give "
                                              "th") &&
                                         Contains("class, or drop the row"));
    }
    write_text(dir.file("mixed.csv"), "a,y\n1,Severe\n2,None\n3,NA\n");
    CHECK(open_csv(o)->class_names() == std::vector<std::string>{"NA", "None", "Severe"});
  }
  SECTION("classes, when given, counts the names") {
    o.classes = 4;
    try {
      open_csv(o);
      FAIL("classes: 4 was accepted for 3 named classes");
    } catch (const SourceFieldError& error) {
      CHECK(error.field() == "classes");
      CHECK_THAT(error.what(), Contains("names 3 classes in its labels ('cat', 'dog', 'emu'), "
                                        "not 4"));
    }
    o.classes = 3;
    CHECK(open_csv(o)->num_classes() == 3);
  }
  SECTION("without a header, a header line is not taken for a class of one sample") {
    write_text(dir.file("headed.csv"), "0,1,y\n1,2,dog\n3,4,dog\n");
    o.path = dir.file("headed.csv");
    o.header = false;
    CHECK_THROWS_WITH(open_csv(o), Contains("line 1's label 'y' is a class name no other line "
                                            "has, and its features are their column numbers") &&
                                       Contains("set header: true"));
    o.header = true;
    CHECK(open_csv(o)->class_names() == std::vector<std::string>{"dog"});
    // A first sample of a class of its own is a sample like the others.
    write_text(dir.file("rare.csv"), "5,6,bird\n1,2,dog\n3,4,dog\n");
    o.path = dir.file("rare.csv");
    o.header = false;
    CHECK(open_csv(o)->class_names() == std::vector<std::string>{"bird", "dog"});
  }
  SECTION("bytes of a name that are not UTF-8 are kept as \\xNN") {
    write_text(dir.file("latin1.csv"), "a,y\n1,caf\xE9\n2,cat\n3,x\n4,\\xFF\n5,\xFF\n");
    o.path = dir.file("latin1.csv");
    // As written, a byte that is not UTF-8 and its \xNN are one name, sorted as written.
    CHECK(open_csv(o)->class_names() == std::vector<std::string>{"\\xFF", "caf\\xE9", "cat", "x"});
  }
}

TEST_CASE("a data file of another format than its source reads names the source that reads it") {
  TempDir dir;
  const float values[4] = {1, 2, 3, 4};
  write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(2, 2)", values, sizeof values));
  write_bytes(dir.file("images.idx"), idx_bytes({1, 2, 2}, {1, 2, 3, 4}));
  write_bytes(dir.file("labels.idx"), idx_bytes({1}, {0}));
  write_bytes(dir.file("image.png"), png_bytes(1, 1, 1, {7}));
  write_text(dir.file("table.csv"), "a,b,label\n1,2,0\n");
  write_text(dir.file("sheet.xlsx"), std::string("PK\x03\x04", 4) + std::string(40, '\0'));

  CsvOptions csv;
  csv.path = dir.file("x.npy");
  CHECK_THROWS_WITH(open_csv(csv), Contains("CSV file '" + dir.file("x.npy") +
                                            "' is an NPY array, not CSV text: read it with a "
                                            "source of type: npy (x: ..., y: ...)"));
  csv.path = dir.file("images.idx");
  CHECK_THROWS_WITH(open_csv(csv), Contains("is an IDX file, not CSV text: read it with a source "
                                            "of type: idx (images: ..., labels: ...)"));
  csv.path = dir.file("image.png");
  CHECK_THROWS_WITH(open_csv(csv), Contains("is a PNG image, not CSV text: read images with a "
                                            "source of type: image_folder"));
  csv.path = dir.file("sheet.xlsx");
  CHECK_THROWS_WITH(open_csv(csv), Contains("is a zip archive (numpy.savez's .npz, or an Excel "
                                            ".xlsx?), not CSV text: save each array with "
                                            "numpy.save (type: npy), or the table as CSV text"));

  CHECK_THROWS_WITH(open_npy(dir.file("table.csv"), dir.file("x.npy")),
                    Contains("not a .npy file (the magic \\x93NUMPY is missing at byte 0) (it is "
                             "text: read it with a source of type: csv (path: ...))"));
  CHECK_THROWS_WITH(open_npy(dir.file("images.idx"), dir.file("x.npy")),
                    Contains("(it is an IDX file: read it with a source of type: idx"));
  CHECK_THROWS_WITH(open_idx(dir.file("x.npy"), dir.file("labels.idx")),
                    Contains("is not an IDX file: magic number 0x934E554D at byte 0") &&
                        Contains("(it is an NPY array: read it with a source of type: npy"));
  CHECK_THROWS_WITH(open_idx(dir.file("images.idx"), dir.file("table.csv")),
                    Contains("(it is text: read it with a source of type: csv"));
  // Files of the reader's own format, and bytes of none, get no such note.
  CHECK(open_csv({dir.file("table.csv")})->size() == 1);
  write_bytes(dir.file("noise.bin"), std::vector<std::uint8_t>{0x01, 0x02, 0xFE, 0x00, 0x07});
  CHECK_THROWS_WITH(open_npy(dir.file("noise.bin"), dir.file("x.npy")), !Contains("(it is"));
}

TEST_CASE("synthetic data is a pure function of (seed, index)") {
  auto a = make_synthetic({2, 3}, 4, 50, 7);
  auto b = make_synthetic({2, 3}, 4, 50, 7);
  auto c = make_synthetic({2, 3}, 4, 50, 8);
  std::int64_t la, lb, lc;
  std::set<std::int64_t> labels;
  for (std::int64_t i = 0; i < 50; ++i) {
    auto sa = sample_of(*a, i, &la);
    CHECK(sa == sample_of(*b, i, &lb));
    CHECK(la == lb);
    labels.insert(la);
    for (float v : sa) REQUIRE((v >= 0.0f && v < 1.0f));
  }
  CHECK(labels.size() == 4);
  CHECK(sample_of(*a, 3, &la) != sample_of(*c, 3, &lc));
  Attrs attrs;
  attrs.set("shape", std::vector<std::int64_t>{1, 8, 8});
  attrs.set("classes", std::int64_t{3});
  attrs.set("size", std::int64_t{10});
  auto d = open_source("synthetic", attrs);
  CHECK(d->size() == 10);
  CHECK(d->sample_shape() == Shape{1, 8, 8});
  CHECK(d->max_label() == 2);
}

TEST_CASE("split_dataset is seeded, deterministic, disjoint and complete") {
  auto d = make_synthetic({1}, 3, 100, 1);
  auto [train, eval] = split_dataset(d, 0.1, 5);
  CHECK(train->size() == 90);
  CHECK(eval->size() == 10);
  const auto& ti = static_cast<const SubsetDataset&>(*train).indices();
  const auto& ei = static_cast<const SubsetDataset&>(*eval).indices();
  std::set<std::int64_t> all(ti.begin(), ti.end());
  all.insert(ei.begin(), ei.end());
  CHECK(all.size() == 100);
  auto [train2, eval2] = split_dataset(d, 0.1, 5);
  CHECK(static_cast<const SubsetDataset&>(*eval2).indices() == ei);
  auto [train3, eval3] = split_dataset(d, 0.1, 6);
  CHECK(static_cast<const SubsetDataset&>(*eval3).indices() != ei);
  std::int64_t l1, l2;
  CHECK(sample_of(*eval, 3, &l1) == sample_of(*d, ei[3], &l2));
  CHECK(l1 == l2);
  CHECK_THROWS_WITH(split_dataset(d, 1.5, 0), Contains("fraction must be in (0, 1)"));
  CHECK_THROWS_WITH(split_dataset(d, 0.001, 0), Contains("empty train or eval"));
}

TEST_CASE(
    "sources say whether classes were inferred and where the largest "
    "label is") {
  TempDir dir;
  SECTION("CSV: the line") {
    write_text(dir.file("a.csv"), "a,y\n1,0\n\n2,99999999999\n3,1\n");
    CsvOptions o{dir.file("a.csv")};
    const auto d = open_csv(o);
    CHECK(d->classes_inferred());
    CHECK(d->num_classes() == 100000000000);
    CHECK(d->max_label_origin() == "line 4 of CSV file '" + dir.file("a.csv") + "'");
    o.classes = 100000000000;
    CHECK_FALSE(open_csv(o)->classes_inferred());
  }
  SECTION("NPY: the element and its byte offset") {
    const float x[8] = {};
    const std::int64_t y[4] = {0, 1, std::int64_t{1} << 40, 1};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(4, 2)", x, sizeof x));
    const auto y_bytes = npy_bytes("<i8", "(4,)", y, sizeof y);
    write_bytes(dir.file("y.npy"), y_bytes);
    const auto d = open_npy(dir.file("x.npy"), dir.file("y.npy"));
    CHECK(d->classes_inferred());
    CHECK(d->max_label_origin() == "element 2 of NPY file '" + dir.file("y.npy") +
                                       "' (byte offset " + std::to_string(y_bytes.size() - 16) +
                                       ")");
    // A split's parts name the file's largest label, which sets their classes.
    const auto [train, eval] = split_dataset(d, 0.5, 1);
    CHECK(train->classes_inferred());
    CHECK(train->max_label_origin() == d->max_label_origin());
    CHECK(train->max_label() == d->max_label());
  }
  SECTION("NPY: a label of INT64_MAX has no class count above it") {
    const float x[4] = {};
    const std::int64_t y[2] = {0, std::numeric_limits<std::int64_t>::max()};
    write_bytes(dir.file("x.npy"), npy_bytes("<f4", "(2, 2)", x, sizeof x));
    write_bytes(dir.file("y.npy"), npy_bytes("<i8", "(2,)", y, sizeof y));
    const auto d = open_npy(dir.file("x.npy"), dir.file("y.npy"));
    CHECK(d->classes_inferred());
    CHECK(d->max_label() == std::numeric_limits<std::int64_t>::max());
    // Not max_label + 1, which overflows to a negative count (regression data).
    CHECK(d->num_classes() == std::numeric_limits<std::int64_t>::max());
    CHECK(d->target_shape().empty());
  }
  SECTION("IDX: the sample and its byte offset") {
    write_bytes(dir.file("i.idx"), idx_bytes({3, 1, 2}, {1, 2, 3, 4, 5, 6}));
    write_bytes(dir.file("l.idx"), idx_bytes({3}, {0, 200, 1}));
    const auto d = open_idx(dir.file("i.idx"), dir.file("l.idx"));
    CHECK(d->max_label_origin() ==
          "sample 1 of IDX labels '" + dir.file("l.idx") + "' (byte offset 9)");
    CHECK_FALSE(open_idx(dir.file("i.idx"), dir.file("l.idx"), 201)->classes_inferred());
  }
}
