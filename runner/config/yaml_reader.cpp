// YAML text -> config::Node, built from yaml-cpp's parser events so every node
// and every map key keeps its 1-based line and column. Aliases are expanded (up
// to kMaxAliasNodes copied nodes a file, the anchored values kept for them
// counted too), and merge keys (`<<: *base`,
// `<<: [*a, *b]`) copy the keys a map does not set itself.
#include "runner/config/yaml_reader.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "data/utf8.h"

namespace trainer::config {
namespace {

// The most nodes the aliases of one file may copy, all together: far more
// than any config repeats, far fewer than nested aliases of aliases (each
// copying the last ten times over) reach after a few levels.
constexpr std::size_t kMaxAliasNodes = 1'000'000;

// Where the quote of a scalar that starts at `at` is, past an anchor (&a) or
// a tag (!!str) written before it; text.size() when it does not start with one.
std::size_t opening_quote(const std::string& text, std::size_t at) {
  while (at < text.size() && (text[at] == '&' || text[at] == '!')) {
    while (at < text.size() && text[at] != ' ' && text[at] != '\n') ++at;
    while (at < text.size() && text[at] == ' ') ++at;
  }
  return at < text.size() && (text[at] == '"' || text[at] == '\'') ? at : text.size();
}

// Whether the quoted scalar whose opening quote is at `at` in `text` is
// closed: yaml-cpp takes the end of a file that ends with a line break as the
// end of an unclosed one, and reads the rest of the file into it.
bool quote_closed(const std::string& text, std::size_t at) {
  const char quote = text[at];
  for (std::size_t i = at + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is not the end
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
        continue;
      }
      return true;
    }
  }
  return false;
}

