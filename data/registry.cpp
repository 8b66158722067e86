// The table of data sources and transforms: their YAML fields, docs and the
// functions that open them. Paths listed in `path_fields` are resolved
// relative to the config file by the config layer before `open` is called.
#include "data/registry.h"

#include <filesystem>
#include <new>
#include <stdexcept>

#include "data/attr_values.h"
#include "data/quote.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

using FT = FieldType;

FieldSpec classes_field() {
  return field("classes", FT::integer,
               "Number of classes; 0 infers it as the largest label + 1. Labels outside "
               "[0, classes) are an error, except -100 in NPY and CSV labels: a sample in no "
               "class, which the loss's ignore_index (default -100) leaves out (a set whose "
               "every label is -100 is an error: nothing in it could train or be scored).")
      .def("0")
      .at_least(0);
}

SourceDef idx_source() {
  SourceDef d;
  d.name = "idx";
  d.doc =
      "IDX files (MNIST, Fashion-MNIST), raw or .gz: an unsigned-byte image file and a "
      "label file. Samples are [1, H, W] with raw values 0..255 (add a `scale` transform).";
  d.fields = {
      field("images", FT::string, "Path of the images file (idx3-ubyte, optionally .gz).").req(),
      field("labels", FT::string, "Path of the labels file (idx1-ubyte, optionally .gz).").req(),
      classes_field()};
  d.path_fields = {"images", "labels"};
  d.open = [](const Attrs& a) {
    return open_idx(required_string(a, "images", "idx source"),
                    required_string(a, "labels", "idx source"), int_or(a, "classes", 0));
  };
  return d;
}

SourceDef cifar_source() {
  SourceDef d;
  d.name = "cifar";
  d.doc =
      "CIFAR-10 or CIFAR-100 binary batches (data_batch_1.bin ...). Samples are "
      "[3, 32, 32] with raw values 0..255.";
  d.fields = {field("files", FT::string_list, "The batch files, in order.").req(),
              field("variant", FT::enumeration, "Which dataset the files hold.")
                  .def("cifar10")
                  .one_of({"cifar10", "cifar100"}),
              field("label", FT::enumeration,
                    "CIFAR-100 only (CIFAR-10 has no coarse labels): fine (100) or coarse (20) "
                    "labels.")
                  .def("fine")
                  .one_of({"fine", "coarse"})
                  .refused_unless("variant", {"cifar100"})};
  d.path_fields = {"files"};
  d.open = [](const Attrs& a) {
    const auto files = strings_or(a, "files", {});
    const auto variant = string_or(a, "variant", "cifar10") == "cifar100" ? CifarVariant::cifar100
                                                                          : CifarVariant::cifar10;
    return open_cifar(files, variant, string_or(a, "label", "fine") == "fine");
  };
  return d;
}

SourceDef npy_source() {
  SourceDef d;
  d.name = "npy";
  d.doc =
      "A pair of NumPy .npy files: x [N, ...] (uint8, float32/64, int32/64) and y [N] "
      "integer classes or y [N, ...] float targets (regression). Each x[i] is one sample as "
      "stored: images must be channels first, [N, C, H, W], as the image transforms read "
      "samples as [C, H, W]; tabular data is [N, features]. One-channel images saved as "
      "[N, H, W] give [H, W] samples, which the transforms read but a conv2d does not: save "
      "x[:, None] or start the model with a reshape layer (shape: [1, H, W]). "
      "Transpose a channels-last [N, H, W, C] array before saving it: x.transpose(0, 3, 1, 2) "
      "(samples [H, W, 3] or [H, W, 4] that a conv2d or pooling layer reads get a warning). "
      "Arrays are read in C order: one np.save wrote in Fortran order (a transposed 2-D array, "
      "x.T) is refused; save np.ascontiguousarray(x) instead.";
  d.fields = {field("x", FT::string, "Path of the samples array.").req(),
              field("y", FT::string, "Path of the labels or targets array.").req(),
              classes_field()};
  d.path_fields = {"x", "y"};
  d.open = [](const Attrs& a) {
    return open_npy(required_string(a, "x", "npy source"), required_string(a, "y", "npy source"),
                    int_or(a, "classes", 0));
  };
  return d;
}

