// config::Node: a YAML document as a tree whose every value remembers where it
// came from (file, line, column), so any later stage can point at the YAML.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainer::config {

// The file of a value the user did not write: a field's default.
inline constexpr const char* kDefaultFile = "<default>";
// The file of a default computed from other values (data.eval_transforms from
// data.transforms): shown in a resolved config as a comment, so that reading
// it back derives it again from what those values are then.
inline constexpr const char* kDerivedFile = "<derived>";

struct Mark {
  std::string file;  // as given by the user (or "<override>", kDefaultFile, kDerivedFile)
  int line = 0;      // 1-based; 0: unknown
  int column = 0;    // 1-based
  bool is_default() const { return file == kDefaultFile || file == kDerivedFile; }
  bool is_derived() const { return file == kDerivedFile; }
  // The same place: file, line and column.
  bool operator==(const Mark&) const = default;
};

// The file of a mark in a `trainer sweep --grid` flag; its line is the
// flag's number (from 1).
inline constexpr const char* kGridFlags = "<--grid>";

// "configs/a.yaml:12:5"; "--grid flag 2" for a mark in a --grid flag.
std::string to_string(const Mark& mark);

class Node {
 public:
  enum class Kind { null, scalar, sequence, map };

  Node() = default;
  static Node scalar(std::string text, Mark mark, bool quoted = false);
  static Node sequence(Mark mark);
  static Node map(Mark mark);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_scalar() const { return kind_ == Kind::scalar; }
  bool is_sequence() const { return kind_ == Kind::sequence; }
  bool is_map() const { return kind_ == Kind::map; }
  const Mark& mark() const { return mark_; }
  void set_mark(Mark mark) { mark_ = std::move(mark); }

  // Scalars: the text as written; `quoted` is true for '...' or "..." scalars
  // (a quoted "1" is a string, not a number).
  const std::string& text() const { return text_; }
  bool quoted() const { return quoted_; }

  // Sequences.
  const std::vector<Node>& items() const { return items_; }
  std::vector<Node>& items() { return items_; }
  void push_back(Node n) { items_.push_back(std::move(n)); }

  // Maps keep insertion order.
  std::size_t size() const { return kind_ == Kind::map ? keys_.size() : items_.size(); }
  const std::string& key_at(std::size_t i) const { return keys_[i].first; }
  const Mark& key_mark_at(std::size_t i) const { return keys_[i].second; }
  const Node& value_at(std::size_t i) const { return items_[i]; }
  Node& value_at(std::size_t i) { return items_[i]; }
  const Node* find(const std::string& key) const;
  Node* find(const std::string& key);
  // Sets or replaces `key` (replacing keeps its place in the order; its mark
  // becomes the new one, where errors about the new value point).
  Node& set(const std::string& key, Node value, Mark key_mark = {});
  bool erase(const std::string& key);

 private:
  Kind kind_ = Kind::null;
  Mark mark_;
  std::string text_;
  bool quoted_ = false;
  std::vector<Node> items_;                         // sequence items or map values
  std::vector<std::pair<std::string, Mark>> keys_;  // map keys, parallel to items_
};

}  // namespace trainer::config