// Builds the tree from the event stream. Maps receive alternating key and value
// events; a key is kept as `pending_key` until its value arrives.
class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(const std::string& text, std::string file, Diagnostics& diags, int line_offset,
              int column_offset)
      : text_(text),
        file_(std::move(file)),
        diags_(diags),
        line_offset_(line_offset),
        column_offset_(column_offset) {}

  Node take_root() { return std::move(root_); }
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark&) override { ++documents_; }
  void OnDocumentEnd() override {}

  // Comes just before the event of the node it names.
  void OnAnchor(const YAML::Mark&, const std::string& name) override { anchor_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Node n;
    // An empty value ("lr:" ending its line) is placed by yaml-cpp at the next
    // token, lines below maybe; it is reported at its key instead.
    const bool map_value = !stack_.empty() && stack_.back().node.is_map() && stack_.back().has_key;
    const Mark at = to_mark(mark);
    n.set_mark(map_value && at.line != stack_.back().key_mark.line ? stack_.back().key_mark : at);
    add_value(std::move(n), anchor, 1);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end() || !may_copy(it->second, to_mark(mark))) {
      Node n;
      n.set_mark(to_mark(mark));
      add_value(std::move(n), 0, 1);
      return;
    }
    Node n = it->second.node;
    n.set_mark(to_mark(mark));
    add_value(std::move(n), 0, it->second.nodes);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    // yaml-cpp tags plain scalars "?" and quoted or block scalars "!". Of the
    // core schema's tags, !!str makes the text a string; !!int, !!float,
    // !!bool and !!null leave it to be read as a plain scalar (the field's
    // type still checks it); another tag is an error at the value.
    static const std::set<std::string> plain_tags = {
        "?", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null"};
    const bool string_tag = tag == "!" || tag == "tag:yaml.org,2002:str";
    if (!string_tag && !plain_tags.contains(tag))
      diags_.add(to_mark(mark), "",
                 "unsupported tag '" + tag + "' on '" + value +
                     "': a config reads only the core tags !!str, !!int, !!float, !!bool and "
                     "!!null",
                 "remove the tag: the field's type says how the value is read");
    const std::size_t at = opening_quote(text_, static_cast<std::size_t>(mark.pos));
    if (string_tag && at < text_.size() && !quote_closed(text_, at))  // a syntax error
      throw YAML::ParserException(mark, std::string("this value opens a quote (") + text_[at] +
                                            ") that nothing closes, so the rest of the file "
                                            "would be read into it; close it where the value "
                                            "ends");
    // An unsupported tag is read as if it were not there: its error alone is
    // reported, not a second one for the text read as a string.
    add_value(Node::scalar(value, to_mark(mark), string_tag), anchor, 1);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check_collection_tag(mark, tag, "tag:yaml.org,2002:seq", "list");
    open(Node::sequence(to_mark(mark)), anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    check_collection_tag(mark, tag, "tag:yaml.org,2002:map", "map");
    open(Node::map(to_mark(mark)), anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  // A list or map takes no tag but its own core one (!!seq, !!map): another
  // (!!binary, !python/object) is an error at the value, as on a scalar.
  void check_collection_tag(const YAML::Mark& mark, const std::string& tag, const char* own,
                            const char* what) {
    if (tag.empty() || tag == "?" || tag == "!" || tag == own) return;
    diags_.add(to_mark(mark), "",
               "unsupported tag '" + tag + "' on a " + what +
                   ": a config reads only the core tags (!!seq on a list, !!map on a map)",
               "remove the tag: the field's type says how the value is read");
  }

  struct Frame {
    Node node;
    YAML::anchor_t anchor = 0;
    std::size_t nodes = 1;  // in `node`, counting itself, its keys and its values
    bool has_key = false;
    bool key_invalid = false;  // the key was not a scalar: drop its value
    bool key_quoted = false;   // '<<' quoted is an ordinary key, not a merge
    std::string name;          // the anchor's, as written after '&'; "" for none
    std::string key;
    Mark key_mark;
    std::set<std::string> merged;  // keys copied by '<<', which the map's own keys replace
    Mark merged_at;                // where this map's '<<' is (line 0: none yet)
  };

  // An anchored value, what its aliases copy.
  struct Anchored {
    Node node;
    std::size_t nodes = 1;  // in `node`, counting itself
    std::string name;       // as written after '&'
  };

  static constexpr const char* kMergeKey = "<<";

  Mark to_mark(const YAML::Mark& m) const {
    return {file_, m.line + 1 + line_offset_, m.column + 1 + column_offset_};
  }

  void open(Node n, YAML::anchor_t anchor) {
    if (!stack_.empty() && stack_.back().node.is_map() && !stack_.back().has_key) {
      // A map or list used as a key: not something a config can mean.
      diags_.add(
          n.mark(), "",
          "a map key must be a plain name, found a " + std::string(n.is_map() ? "map" : "list"));
      stack_.back().has_key = true;
      stack_.back().key_invalid = true;
    }
    stack_.push_back({std::move(n), anchor});
    stack_.back().name = anchor != 0 ? anchor_name_ : "";
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    add_value(std::move(f.node), f.anchor, f.nodes, f.name);
  }

  // Whether an alias of `anchored` may be expanded: the copies of this file
  // stay within kMaxAliasNodes. The first one that would not is reported at
  // `at`; it and every later alias then read as null.
  bool may_copy(const Anchored& anchored, const Mark& at) {
    if (alias_limit_reported_) return false;
    if (anchored.nodes <= kMaxAliasNodes - alias_nodes_) {
      alias_nodes_ += anchored.nodes;
      return true;
    }
    alias_limit_reported_ = true;
    diags_.add(
        at, current_path(),
        "alias *" + anchored.name + " expands to more than " + std::to_string(kMaxAliasNodes) +
            " nodes with the aliases before it (it copies " + std::to_string(anchored.nodes) +
            "); a config does not need this: check the anchors",
        "an alias copies the whole value its anchor marks, so lists of aliases of lists "
        "of aliases multiply: alias only the values meant to be repeated");
    return false;
  }

  // Whether an anchored value of `nodes` nodes may be kept for its aliases:
  // the copies of this file stay within kMaxAliasNodes. The first one that
  // would not is reported at `at`; its aliases (and every later one) then
  // read as null.
  bool keeps_anchor(std::size_t nodes, const std::string& name, const Mark& at) {
    if (alias_limit_reported_) return false;
    if (nodes <= kMaxAliasNodes - alias_nodes_) {
      alias_nodes_ += nodes;
      return true;
    }
    alias_limit_reported_ = true;
    diags_.add(at, current_path(),
               "anchor &" + name + " keeps more than " + std::to_string(kMaxAliasNodes) +
                   " nodes with the anchors and aliases before it (it holds " +
                   std::to_string(nodes) + "); a config does not need this: check the anchors",
               "anchors nested in anchors copy the inner values once per level: anchor only the "
               "values meant to be repeated");
    return false;
  }

  // The key path of the value being read ("a5[3]"), for messages.
  std::string current_path() const {
    std::string path;
    for (const Frame& f : stack_) {
      if (f.node.is_sequence())
        path += "[" + std::to_string(f.node.items().size()) + "]";
      else if (f.has_key && !f.key_invalid)
        path += (path.empty() ? "" : ".") + f.key;
    }
    return path;
  }

  void add_value(Node n, YAML::anchor_t anchor, std::size_t nodes, std::string name = "") {
    // Keeping an anchored value for its aliases is a copy too (anchors
    // nested in anchors copy the inner values once per level): it counts.
    if (anchor != 0 && keeps_anchor(nodes, name.empty() ? anchor_name_ : name, n.mark()))
      anchors_[anchor] = {n, nodes, name.empty() ? anchor_name_ : std::move(name)};
    if (stack_.empty()) {
      root_ = std::move(n);
      return;
    }
    Frame& top = stack_.back();
    top.nodes += nodes;
    if (top.node.is_sequence()) {
      top.node.push_back(std::move(n));
      return;
    }
    if (!top.has_key) {
      top.has_key = true;
      top.key_invalid = !n.is_scalar();
      if (n.is_null()) diags_.add(n.mark(), "", "a map key must be a plain name, found nothing");
      top.key = n.text();
      top.key_quoted = n.quoted();
      top.key_mark = n.mark();
      return;
    }
    top.has_key = false;
    if (top.key_invalid) return;
    if (top.key == kMergeKey && !top.key_quoted) {
      merge(top, n);
      return;
    }
    if (top.merged.erase(top.key) > 0) {
      top.node.erase(top.key);  // the map's own value replaces the merged one
    } else if (top.node.find(top.key) != nullptr) {
      report_duplicate(top, top.key_mark);
      return;  // the first occurrence stays
    }
    top.node.set(top.key, std::move(n), top.key_mark);
  }

  // `<<: map` or `<<: [map, ...]`: copies each key the map has not set yet; in a
  // list the earlier maps win, and keys the map sets itself (before or after the
  // '<<') always win.
  void merge(Frame& top, const Node& source) {
    if (top.merged_at.line > 0) {
      diags_.add(top.key_mark, "",
                 "duplicate merge key '<<' (first given at " + to_string(top.merged_at) +
                     "); merge several maps with one list: <<: [*a, *b]");
      return;
    }
    top.merged_at = top.key_mark;
    std::vector<const Node*> maps;
    if (source.is_map()) maps.push_back(&source);
    if (source.is_sequence())
      for (const Node& item : source.items()) maps.push_back(&item);
    const bool all_maps =
        (source.is_map() || source.is_sequence()) &&
        std::all_of(maps.begin(), maps.end(), [](const Node* m) { return m->is_map(); });
    if (!all_maps) {
      diags_.add(source.mark(), "",
                 "the merge key '<<' takes a map or a list of maps, such as <<: *base (an "
                 "alias of a map marked &base), found " +
                     describe(source));
      return;
    }
    for (const Node* map : maps) {
      for (std::size_t i = 0; i < map->size(); ++i) {
        const std::string& key = map->key_at(i);
        if (top.node.find(key) != nullptr) continue;
        top.node.set(key, map->value_at(i), map->key_mark_at(i));
        top.merged.insert(key);
      }
    }
  }

  void report_duplicate(const Frame& top, const Mark& again) {
    Mark first_mark;
    for (std::size_t i = 0; i < top.node.size(); ++i)
      if (top.node.key_at(i) == top.key) first_mark = top.node.key_mark_at(i);
    diags_.add(again, "",
               "duplicate key '" + top.key + "' (first given at " + to_string(first_mark) + ")");
  }

  static std::string describe(const Node& n) {
    if (n.is_null()) return "nothing";
    if (n.is_scalar()) return "'" + n.text() + "'";
    return "a list holding something other than maps";
  }

  const std::string& text_;  // what is parsed, for a scalar's opening quote
  std::string file_;
  Diagnostics& diags_;
  int line_offset_;
  int column_offset_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  std::string anchor_name_;      // the name of the last anchor read
  std::size_t alias_nodes_ = 0;  // copied by aliases so far
  bool alias_limit_reported_ = false;
  Node root_;
  int documents_ = 0;
};

// YAML breaks lines at CR LF, LF or a lone CR; the parser knows only the first
// two, so a lone CR (old Mac line endings) becomes LF.
std::string normalize_line_breaks(const std::string& text) {
  std::string out = text;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] == '\r' && (i + 1 == out.size() || out[i + 1] != '\n')) out[i] = '\n';
  return out;
}

