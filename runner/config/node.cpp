// config::Node construction and map access.
#include "runner/config/node.h"

namespace trainer::config {

std::string to_string(const Mark& mark) {
  if (mark.file == kGridFlags && mark.line > 0) return "--grid flag " + std::to_string(mark.line);
  std::string out = mark.file.empty() ? "<unknown>" : mark.file;
  if (mark.line > 0) out += ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column);
  return out;
}

Node Node::scalar(std::string text, Mark mark, bool quoted) {
  Node n;
  n.kind_ = Kind::scalar;
  n.text_ = std::move(text);
  n.mark_ = std::move(mark);
  n.quoted_ = quoted;
  return n;
}

Node Node::sequence(Mark mark) {
  Node n;
  n.kind_ = Kind::sequence;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::map(Mark mark) {
  Node n;
  n.kind_ = Kind::map;
  n.mark_ = std::move(mark);
  return n;
}

const Node* Node::find(const std::string& key) const {
  if (kind_ != Kind::map) return nullptr;
  for (std::size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i].first == key) return &items_[i];
  return nullptr;
}

Node* Node::find(const std::string& key) {
  return const_cast<Node*>(static_cast<const Node*>(this)->find(key));
}

Node& Node::set(const std::string& key, Node value, Mark key_mark) {
  if (kind_ != Kind::map) {
    kind_ = Kind::map;
    items_.clear();
    keys_.clear();
  }
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].first == key) {
      // Where the new value is set (an extending file, an override) is
      // where an error about it points.
      keys_[i].second = key_mark.file.empty() ? value.mark() : std::move(key_mark);
      items_[i] = std::move(value);
      return items_[i];
    }
  }
  keys_.emplace_back(key, key_mark.file.empty() ? value.mark() : std::move(key_mark));
  items_.push_back(std::move(value));
  return items_.back();
}

bool Node::erase(const std::string& key) {
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].first == key) {
      keys_.erase(keys_.begin() + static_cast<long>(i));
      items_.erase(items_.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

}  // namespace trainer::config
