// Parsing and applying KEY=VALUE overrides.
#include "runner/config/overrides.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>

#include "runner/config/compose.h"
#include "runner/config/registry.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"

namespace trainer::config {
namespace {

// Larger indices cannot name an item of any list a config holds.
constexpr std::size_t kMaxListIndex = 1'000'000;

struct PathStep {
  std::string key;        // a map key, or empty for an index step
  std::size_t index = 0;  // for index steps
  int column = 0;         // 1-based position in the override text
};

bool parse_path(const std::string& key, int line, std::vector<PathStep>& steps,
                Diagnostics& diags) {
  std::size_t i = 0;
  auto bad = [&](std::size_t at, const std::string& why) {
    diags.add({kCommandLine, line, static_cast<int>(at) + 1}, key, why);
    return false;
  };
  if (key.empty()) return bad(0, "empty key before '='");
  while (i < key.size()) {
    const std::size_t start = i;
    while (i < key.size() && key[i] != '.' && key[i] != '[') ++i;
    if (i == start)
      return bad(start, "expected a key name at position " + std::to_string(start + 1));
    steps.push_back({key.substr(start, i - start), 0, static_cast<int>(start) + 1});
    while (i < key.size() && key[i] == '[') {
      const std::size_t open = i++;
      const std::size_t digits = i;
      while (i < key.size() && std::isdigit(static_cast<unsigned char>(key[i]))) ++i;
      if (i == digits && i < key.size() && key[i] == '-')
        return bad(open,
                   "a list index counts from 0 at the front: [-1] is not the last item; give "
                   "its index ([2] for the third)");
      if (i == digits || i >= key.size() || key[i] != ']')
        return bad(open, "expected a list index like [2]");
      std::size_t index = 0;
      const auto [end, err] = std::from_chars(key.data() + digits, key.data() + i, index);
      if (err != std::errc() || end != key.data() + i || index > kMaxListIndex)
        return bad(open, "list index " + key.substr(digits, i - digits) +
                             " is out of range (at most " + std::to_string(kMaxListIndex) + ")");
      steps.push_back({"", index, static_cast<int>(open) + 1});
      ++i;
    }
    if (i < key.size()) {
      if (key[i] != '.') return bad(i, "unexpected '" + std::string(1, key[i]) + "'");
      ++i;
      if (i == key.size()) return bad(i - 1, "key ends with '.'");
    }
  }
  return true;
}

std::string path_text(const std::vector<PathStep>& steps, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    if (steps[i].key.empty())
      out += "[" + std::to_string(steps[i].index) + "]";
    else
      out += (out.empty() ? "" : ".") + steps[i].key;
  }
  return out;
}

// `steps[at]` indexes a list that has no such item: an override replaces an
// item but cannot append one.
void report_no_item(const std::vector<PathStep>& steps, std::size_t at, int line,
                    const std::string& state, Diagnostics& diags) {
  const std::string list = path_text(steps, at);
  diags.add({kCommandLine, line, steps[at].column}, path_text(steps, at + 1),
            "'" + list + "' " + state + ", so it has no item " + std::to_string(steps[at].index),
            "an override replaces list items but cannot add them; to add one, give the whole "
            "list: " +
                list + "=[...]");
}

// `steps[at]` names a key inside `list`: when it is a number, or the `name:`
// of one of the list's items, the same override with that item's index in
// brackets (model.layers.2.units=8 -> model.layers[2].units=8).
std::string index_suggestion(const std::vector<PathStep>& steps, std::size_t at, const Node& list,
                             const std::string& value_text) {
  const std::string& key = steps[at].key;
  std::size_t index = list.items().size();
  const auto [end, err] = std::from_chars(key.data(), key.data() + key.size(), index);
  if (err != std::errc() || end != key.data() + key.size()) {
    index = list.items().size();
    for (std::size_t i = 0; i < list.items().size(); ++i) {
      const Node* name = list.items()[i].is_map() ? list.items()[i].find("name") : nullptr;
      if (name && name->is_scalar() && name->text() == key) index = i;
    }
  }
  if (index >= list.items().size()) return "";
  std::string path = path_text(steps, at) + "[" + std::to_string(index) + "]";
  for (std::size_t s = at + 1; s < steps.size(); ++s)
    path += steps[s].key.empty() ? "[" + std::to_string(steps[s].index) + "]" : "." + steps[s].key;
  return "list items are written with their index in brackets: " + path + "=" + value_text;
}

// Gives `node` and everything in it the mark `mark`.
void mark_all(Node& node, const Mark& mark) {
  node.set_mark(mark);
  for (Node& item : node.items()) mark_all(item, mark);
}

// Whether `a` and `b` read alike (kinds, keys, scalar texts and quoting),
// with `ordinary` in `b` standing for a '#'.
bool same_value(const Node& a, const Node& b, const std::string& ordinary) {
  const auto restored = [&](std::string text) {
    for (std::size_t at = text.find(ordinary); at != std::string::npos;
         at = text.find(ordinary, at + 1))
      text.replace(at, ordinary.size(), "#");
    return text;
  };
  if (a.kind() != b.kind() || a.size() != b.size()) return false;
  if (a.is_scalar()) return a.quoted() == b.quoted() && a.text() == restored(b.text());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.is_map() && a.key_at(i) != restored(b.key_at(i))) return false;
    if (!same_value(a.value_at(i), b.value_at(i), ordinary)) return false;
  }
  return true;
}