// Line `index` (from 0) of `text`, without its line break; "" past the end.
std::string line_at(const std::string& text, int index) {
  std::size_t start = 0;
  for (int i = 0; i < index; ++i) {
    start = text.find('\n', start);
    if (start == std::string::npos) return "";
    ++start;
  }
  return text.substr(start, text.find('\n', start) - start);
}

// The mark of byte `at` of `text`.
Mark mark_at(const std::string& text, std::size_t at, const std::string& file, int line_offset,
             int column_offset) {
  int line = 1, column = 1;
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return Mark{file, line + line_offset, column + column_offset};
}

// The error for the first byte that no YAML text holds: a NUL (the parser
// would stop reading there), or a byte that is not UTF-8 (which the config's
// values, copied into JSON records, could not hold); nullopt when there is none.
std::optional<std::pair<Mark, std::string>> find_unreadable_byte(const std::string& text,
                                                                 const std::string& file,
                                                                 int line_offset,
                                                                 int column_offset) {
  // A UTF-16 file (an editor's "Unicode" on Windows): its byte order mark, or
  // ASCII text with every other byte NUL.
  const bool utf16 = text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF") ||
                     (text.size() >= 4 && text[0] != '\0' && text[1] == '\0' && text[3] == '\0') ||
                     (text.size() >= 4 && text[0] == '\0' && text[1] != '\0' && text[2] == '\0');
  if (utf16 && line_offset == 0)
    return std::pair{Mark{file, 1, 1},
                     std::string("invalid YAML: the file is UTF-16 text (a config is UTF-8): save "
                                 "it as UTF-8 (iconv -f UTF-16 -t UTF-8 converts it)")};
  if (const std::size_t at = text.find('\0'); at != std::string::npos)
    return std::pair{mark_at(text, at, file, line_offset, column_offset),
                     std::string("invalid YAML: a NUL byte (\\0); is this a binary file?")};
  if (const std::size_t at = data::invalid_utf8_at(text); at != std::string::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[at]));
    return std::pair{mark_at(text, at, file, line_offset, column_offset),
                     std::string("invalid YAML: byte ") + hex +
                         " is not UTF-8 (a config is UTF-8 text; was this written in Latin-1 or "
                         "another encoding?): write it as UTF-8 (iconv -f LATIN1 -t UTF-8 "
                         "converts a Latin-1 file)"};
  }
  return std::nullopt;
}