SourceDef csv_source() {
  SourceDef d;
  d.name = "csv";
  d.doc =
      "A CSV file of numeric feature columns and one label column. Samples are [F]. Fields "
      "may be double-quoted (RFC 4180: a delimiter or \"\" inside), numbers read as Python "
      "reads them (a leading +, 1e-400 as 0); a field's quotes must close on its line. A "
      "header of numbers only, some with a fraction (a data row read as names), is an error, "
      "and so is a column the header leaves without a name (pandas' index, the row numbers) "
      "unless `features` leaves it out. Features are read in the file's order (or "
      "`features`'), not by name: an evaluation file whose header has one of the training "
      "file's features in another column is refused, with the `features` list that reads it "
      "in the training's order. Class labels are numbers (0, 1, ...) or names (\"cat\", "
      "\"dog\"), decided by the first row: names are numbered in sorted order (as image "
      "folders' and scikit-learn's LabelEncoder), recorded in the run's manifest, and an "
      "evaluation file of names is matched to the training file's by name (it may lack some; "
      "one the training file lacks is an error); a resume and `trainer eval` number them as the "
      "run's manifest recorded them. Among class numbers, pandas' words for a missing value "
      "(NA, N/A, NULL, None, ...) are an error; among names they are classes.";
  d.fields = {
      field("path", FT::string, "Path of the CSV file.").req(),
      field("label", FT::string,
            "Label column: a name (with a header) or a 0-based index (without); empty: the last. "
            "Its values are class numbers or class names (or float targets, with regression).")
          .def("\"\"")
          .or_integers(),
      field("features", FT::string_list,
            "Feature columns: names (with a header) or 0-based indices (without); empty: all but "
            "the label.")
          .def("[]")
          .or_integers(),
      field("header", FT::boolean, "The first row names the columns.").def("true"),
      field("delimiter", FT::string, "The field separator (one character).").def("\",\""),
      field("regression", FT::boolean, "The label is a float target, not a class.").def("false"),
      classes_field().refused_unless("regression", {"false"})};
  d.path_fields = {"path"};
  d.open = [](const Attrs& a) {
    CsvOptions o;
    o.path = required_string(a, "path", "csv source");
    o.label = string_or(a, "label", "");
    o.features = strings_or(a, "features", {});
    o.header = bool_or(a, "header", true);
    const std::string delimiter = string_or(a, "delimiter", ",");
    // `\t` unquoted or in single quotes is a backslash and a 't': YAML reads
    // escapes in double quotes only.
    if (delimiter == "\\t")
      throw SourceFieldError("delimiter",
                             "delimiter must be one character, got '\\t': a backslash and 't', "
                             "as YAML reads an escape in double quotes only; write a tab as "
                             "delimiter: \"\\t\" (on the command line in single quotes around the "
                             "whole override: '...delimiter=\"\\t\"')");
    if (delimiter.size() != 1)
      throw SourceFieldError("delimiter",
                             "delimiter must be one character, got " + quote(delimiter));
    if (delimiter == "\"" || delimiter == "\n" || delimiter == "\r")
      throw SourceFieldError("delimiter",
                             "delimiter " + quote(delimiter) + " cannot separate fields: it " +
                                 (delimiter == "\"" ? "encloses quoted fields" : "ends a line") +
                                 "; use the character between the file's values "
                                 "(',', ';', a tab)");
    o.delimiter = delimiter[0];
    o.regression = bool_or(a, "regression", false);
    o.classes = int_or(a, "classes", 0);
    return open_csv(o);
  };
  return d;
}

