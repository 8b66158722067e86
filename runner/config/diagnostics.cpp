// Diagnostic formatting and the "did you mean" search.
#include "runner/config/diagnostics.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace trainer::config {

namespace {

// The code point of an invisible format character (zero-width spaces and
// joiners, direction marks and overrides, word joiners, the byte order mark,
// the soft hyphen) whose UTF-8 bytes start at text[i]; 0 for anything else.
unsigned invisible_at(const std::string& text, std::size_t i) {
  const auto at = [&](std::size_t k) {
    return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u;
  };
  if (at(i) == 0xC2 && at(i + 1) == 0xAD) return 0x00AD;
  if (at(i) != 0xE2 && at(i) != 0xEF) return 0;
  const unsigned code = ((at(i) & 0x0Fu) << 12) | ((at(i + 1) & 0x3Fu) << 6) | (at(i + 2) & 0x3Fu);
  if ((at(i + 1) & 0xC0) != 0x80 || (at(i + 2) & 0xC0) != 0x80) return 0;
  const bool invisible = (code >= 0x200B && code <= 0x200F) || (code >= 0x202A && code <= 0x202E) ||
                         (code >= 0x2060 && code <= 0x2064) || code == 0xFEFF;
  return invisible ? code : 0;
}

// User text echoed in a message may hold control bytes (a NUL, an escape
// sequence); they are shown as \xNN so the terminal shows what was written,
// and invisible format characters (a zero-width space in a key) as \uNNNN.
// Line breaks the message itself contains are kept.
std::string printable(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    if (const unsigned code = invisible_at(text, i); code != 0) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += hex[(code >> shift) & 15];
      i += code == 0x00AD ? 1 : 2;
    } else if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7f) {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

// A line of a message longer than kLongestLine bytes (a 50 MB value or key
// echoed) is cut to its first kKeptOfLine bytes, at a UTF-8 character's
// start, and says how long it was: an error stays a few lines on a terminal.
constexpr std::size_t kLongestLine = 4096;
constexpr std::size_t kKeptOfLine = 200;

std::string shortened(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::size_t length = end - start;
    if (length <= kLongestLine) {
      out.append(text, start, length);
    } else {
      std::size_t cut = start + kKeptOfLine;
      while (cut > start && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      out.append(text, start, cut - start);
      out += "... (" + std::to_string(length) + " bytes in all)";
    }
    if (end == text.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string format(const Diagnostic& d, const char* severity) {
  std::string out = shortened(printable(to_string(d.mark))) + ": " + severity + ": ";
  if (!d.key_path.empty()) out += shortened(printable(d.key_path)) + ": ";
  out += shortened(printable(d.message));
  if (!d.suggestion.empty()) out += "\n    " + shortened(printable(d.suggestion));
  return out;
}

void Diagnostics::add(Mark mark, std::string key_path, std::string message,
                      std::string suggestion) {
  list_.push_back(
      {std::move(mark), std::move(key_path), std::move(message), std::move(suggestion)});
}

std::string Diagnostics::format_all() const {
  std::string out;
  for (const auto& d : list_) out += format(d) + "\n";
  return out;
}

void Diagnostics::throw_if_any() const {
  if (!list_.empty()) throw ConfigError(*this);
}

ConfigError::ConfigError(Diagnostics diagnostics)
    : std::runtime_error(diagnostics.format_all()), diagnostics_(std::move(diagnostics)) {}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and
// transpositions of adjacent characters each cost one; case is ignored.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string ours_for(const std::string& word) {
  // Keys and values of PyTorch, Lightning, DeepSpeed, Hugging Face and Keras
  // configs a user brings along; one entry per word.
  static const std::map<std::string, std::string> kOurs = {
      {"accumulate_grad_batches", "accumulation"},
      {"bfloat16", "bf16"},
      {"clip_grad", "clip_grad_norm"},
      {"cosine_annealing", "cosine"},
      {"cosineannealing", "cosine"},
      {"cosineannealinglr", "cosine"},
      {"filters", "out_channels"},
      {"float", "fp32"},
      {"float16", "fp16"},
      {"float32", "fp32"},
      {"gradient_accumulation_steps", "accumulation"},
      {"gradient_clip_val", "clip_grad_norm"},
      {"gradient_clipping", "clip_grad_norm"},
      {"half", "fp16"},
      {"kernel_size", "kernel"},
      {"label_column", "label"},
      {"learning_rate", "lr"},
      {"max_epochs", "epochs"},
      {"max_grad_norm", "clip_grad_norm"},
      {"max_iters", "max_steps"},
      {"multisteplr", "multistep"},
      {"n_epochs", "epochs"},
      {"num_epochs", "epochs"},
      {"num_workers", "workers"},
      {"one_cycle", "onecycle"},
      {"onecyclelr", "onecycle"},
      {"output_dir", "dir"},
      {"pool_size", "kernel"},
      {"prefetch_factor", "prefetch"},
      {"steplr", "step"},
      {"tensorfloat32", "tf32"},
      {"train_batch_size", "batch_size"},
      {"units", "out_features"},
      {"warmup", "warmup_steps"},
  };
  std::string lower = word;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto it = kOurs.find(lower);
  return it == kOurs.end() ? std::string() : it->second;
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  if (const std::string ours = ours_for(word);
      !ours.empty() && std::find(candidates.begin(), candidates.end(), ours) != candidates.end())
    return ours;
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Close enough: at most a third of the longer word, and never more than 3 edits.
  const std::size_t limit = std::min<std::size_t>(3, std::max(word.size(), best.size()) / 3 + 1);
  if (best_distance <= limit) return best;
  // Else a word of 3 or more characters that begins exactly one candidate is
  // taken for it, cut short: "eval.acc" for "eval.accuracy".
  const auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  if (word.size() < 3) return {};
  const std::string start = lower(word);
  std::string begun;
  for (const auto& c : candidates) {
    if (c.size() <= word.size() || lower(c).compare(0, start.size(), start) != 0) continue;
    if (!begun.empty() && begun != c) return {};
    begun = c;
  }
  return begun;
}

}  // namespace trainer::config