// Where a YAML comment starts in an override's value, npos when none does:
// a '#' that the YAML reader reads as one, since the value reads otherwise,
// or only, with that '#' an ordinary character. On a command line it is
// almost always part of the value (`output.dir=runs #2`), which the reader
// would cut off there.
std::size_t comment_start(const std::string& value) {
  if (value.find('#') == std::string::npos) return std::string::npos;
  // A private-use character the value does not hold stands in for the '#'.
  std::string ordinary;
  for (unsigned low = 0x80; low <= 0xBF && ordinary.empty(); ++low) {
    const std::string candidate = {'\xEE', '\x80', static_cast<char>(low)};  // U+E000..U+E03F
    if (value.find(candidate) == std::string::npos) ordinary = candidate;
  }
  if (ordinary.empty()) return std::string::npos;
  Diagnostics ignored;
  bool ok = true;
  const Node as_written = parse_yaml(value, kCommandLine, ignored, &ok);
  for (std::size_t at = value.find('#'); at != std::string::npos; at = value.find('#', at + 1)) {
    std::string plain = value;
    plain.replace(at, 1, ordinary);
    bool plain_ok = true;
    const Node read = parse_yaml(plain, kCommandLine, ignored, &plain_ok);
    // Text the reader cannot take where the comment was (after a flow map's
    // end) is a comment too. A value that does not read: a '#' that reads
    // as ordinary mends it, or one after a blank (which always starts a
    // comment) is named, as what most likely cut a flow list or map short.
    const bool after_blank =
        at == 0 || std::string_view(" \t\n").find(value[at - 1]) != std::string_view::npos;
    if (ok ? !plain_ok || !same_value(as_written, read, ordinary) : plain_ok || after_blank)
      return at;
  }
  return std::string::npos;
}

// The error for an override's value `value` whose '#' at `comment` starts a
// comment, with the override to give instead where one fits (a plain string
// quoted; a value with quotes, lists or maps of its own is the user's to quote).
void report_comment(const std::string& value, std::size_t comment, const std::string& key,
                    const Mark& at, Diagnostics& diags) {
  // The comment runs to its line's end; what is kept, blanks trimmed, before it.
  const std::string cut = value.substr(comment, value.find('\n', comment) - comment);
  const std::size_t kept_end =
      comment == 0 ? std::string::npos : value.find_last_not_of(" \t\n", comment - 1);
  const std::size_t first = value.find_first_not_of(" \t");
  const std::size_t last = value.find_last_not_of(" \t");
  const std::string trimmed = value.substr(first, last - first + 1);
  const bool plain_string = trimmed.find_first_of("\"'[]{}\\\n") == std::string::npos;
  diags.add(
      at, key,
      "'" + cut +
          "' would be read as a YAML comment (a '#' that starts a value or follows a space "
          "starts one), leaving " +
          (kept_end == std::string::npos ? std::string("no value")
                                         : "'" + value.substr(0, kept_end + 1) + "'"),
      plain_string
          ? "quote the value in YAML, inside the shell's quotes: '" + key + "=\"" + trimmed + "\"'"
          : "quote the string that holds the '#' in YAML (\"...\"), or leave the comment out");
}