SourceDef image_folder_source() {
  SourceDef d;
  d.name = "image_folder";
  d.doc =
      "A folder with one sub-folder per class (sorted names give labels 0, 1, ...) of "
      "PNG/JPEG images (.png, .jpg, .jpeg), found at any depth below the class folder (in "
      "torchvision's ImageFolder order: folders by path, files by name), decoded on the loader "
      "threads and resized to `size` (bilinear, antialiased when shrinking, as PIL's, but kept in "
      "floats where PIL rounds each pass to 8 bits: within 1 grey level of it). Other "
      "files are ignored, but images in a format the reader cannot decode (.bmp, .gif, .webp, "
      ".tif, .ppm, ...) are an error: convert them to PNG or JPEG, or move them out. "
      "Samples are the stored values as PIL's convert(\"RGB\") or convert(\"L\") gives them: "
      "alpha is dropped, colour profiles and gamma are not applied, and colour (a colour JPEG "
      "too) becomes grey by the ITU-R 601 weights. 16-bit PNGs give their high byte: PIL does "
      "so for colour, but reads 16-bit grey as integers that convert(\"L\") clips at 255, so "
      "a 16-bit grey image holding only values under 256 is black here: save it as 8-bit. An "
      "evaluation folder's classes are matched to the training "
      "folder's by name (it may lack some; one the training folder lacks is an error). Links "
      "to folders are followed, but one inside a class folder that leads into another class's "
      "folder, or up to a folder that holds its own, is an error (those images would take "
      "this class's label). A class folder named in another encoding than UTF-8 keeps the "
      "bytes that are not UTF-8 as \\xNN in its class name.";
  d.fields = {
      field("root", FT::string, "The folder holding the class sub-folders.").req(),
      field("size", FT::int_list, "Output [height, width] (or one value for both).")
          .req()
          .at_least(1)
          .items(1, 2),
      field("channels", FT::integer, "1 (grey) or 3 (RGB).").def("3").at_least(1).at_most(3)};
  d.path_fields = {"root"};
  d.open = [](const Attrs& a) {
    const auto size = ints_or(a, "size", {});
    if (size.empty() || size.size() > 2) {
      throw SourceFieldError("size", "size must be [height, width] or one value for both");
    }
    return open_image_folder(required_string(a, "root", "image_folder source"), size[0],
                             size.back(), int_or(a, "channels", 3));
  };
  return d;
}

SourceDef synthetic_source() {
  SourceDef d;
  d.name = "synthetic";
  d.doc =
      "Random samples uniform in [0, 1) with uniform random labels, a pure function of "
      "(seed, index); for benchmarks and tests.";
  d.fields = {
      field("shape", FT::int_list, "Shape of one sample, e.g. [1, 28, 28].")
          .req()
          .at_least(1)
          .items(1),
      field("classes", FT::integer, "Number of classes.").def("10").at_least(1),
      field("size", FT::integer,
            "Number of samples (the loader keeps each epoch's order of them: 8 bytes a sample).")
          .def("1024")
          .at_least(1)
          .at_most(100'000'000),
      field("seed", FT::integer, "Seed of the generated data.").def("0").at_least(0)};
  d.open = [](const Attrs& a) {
    return make_synthetic(ints_or(a, "shape", {}), int_or(a, "classes", 10),
                          int_or(a, "size", 1024),
                          static_cast<std::uint64_t>(int_or(a, "seed", 0)));
  };
  return d;
}

// The files of a source's path `fields` in `a`, for errors: "'x.npy' (800
// bytes on disk), 'y.npy' (96 bytes on disk)".
std::string files_with_sizes(const Attrs& a, const std::vector<std::string>& fields) {
  std::string files;
  for (const auto& field : fields) {
    for (const auto& path : strings_or(a, field, {})) {
      std::error_code ec;
      const std::uintmax_t size = std::filesystem::file_size(path, ec);
      files += (files.empty() ? "'" : ", '") + path + "'" +
               (ec ? "" : " (" + std::to_string(size) + " bytes on disk)");
    }
  }
  return files;
}

// `def` with its `open` reporting std::bad_alloc (a copy or conversion of the
// data once its files are read: those reads name their own file) as an error
// naming the source's files and their sizes, not a bare "std::bad_alloc".
SourceDef reporting_memory(SourceDef def) {
  def.open = [open = def.open, name = def.name, fields = def.path_fields](const Attrs& a) {
    try {
      return open(a);
    } catch (const std::bad_alloc&) {
      const std::string files = files_with_sizes(a, fields);
      throw std::runtime_error("not enough memory to read the data of the " + name + " source" +
                               (files.empty() ? "" : " from " + files) +
                               " (a source is held in memory, decompressed): free memory "
                               "(other programs, a smaller data set) or use a machine "
                               "with more");
    }
  };
  return def;
}