// The mark of the '---' (or '...') line that starts a second document (or
// ends the first): the first one after a line with content (a document may
// open with '---' of its own); nullopt when no line is one.
struct DocumentMarker {
  Mark mark;
  std::string text;  // "---" or "..."
};
std::optional<DocumentMarker> second_document_marker(const std::string& text,
                                                     const std::string& file, int line_offset,
                                                     int column_offset) {
  bool content = false;
  int line = 1;
  for (std::size_t start = 0; start < text.size(); ++line) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view row(text.data() + start, end - start);
    // "---" starts a document, "..." ends one: either, alone or before a blank.
    const bool marker = (row.starts_with("---") || row.starts_with("...")) &&
                        (row.size() == 3 || row[3] == ' ' || row[3] == '\t');
    if (marker && content)
      return DocumentMarker{{file, line + line_offset, 1 + column_offset},
                            std::string(row.substr(0, 3))};
    if (!marker && !row.empty() && row.front() != '#') content = true;
    start = end + 1;
  }
  return std::nullopt;
}

// What to look at for the YAML library's terser syntax errors on `line` (the
// text of the line it names); "" for others.
std::string syntax_advice(const std::string& message, const std::string& line) {
  const std::string indentation = line.substr(0, line.find_first_not_of(" \t"));
  if (indentation.find('\t') != std::string::npos)
    return "indent with spaces: YAML takes no tabs there";
  static const std::map<std::string, std::string> advice = {
      {YAML::ErrorMsg::MAP_VALUE,
       "a ':' here cannot start a value: is this key indented deeper than the keys beside it? "
       "(a key longer than 1024 characters reads this way too)"},
      {YAML::ErrorMsg::TAB_IN_INDENTATION, "indent with spaces: YAML takes no tabs there"},
      {YAML::ErrorMsg::END_OF_MAP_FLOW, "a '{' before here is not closed: add its '}'"},
      {YAML::ErrorMsg::END_OF_SEQ_FLOW, "a '[' before here is not closed: add its ']'"},
      {YAML::ErrorMsg::END_OF_MAP, "check the indentation of the lines above"},
      {YAML::ErrorMsg::END_OF_SEQ, "check the indentation of the lines above"},
      {YAML::ErrorMsg::BLOCK_ENTRY,
       "a '- ' list item where a key belongs: check the indentation of the lines above"},
      {YAML::ErrorMsg::UNKNOWN_ANCHOR, "define the anchor (&name) before an alias (*name) uses it"},
  };
  const auto found = advice.find(message);
  return found == advice.end() ? "" : found->second;
}

}  // namespace