void apply_one(Node& root, const std::string& text, int line, const std::optional<Mark>& origin,
               Diagnostics& diags) {
  // Other tools' prefixes: "+key=value" adds a key, "~key" deletes one.
  const std::size_t after_prefix = text.empty() ? 0 : text.find_first_not_of(text[0]);
  if ((text[0] == '+' || text[0] == '~') && after_prefix != std::string::npos) {
    const std::string plain = text.substr(after_prefix);
    diags.add({kCommandLine, line, 1}, "",
              text[0] == '+' ? "'" + text +
                                   "': a key is set without '+' here, whether the config file "
                                   "writes it or not"
                             : "'" + text +
                                   "': keys are not removed by an override; one the config does "
                                   "not set takes its default",
              text[0] == '+' ? "write " + plain
                             : "to put it back to its default, give the default's value "
                               "(`trainer print-config` without the file's setting shows it), "
                               "or SECTION={} for a whole section");
    return;
  }
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    diags.add({kCommandLine, line, 1}, "",
              "expected KEY=VALUE (e.g. optimizer.lr=0.01), found '" + text + "'");
    return;
  }
  const std::string key = text.substr(0, eq);
  std::vector<PathStep> steps;
  if (!parse_path(key, line, steps, diags)) return;
  if (steps.front().key == "extends") {
    diags.add({kCommandLine, line, 1}, "extends",
              "`extends` cannot be given as an override: the files a config extends are merged "
              "when it is read",
              "put `extends: " + text.substr(eq + 1) + "` at the top of the config file");
    return;
  }

  const std::string value_text = text.substr(eq + 1);
  if (const std::size_t comment = comment_start(value_text); comment != std::string::npos) {
    // Its column on the command line; a value of several lines, at its start.
    const bool one_line = value_text.rfind('\n', comment) == std::string::npos;
    report_comment(value_text, comment, key,
                   {kCommandLine, line, static_cast<int>(eq + (one_line ? comment : 0)) + 2},
                   diags);
    return;
  }
  bool ok = true;
  Node value = parse_yaml(value_text, kCommandLine, diags, &ok, line - 1, static_cast<int>(eq) + 1);
  if (!ok) return;
  if (value.is_null()) value.set_mark({kCommandLine, line, static_cast<int>(eq) + 2});
  if (origin) mark_all(value, *origin);
  // `optimizer=` would put every key of the section back to its default,
  // dropping what the file sets: most likely a value left out.
  const bool keys_only = std::none_of(steps.begin(), steps.end(),
                                      [](const PathStep& step) { return step.key.empty(); });
  if (value.is_null() && keys_only && find_section(path_text(steps, steps.size()))) {
    const std::string section = path_text(steps, steps.size());
    diags.add(value.mark(), section,
              "no value for the whole section: every key of " + section +
                  " would be put back to its default, whatever the config sets",
              "to set one key: " + section +
                  ".KEY=VALUE; to put the whole section back to its "
                  "defaults: " +
                  section + "={}");
    return;
  }

  Node* cur = &root;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const PathStep& step = steps[s];
    const bool last = s + 1 == steps.size();
    const Mark step_mark = origin ? *origin : Mark{kCommandLine, line, step.column};
    if (step.key.empty()) {
      if (cur->is_null()) {
        report_no_item(steps, s, line, "is not set", diags);
        return;
      }
      if (!cur->is_sequence()) {
        diags.add(step_mark, path_text(steps, s + 1),
                  "'" + path_text(steps, s) + "' is not a list (found " + describe(*cur) + ")");
        return;
      }
      if (step.index >= cur->items().size()) {
        report_no_item(steps, s, line, "has " + std::to_string(cur->items().size()) + " item(s)",
                       diags);
        return;
      }
      if (last)
        cur->items()[step.index] = value;
      else
        cur = &cur->items()[step.index];
      continue;
    }
    if (cur->is_null()) *cur = Node::map(step_mark);
    if (!cur->is_map()) {
      diags.add(step_mark, path_text(steps, s + 1),
                "cannot set a key inside '" + path_text(steps, s) + "': it is " + describe(*cur) +
                    " (at " + to_string(cur->mark()) + "), not a map",
                cur->is_sequence() ? index_suggestion(steps, s, *cur, text.substr(eq + 1)) : "");
      return;
    }
    if (last) {
      cur->set(step.key, value, step_mark);
    } else {
      Node* next = cur->find(step.key);
      if (!next) {
        // A missing key followed by an index: nothing to index into (reported
        // above, without leaving an empty map behind in the tree).
        if (steps[s + 1].key.empty()) {
          report_no_item(steps, s + 1, line, "is not set", diags);
          return;
        }
        next = &cur->set(step.key, Node::map(step_mark), step_mark);
      }
      cur = next;
    }
  }
}

}  // namespace