TransformDef transform(std::string name, bool random, std::string doc,
                       std::vector<FieldSpec> fields, std::string eval_form = "") {
  TransformDef d;
  d.name = std::move(name);
  d.random = random;
  d.eval_form = std::move(eval_form);
  d.doc = std::move(doc);
  d.fields = std::move(fields);
  return d;
}

}  // namespace

const std::vector<SourceDef>& source_defs() {
  static const std::vector<SourceDef> defs = {
      reporting_memory(idx_source()),          reporting_memory(cifar_source()),
      reporting_memory(npy_source()),          reporting_memory(csv_source()),
      reporting_memory(image_folder_source()), reporting_memory(synthetic_source())};
  return defs;
}

// The samples are float32: a constant outside these magnitudes would turn
// every value into 0 or an infinity (a divisor of 1e-320 is 0 in float32).
constexpr double kMinMagnitude = 1e-30;
constexpr double kMaxMagnitude = 1e30;

const std::vector<TransformDef>& transform_defs() {
  static const std::vector<TransformDef> defs = {
      transform("scale", false, "Divides every value by `factor` (255 maps bytes to [0, 1]).",
                {field("factor", FT::number, "The divisor.")
                     .def("255")
                     .at_least(kMinMagnitude)
                     .at_most(kMaxMagnitude)}),
      transform("normalize", false,
                "Per channel (x - mean) / std. Without mean and std they are computed once "
                "from the training set (after the transforms listed before this one) and "
                "recorded in the run.",
                {field("mean", FT::number_list, "Mean per channel (or one for all).")
                     .at_least(-kMaxMagnitude)
                     .at_most(kMaxMagnitude),
                 field("std", FT::number_list, "Standard deviation per channel (or one for all).")
                     .at_least(kMinMagnitude)
                     .at_most(kMaxMagnitude)}),
      transform("random_crop", true,
                "Pads every side with `padding` zeros and crops `size` at a random offset. "
                "Eval: a centre crop when `size` differs from the sample size, starting where "
                "torchvision's "
                "CenterCrop does (round((side - size) / 2), a half to the even as Python rounds), "
                "else nothing.",
                {field("size", FT::int_list, "Crop size: [height, width] or one value for both.")
                     .req()
                     .at_least(1)
                     .items(1, 2),
                 field("padding", FT::integer, "Zero padding on every side.").def("0").at_least(0)},
                "centre crop"),
      transform(
          "random_flip", true,
          "Flips the image horizontally (the last axis of [C, H, W] samples) with probability p.",
          {field("p", FT::number, "Probability of a flip.").def("0.5").at_least(0).at_most(1)}),
      transform("random_translate", true,
                "Shifts the image by up to `max` pixels in each direction, filling with zeros.",
                {field("max", FT::integer, "Largest shift in pixels.").def("2").at_least(0)}),
      transform(
          "random_erasing", true,
          "With probability p, sets one random rectangle (area fraction in `scale`, "
          "aspect ratio in `ratio`) of every channel to `value`.",
          {field("p", FT::number, "Probability of erasing.").def("0.5").at_least(0).at_most(1),
           field("scale", FT::number_list, "Range of the erased area fraction.")
               .def("[0.02, 0.33]")
               .length(2)
               .above(0)
               .at_most(1),
           field("ratio", FT::number_list, "Range of the aspect ratio.")
               .def("[0.3, 3.3]")
               .length(2)
               .above(0),
           field("value", FT::number, "Value written into the rectangle.")
               .def("0")
               .at_least(-kMaxMagnitude)
               .at_most(kMaxMagnitude)}),
  };
  return defs;
}

const SourceDef* find_source(const std::string& name) {
  for (const auto& d : source_defs()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::shared_ptr<Dataset> open_source(const std::string& type, const Attrs& attrs) {
  const SourceDef* def = find_source(type);
  if (!def) {
    std::string known;
    for (const auto& d : source_defs()) known += (known.empty() ? "" : ", ") + d.name;
    throw std::runtime_error("unknown data source type '" + type + "'; known: " + known);
  }
  return def->open(attrs);
}

}  // namespace trainer::data