Node parse_yaml(const std::string& raw_text, const std::string& file, Diagnostics& diags, bool* ok,
                int line_offset, int column_offset) {
  if (ok) *ok = true;
  // Without a leading byte order mark, which yaml-cpp skips and does not count
  // in its positions (the unclosed-quote check reads the text by them).
  const bool bom = raw_text.rfind("\xEF\xBB\xBF", 0) == 0;
  const std::string text = normalize_line_breaks(bom ? raw_text.substr(3) : raw_text);
  if (const auto unreadable = find_unreadable_byte(text, file, line_offset, column_offset)) {
    diags.add(unreadable->first, "", unreadable->second);
    if (ok) *ok = false;
    return Node{};
  }
  std::istringstream in(text);
  // Problems seen while building (duplicate keys) are kept only when the text
  // parses: after a syntax error the partial event stream means nothing.
  Diagnostics found;
  TreeBuilder builder(text, file, found, line_offset, column_offset);
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder)) return Node{};
    Diagnostics ignored;
    TreeBuilder second(text, file, ignored, line_offset, column_offset);
    if (parser.HandleNextDocument(second)) {
      if (const auto marker = second_document_marker(text, file, line_offset, column_offset)) {
        diags.add(marker->mark, "",
                  "expected one YAML document, found a second one " +
                      std::string(marker->text == "..." ? "after this end of the first"
                                                        : "starting here"),
                  "remove this '" + marker->text +
                      "' line and what follows it, or put that in a file of its own");
      } else {  // a value that goes on past its end: "1""6", [a]b, {a: 1} x
        diags.add({file, 1 + line_offset, 1 + column_offset}, "",
                  "expected one YAML value, found more after its end",
                  "a quoted string ends at its closing quote, a list at its ']' and a map at its "
                  "'}': quote the whole value, or remove what follows its end");
      }
      if (ok) *ok = false;
    }
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp gives this its generic "bad file" message.
    const Mark mark{file, e.mark.line + 1 + line_offset, e.mark.column + 1 + column_offset};
    diags.add(mark, "",
              "invalid YAML: lists or maps nested too deeply to read (past the parser's limit "
              "near here); a config needs a few levels, so is this file generated wrongly?");
    if (ok) *ok = false;
    return Node{};
  } catch (const YAML::Exception& e) {
    const Mark mark{file, e.mark.line + 1 + line_offset, e.mark.column + 1 + column_offset};
    diags.add(mark, "", "invalid YAML: " + e.msg, syntax_advice(e.msg, line_at(text, e.mark.line)));
    if (ok) *ok = false;
    return Node{};
  }
  for (const auto& d : found.list()) diags.add(d);
  return builder.take_root();
}

Node read_yaml_file(const std::string& path, const Mark& where, Diagnostics& diags, bool* ok) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // The system's reason (permission denied), which the stream drops.
    const int error = errno;
    diags.add(where, "",
              "cannot read file '" + path + "'" +
                  (error != 0 ? ": " + std::string(std::strerror(error)) : std::string()));
    if (ok) *ok = false;
    return Node{};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_yaml(text.str(), path, diags, ok);
}

}  // namespace trainer::config