void apply_overrides(Node& root, const std::vector<std::string>& overrides, Diagnostics& diags,
                     const OverrideOrigins& origins) {
  // A loss named in the file takes keys by override too.
  if (Node* model = root.find("model")) expand_loss_shorthand(*model);
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    // `devices.world_size=2 devices=cpu`: the second replaces all of devices,
    // and the first would be dropped unseen.
    // (A value left out is an error of its own.)
    const std::string key = override_key(overrides[i]);
    const std::size_t equals = overrides[i].find('=');
    const bool has_value = equals != std::string::npos &&
                           overrides[i].find_first_not_of(" \t", equals + 1) != std::string::npos;
    for (std::size_t before = 0; before < i && has_value; ++before) {
      const std::string earlier = override_key(overrides[before]);
      if (earlier.size() > key.size() && earlier.starts_with(key) &&
          (earlier[key.size()] == '.' || earlier[key.size()] == '[')) {
        diags.add({kCommandLine, static_cast<int>(i) + 1, 1}, key,
                  "replaces all of " + key + ", so override " + std::to_string(before + 1) + " '" +
                      overrides[before] + "' before it has no effect",
                  "give '" + overrides[i] + "' first, then the keys under it");
        break;
      }
    }
    apply_one(root, overrides[i], static_cast<int>(i) + 1,
              i < origins.size() ? origins[i] : std::nullopt, diags);
    // `precision=fp16` then `precision.loss_scale.init_scale=1024`: a later
    // override refines what an earlier one set in short.
    expand_shorthands(root);
    if (Node* model = root.find("model")) expand_loss_shorthand(*model);
  }
}

std::string override_key(const std::string& override_text) {
  return override_text.substr(0, override_text.find('='));
}

namespace {

// Quoted whole unless it is long (a path of thousands of bytes).
std::string quoted_override(const std::string& text) {
  constexpr std::size_t kQuoted = 160;
  return "'" + (text.size() > kQuoted ? text.substr(0, kQuoted) + "..." : text) + "'";
}

// Whether an override's key ("model.layers[5].out_features", "+data.x")
// lies under `section` ("model.layers"): a key or an index within it.
bool sets_part_of(const std::string& override_text, const std::string& section) {
  std::string key = override_key(override_text);
  if (!key.empty() && (key.front() == '+' || key.front() == '~')) key.erase(0, 1);
  return !section.empty() && key.size() > section.size() &&
         key.compare(0, section.size(), section) == 0 &&
         (key[section.size()] == '.' || key[section.size()] == '[');
}

}  // namespace

Diagnostics annotate_overrides(const Diagnostics& diags,
                               const std::vector<std::string>& overrides) {
  Diagnostics out;
  for (Diagnostic d : diags.list()) {
    if (d.message.find(" (in override ") != std::string::npos ||
        d.message.find(" (override ") != std::string::npos) {
      // annotated before
    } else if (d.mark.file == kCommandLine && d.mark.line >= 1 &&
               d.mark.line <= static_cast<int>(overrides.size())) {
      d.message += " (in override " + std::to_string(d.mark.line) + " " +
                   quoted_override(overrides[static_cast<std::size_t>(d.mark.line) - 1]) + ")";
    } else {
      // Reported where the file writes a section, which overrides changed
      // inside; else in a map whose type an override set (a key missing
      // from the layer it gave another type).
      std::string changed;
      for (std::size_t i = 0; i < overrides.size(); ++i)
        if (sets_part_of(overrides[i], d.key_path))
          changed += (changed.empty() ? "" : ", ") + std::to_string(i + 1) + " " +
                     quoted_override(overrides[i]);
      const std::size_t cut = d.key_path.rfind('.');
      const std::string type_key =
          cut == std::string::npos ? "" : d.key_path.substr(0, cut) + ".type";
      std::size_t retyped = 0;  // 1-based: the override that set that map's type
      for (std::size_t i = 0; i < overrides.size() && changed.empty(); ++i)
        if (override_key(overrides[i]) == type_key) retyped = i + 1;
      if (!changed.empty())
        d.message += " (override " + changed + " changed it)";
      else if (retyped > 0)
        d.message += " (override " + std::to_string(retyped) + " " +
                     quoted_override(overrides[retyped - 1]) + " set " + type_key + ")";
    }
    out.add(std::move(d));
  }
  return out;
}

}  // namespace trainer::config
